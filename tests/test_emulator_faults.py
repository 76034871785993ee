"""The emulator's refusals and scripted faults: what an uploader must survive and recognise."""

from __future__ import annotations

import http.client
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator, Fault
from fastfeed.emulator import upload as upload_module

DISK_FULL = "Feed not accepted due to insufficient disk space. Contact Google Enterprise Support."
FEED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">\n'
    b"<gsafeed><header><datasource>docs</datasource><feedtype>incremental</feedtype></header>"
    b'<group><record url="http://e.com/a" mimetype="text/plain"><content>a</content></record>'
    b"</group></gsafeed>"
)


@pytest.fixture
def client(tls: TLSFiles) -> Iterator[httpx.Client]:
    with httpx.Client(verify=tls.client_context(), timeout=30) as http:
        yield http


def push(client: httpx.Client, emu: Emulator, data: bytes = FEED) -> httpx.Response:
    return client.post(
        f"{emu.url}/xmlfeed",
        data={"datasource": "docs", "feedtype": "incremental"},
        files={"data": ("feed.xml", data, "text/xml")},
    )


def test_faults_apply_in_order_each_for_its_count(client: httpx.Client, emulator: Emulator) -> None:
    emulator.add_fault(Fault.http_status(503, times=2))
    emulator.add_fault(Fault.answer("Internal Error"))
    emulator.add_fault(Fault.disk_full())

    answers = [(r.status_code, r.text) for r in (push(client, emulator) for _ in range(5))]
    emulator.wait_idle()

    assert answers == [
        (503, "503 Service Unavailable"),
        (503, "503 Service Unavailable"),
        (200, "Internal Error"),
        (200, DISK_FULL),
        (200, "Success"),
    ]
    outcomes = [p.outcome for p in emulator.pushes()]
    assert [o.split(":")[0] for o in outcomes] == ["refused"] * 4 + ["applied"]
    # Only the accepted feed reached the index, and only once.
    assert list(emulator.documents("docs")) == ["http://e.com/a"]


def test_dropped_connection_gets_no_answer_and_nothing_is_kept(
    client: httpx.Client, emulator: Emulator
) -> None:
    emulator.add_fault(Fault.drop_connection(after_bytes=100))

    with pytest.raises(httpx.TransportError):
        push(client, emulator, FEED + b" " * 100_000)
    retry = push(client, emulator)
    emulator.wait_idle()

    assert retry.text == "Success"
    first, second = emulator.pushes()
    assert first.outcome == "refused: connection dropped after 100 bytes"
    assert second.outcome == "applied"


def test_slow_answer_outlasts_a_short_client_timeout(tls: TLSFiles, emulator: Emulator) -> None:
    emulator.add_fault(Fault.slow(seconds=1.0))

    with (
        httpx.Client(verify=tls.client_context(), timeout=0.2) as impatient,
        pytest.raises(httpx.TimeoutException),
    ):
        push(impatient, emulator)


def test_slow_answer_still_accepts_the_feed(client: httpx.Client, emulator: Emulator) -> None:
    emulator.add_fault(Fault.slow(seconds=0.1))

    assert push(client, emulator).text == "Success"


def test_untrusted_client_is_refused_like_the_appliance(
    client: httpx.Client, make_emulator: Callable[..., Emulator]
) -> None:
    strict = make_emulator(trusted_ips=["192.0.2.7"])

    response = push(client, strict)

    assert (response.status_code, response.text) == (200, "Error - Unauthorized Request")
    assert strict.pushes()[0].outcome == "refused: 127.0.0.1 is not a trusted IP"
    assert strict.backlog == 0


@pytest.mark.parametrize("path", ["/xmlfeed", "/xmlgroups"])
def test_a_get_of_the_feedergate_says_whether_it_takes_feeds(
    client: httpx.Client, make_emulator: Callable[..., Emulator], path: str
) -> None:
    """As Google's Connector Manager probes it: 400 (no form) while feeds are taken, 200 with
    the refusal otherwise."""
    open_to_us, closed = make_emulator(), make_emulator(trusted_ips=["192.0.2.7"])

    assert client.get(open_to_us.url + path).status_code == 400
    refused = client.get(closed.url + path)
    assert (refused.status_code, refused.text) == (200, "Error - Unauthorized Request")
    assert open_to_us.pushes() == closed.pushes() == []


@pytest.mark.parametrize("path", ["/getdtd", "/gsafeed.dtd"])
def test_the_feedergate_serves_the_gsafeed_dtd(
    client: httpx.Client, emulator: Emulator, path: str
) -> None:
    """At /getdtd, as Google's Connector Manager asks, and at /gsafeed.dtd, as the guide says."""
    answer = client.get(emulator.url + path)

    assert answer.status_code == 200
    assert "<!ATTLIST content encoding (base64binary|base64compressed) #IMPLIED>" in answer.text


def test_trusted_client_is_accepted(
    client: httpx.Client, make_emulator: Callable[..., Emulator]
) -> None:
    trusting = make_emulator(trusted_ips=["127.0.0.1"])

    assert push(client, trusting).text == "Success"


def test_declared_body_over_1_gb_is_refused_before_reading(
    tls: TLSFiles, emulator: Emulator
) -> None:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", emulator.port, context=tls.client_context(), timeout=30
    )
    conn.putrequest("POST", "/xmlfeed")
    conn.putheader("Content-Type", "multipart/form-data; boundary=b")
    conn.putheader("Content-Length", str(10**9 + 1))
    conn.endheaders()
    conn.send(b"--b\r\n")

    response = conn.getresponse()

    assert response.status == 413
    assert "1 GB" in response.read().decode()
    conn.close()
    assert emulator.pushes()[0].outcome.startswith("refused: Feed refused: 1000000001 bytes")


def test_streamed_feed_over_the_limit_is_refused(
    client: httpx.Client, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sending a real gigabyte would take the suite's time budget; the limit is scaled down instead.
    monkeypatch.setattr(upload_module, "MAX_FEED_BYTES", 1000)

    response = push(client, emulator, FEED + b" " * 1000)

    assert response.status_code == 413
    assert emulator.backlog == 0
    assert list(emulator.data_dir.joinpath("feeds").iterdir()) == []


def test_backlog_unsupported_answers_404(client: httpx.Client, emulator: Emulator) -> None:
    emulator.backlog_unsupported = True

    assert client.get(f"{emulator.url}/getbacklogcount").status_code == 404


def test_faults_and_settings_over_http(client: httpx.Client, emulator: Emulator) -> None:
    """What a CLI test uses to script an emulator running in another process."""
    queued = client.post(
        f"{emulator.url}/_emulator/faults",
        json=[{"kind": "disk_full"}, {"kind": "http_status", "status": 500, "times": 1}],
    )
    assert queued.status_code == 200 and len(queued.json()) == 2
    assert client.get(f"{emulator.url}/_emulator/faults").json()[1]["status"] == 500

    assert push(client, emulator).text == DISK_FULL
    assert push(client, emulator).status_code == 500

    settings = client.post(
        f"{emulator.url}/_emulator/settings",
        json={"backlog_unsupported": True, "feeder_paused": True},
    )
    assert settings.json() == {"backlog_unsupported": True, "feeder_paused": True}
    assert push(client, emulator).text == "Success"
    assert emulator.backlog == 1
    assert client.get(f"{emulator.url}/getbacklogcount").status_code == 404

    client.post(f"{emulator.url}/_emulator/settings", json={"feeder_paused": False})
    emulator.wait_idle()
    assert list(emulator.documents("docs")) == ["http://e.com/a"]


@pytest.mark.parametrize(
    "body",
    [{"kind": "explode"}, {"kind": "http_status", "status": 42}, {"kind": "slow", "delay": 1}],
)
def test_invalid_fault_scripts_are_refused_with_the_reason(
    client: httpx.Client, emulator: Emulator, body: dict[str, object]
) -> None:
    response = client.post(f"{emulator.url}/_emulator/faults", json=body)

    assert response.status_code == 400
    assert response.text.startswith("invalid fault: ")
    assert client.get(f"{emulator.url}/_emulator/faults").json() == []


def test_status_shows_outcomes_like_the_feeds_page(
    client: httpx.Client, emulator: Emulator
) -> None:
    push(client, emulator)
    push(client, emulator, FEED.replace(b'mimetype="text/plain"', b""))
    emulator.add_fault(Fault.disk_full())
    push(client, emulator)
    emulator.wait_idle()

    status = client.get(f"{emulator.url}/status.json").json()
    [docs] = status["datasources"]
    assert (docs["name"], docs["documents"], status["backlog"]) == ("docs", 1, 0)
    outcomes = [p["outcome"] for p in docs["last_pushes"]]
    assert outcomes[0].startswith("refused: HTTP 200 Feed not accepted")
    assert outcomes[1].startswith("failed in error: ") and "mimetype" in outcomes[1]
    assert outcomes[2] == "applied" and docs["last_pushes"][2]["records"] == 1

    page = client.get(f"{emulator.url}/status")
    assert page.headers["content-type"].startswith("text/html")
    assert '<section class="source" id="datasource-docs">' in page.text
    assert '<span class="badge failed">failed</span>' in page.text


def test_the_controls_obey_the_trusted_ips(
    make_emulator: Callable[..., Emulator], tls: Any
) -> None:
    emulator = make_emulator(trusted_ips=["10.1.2.3"])
    with httpx.Client(verify=tls.client_context()) as client:
        posted = client.post(f"{emulator.url}/_emulator/faults", json={"kind": "disk_full"})
        listed = client.get(f"{emulator.url}/_emulator/faults")
        changed = client.post(f"{emulator.url}/_emulator/settings", json={"feeder_paused": True})
    assert [r.status_code for r in (posted, listed, changed)] == [403, 403, 403]
    assert "127.0.0.1 is not a trusted IP" in posted.text
    assert emulator.state.faults.pending() == [] and not emulator.state.feeder.paused
