"""Pushing Thunderstone sets to the emulated appliance's recvdata.xml over real HTTPS: what
arrives, per-item failures, configuration errors, retries, the journal and the UI request."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
import pytest
from conftest import TLSFiles
from fastfeed.cli import main
from fastfeed.delivery.results import Outcome
from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator, Fault
from fastfeed.errors import PushError, ReplyError
from fastfeed.sets.journal import JOURNAL
from fastfeed.thunderstone.push import push, url_settings
from fastfeed.thunderstone.recvdata import UPDATE_INDEXES, _form_encode, parse_reply

Item = dict[str, Any]
DT = 'dt:dt="bin.base64"'


def item_xml(item: Item) -> str:
    """One <Item>: str values as text (base64 when XML 1.0 cannot carry them), bytes as
    base64, as the set builder writes them."""
    parts = []
    for name, value in item.items():
        if isinstance(value, bytes):
            parts.append(f"<{name} {DT}>{base64.b64encode(value).decode()}</{name}>")
        elif any(ord(c) < 0x20 and c not in "\t\n" for c in value):
            encoded = base64.b64encode(value.encode()).decode()
            parts.append(f"<{name} {DT}>{encoded}</{name}>")
        else:
            text = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            parts.append(f"<{name}>{text}</{name}>")
    return "<Item>" + "".join(parts) + "</Item>"


def write_set(directory: Path, profile: str, files: list[list[Item]]) -> Path:
    """A Thunderstone set: numbered documents and a manifest of kind thunderstone."""
    directory.mkdir()
    manifest = []
    for number, items in enumerate(files, 1):
        name = f"{profile}-{number:06d}.xml"
        data = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ThunderstoneReplication xmlns:dt="urn:schemas-microsoft-com:datatypes">\n'
            + "\n".join(item_xml(i) for i in items)
            + "\n</ThunderstoneReplication>\n"
        ).encode()
        (directory / name).write_bytes(data)
        entry = {
            "file": name,
            "datasource": profile,
            "feedtype": "",
            "records": len(items),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "kind": "thunderstone",
        }
        manifest.append(orjson.dumps(entry))
    (directory / "manifest.jsonl").write_bytes(b"\n".join(manifest) + b"\n")
    return directory


def insert(n: int, **fields: Any) -> Item:
    return {"Type": "I", "Url": f"http://docs.example.com/{n}", "Title": f"Doc {n}", **fields}


def recv_url(emulator: Emulator) -> str:
    return f"{emulator.url}/texis/dowalk/recvdata.xml"


@pytest.fixture
def settings(tls: TLSFiles) -> Callable[..., PushSettings]:
    def make(emulator: Emulator, **overrides: Any) -> PushSettings:
        values: dict[str, Any] = {
            "cacert": str(tls.ca_path),
            "backoff_base": 0.01,
            "backoff_max": 0.05,
        }
        values.update(overrides)
        return url_settings(recv_url(emulator), **values)

    return make


def outcomes(summary: Any) -> list[tuple[str, Outcome]]:
    return [(r.feed.entry.file, r.outcome) for r in summary.results]


def journaled(set_dir: Path) -> int:
    """Files (or UI requests) the journal records as accepted."""
    path = set_dir / JOURNAL
    return path.read_bytes().count(b'"accepted"') if path.exists() else 0


def ui_requests(emulator: Emulator) -> int:
    return sum(1 for r in emulator.thunderstone_requests() if r.items == [("UI", "", "OK")])


def test_a_set_reaches_the_profile_exactly(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    binary = bytes(range(256)) * 3
    text = "Prix: 100% + taxes & frais = <total> \u00e9t\u00e9 \u4e2d\u6587 \U0001f600"
    control = "bell\x07 and form feed\x0c, line\r\nbreak"
    set_dir = write_set(
        tmp_path / "set",
        "docs",
        [
            [
                insert(1, Body=text, Keywords="a, b", MimeType="text/plain", Charset="UTF-8"),
                insert(2, RawData=binary, MimeType="application/octet-stream", Size="768"),
                insert(3, Body=control, Description="d", Modified="2024-05-01 12:00:00"),
            ],
            [insert(4, Body="four"), {"Type": "D", "Url": "http://docs.example.com/3"}],
        ],
    )

    summary = push(set_dir, recv_url(emulator), settings(emulator))

    assert outcomes(summary) == [
        ("docs-000001.xml", Outcome.ACCEPTED),
        ("docs-000002.xml", Outcome.ACCEPTED),
        (UPDATE_INDEXES, Outcome.ACCEPTED),
    ]
    assert summary.ok and not summary.failed_items
    docs = emulator.thunderstone_documents("docs")
    assert sorted(docs) == [f"http://docs.example.com/{n}" for n in (1, 2, 4)]
    assert docs["http://docs.example.com/1"].fields == {
        "Title": "Doc 1",
        "Body": text,
        "Keywords": "a, b",
        "MimeType": "text/plain",
        "Charset": "UTF-8",
    }
    assert docs["http://docs.example.com/2"].raw_data == binary
    assert docs["http://docs.example.com/2"].encoded == {"RawData"}
    assert docs["http://docs.example.com/4"].fields["Body"] == "four"
    # UI once, after the files.
    requests = emulator.thunderstone_requests()
    assert [r.profile for r in requests] == ["docs"] * 3
    assert requests[-1].items == [("UI", "", "OK")]
    assert ui_requests(emulator) == 1


def test_base64_fallback_fields_arrive_decoded(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    control = "bell\x07 and form feed\x0c"
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1, Body=control, Meta="m\x01")]])

    push(set_dir, recv_url(emulator), settings(emulator))

    doc = emulator.thunderstone_documents("docs")["http://docs.example.com/1"]
    assert doc.fields["Body"] == control and doc.fields["Meta"] == "m\x01"
    assert doc.encoded == {"Body", "Meta"}


def test_form_encoding_round_trips_every_byte() -> None:
    data = bytes(range(256)) * 2 + b"%25+ %%"
    encoded = _form_encode(data)
    assert unquote_to_bytes(encoded.replace(b"+", b" ")) == data
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-._%+"
    assert set(encoded) <= set(alphabet)


def test_failed_items_are_reported_with_their_urls(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    set_dir = write_set(
        tmp_path / "set",
        "docs",
        [
            [
                insert(1),
                {"Type": "X", "Url": "http://docs.example.com/unknown-type"},
                insert(3),
                {"Type": "I", "Url": "http://docs.example.com/bad", "Charset": "no-such-charset"},
            ],
            [insert(5)],
        ],
    )

    summary = push(set_dir, recv_url(emulator), settings(emulator))

    assert outcomes(summary) == [
        ("docs-000001.xml", Outcome.FAILED),
        ("docs-000002.xml", Outcome.ACCEPTED),
        (UPDATE_INDEXES, Outcome.ACCEPTED),
    ]
    assert not summary.ok
    assert [(f.item, f.type, f.url, f.status) for f in summary.failed_items] == [
        (2, "X", "http://docs.example.com/unknown-type", "FAIL_UNKNOWNTYPE"),
        (4, "I", "http://docs.example.com/bad", "FAIL"),
    ]
    assert "2 of 4 items not loaded" in summary.results[0].message
    assert sorted(emulator.thunderstone_documents("docs")) == [
        f"http://docs.example.com/{n}" for n in (1, 3, 5)
    ]

    # The file with failures is not in the journal: the next run sends it (and UI) again.
    again = push(set_dir, recv_url(emulator), settings(emulator))
    assert outcomes(again) == [
        ("docs-000001.xml", Outcome.FAILED),
        ("docs-000002.xml", Outcome.SKIPPED),
        (UPDATE_INDEXES, Outcome.ACCEPTED),
    ]
    assert ui_requests(emulator) == 2


def test_cli_lists_failed_items_and_exits_1(
    tmp_path: Path,
    emulator: Emulator,
    tls: TLSFiles,
    capsys: pytest.CaptureFixture[str],
) -> None:
    set_dir = write_set(
        tmp_path / "set", "docs", [[insert(1), {"Type": "Z", "Url": "http://docs.example.com/z"}]]
    )
    argv = ["thunderstone", "push", str(set_dir), "--url", recv_url(emulator)]

    status = main([*argv, "--cacert", str(tls.ca_path), "--json"])

    out, err = capsys.readouterr()
    assert status == 1
    assert "item 2 Z http://docs.example.com/z: FAIL_UNKNOWNTYPE" in err
    summary = orjson.loads(out)
    assert summary["failed_items"][0]["url"] == "http://docs.example.com/z"
    assert summary["files"]["failed"] == 1


@pytest.mark.parametrize(
    ("options", "status", "hint"),
    [
        ({"trusted_ips": ["192.0.2.1"]}, "Not Allowed", "Cluster Members"),
        ({"thunderstone_profiles": ["news"]}, "No Profile", "the profile must exist"),
    ],
)
def test_configuration_errors_stop_with_status_3_and_a_hint(
    tmp_path: Path,
    make_emulator: Callable[..., Emulator],
    tls: TLSFiles,
    capsys: pytest.CaptureFixture[str],
    options: dict[str, Any],
    status: str,
    hint: str,
) -> None:
    emulator = make_emulator(**options)
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)], [insert(2)]])
    argv = ["thunderstone", "push", str(set_dir), "--url", recv_url(emulator)]

    assert main([*argv, "--cacert", str(tls.ca_path)]) == 3

    err = capsys.readouterr().err
    assert f"'{status}'" in err and hint in err and "'docs'" in err
    # Stopped at the first answer: nothing more was sent, nothing loaded, nothing journaled.
    assert len(emulator.thunderstone_requests()) == 1
    assert emulator.thunderstone_documents("docs") == {}
    assert not (set_dir / "push-journal.jsonl").read_bytes()


def test_a_configured_profile_is_accepted(
    tmp_path: Path, make_emulator: Callable[..., Emulator], settings: Callable[..., PushSettings]
) -> None:
    emulator = make_emulator(thunderstone_profiles=["news", "docs"])
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)]])

    assert push(set_dir, recv_url(emulator), settings(emulator)).ok
    assert list(emulator.thunderstone_documents("docs")) == ["http://docs.example.com/1"]


def test_retries_5xx_and_dropped_connections(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)], [insert(2)]])
    emulator.add_fault(Fault.http_status(503, times=2))
    emulator.add_fault(Fault.drop_connection(after_bytes=20))

    summary = push(set_dir, recv_url(emulator), settings(emulator))

    assert summary.ok
    assert [r.attempts for r in summary.results] == [4, 1, 1]
    assert summary.retries == 3
    assert sorted(emulator.thunderstone_documents("docs")) == [
        "http://docs.example.com/1",
        "http://docs.example.com/2",
    ]


def test_gives_up_blocks_the_rest_of_the_set_and_resumes_from_the_journal(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)], [insert(2)], [insert(3)]])
    emulator.add_fault(Fault.slow(0))  # the first file goes through
    emulator.add_fault(Fault.http_status(502, times=2))

    summary = push(set_dir, recv_url(emulator), settings(emulator, retries=1))

    assert outcomes(summary) == [
        ("docs-000001.xml", Outcome.ACCEPTED),
        ("docs-000002.xml", Outcome.FAILED),
        ("docs-000003.xml", Outcome.BLOCKED),
        (UPDATE_INDEXES, Outcome.BLOCKED),
    ]
    assert "502" in summary.results[1].message and "gave up after 2" in summary.results[1].message
    assert ui_requests(emulator) == 0

    resumed = push(set_dir, recv_url(emulator), settings(emulator))
    assert outcomes(resumed) == [
        ("docs-000001.xml", Outcome.SKIPPED),
        ("docs-000002.xml", Outcome.ACCEPTED),
        ("docs-000003.xml", Outcome.ACCEPTED),
        (UPDATE_INDEXES, Outcome.ACCEPTED),
    ]
    assert len(emulator.thunderstone_documents("docs")) == 3

    # Everything done: a third run sends nothing at all, UI included.
    sent = len(emulator.thunderstone_requests())
    done = push(set_dir, recv_url(emulator), settings(emulator))
    assert {o for _, o in outcomes(done)} == {Outcome.SKIPPED}
    assert len(emulator.thunderstone_requests()) == sent
    assert ui_requests(emulator) == 1


def test_sets_go_in_order_each_with_its_ui(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    docs = write_set(tmp_path / "a", "docs", [[insert(1)], [insert(2)]])
    news = write_set(tmp_path / "b", "news", [[insert(9)]])

    assert push([docs, news], recv_url(emulator), settings(emulator)).ok

    sent = [(r.profile, r.items[0][0]) for r in emulator.thunderstone_requests()]
    assert sent == [("docs", "I"), ("docs", "I"), ("docs", "UI"), ("news", "I"), ("news", "UI")]


def test_an_answer_that_is_not_a_reply_fails_the_file(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)]])
    emulator.add_fault(Fault.answer("<html><body>Login</body></html>"))

    summary = push(set_dir, recv_url(emulator), settings(emulator))

    assert outcomes(summary)[0] == ("docs-000001.xml", Outcome.FAILED)
    assert "not a Thunderstone reply" in summary.results[0].message


def test_replies_are_parsed_strictly() -> None:
    ok = b"<ThunderstoneReplicationResult><ItemResult><Type>DP</Type><DP>3</DP>"
    ok += b"<Status>OK</Status><Info/></ItemResult><Rows>1</Rows></ThunderstoneReplicationResult>"
    assert [(r.type, r.status, r.deleted) for r in parse_reply(ok)] == [("DP", "OK", 3)]
    bomb = (
        b'<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        b"<ThunderstoneReplicationResult><ItemResult><Status>&b;</Status></ItemResult>"
        b"</ThunderstoneReplicationResult>"
    )
    with pytest.raises(ReplyError, match="DOCTYPE"):
        parse_reply(bomb)
    with pytest.raises(ReplyError, match="not a ThunderstoneReplicationResult"):
        parse_reply(b"<Other/>")


def test_tls_failure_and_wrong_url_are_refused(
    tmp_path: Path, emulator: Emulator, settings: Callable[..., PushSettings]
) -> None:
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)]])
    with pytest.raises(PushError, match="--cacert") as tls_failure:
        push(set_dir, recv_url(emulator))  # the system's CAs do not know the test CA
    assert tls_failure.value.refused

    wrong = f"{emulator.url}/texis/nowalk/recvdata.xml"
    with pytest.raises(PushError, match="HTTP 404") as not_found:
        push(set_dir, wrong, url_settings(wrong, cacert=settings(emulator).cacert))
    assert not_found.value.refused


def test_a_push_killed_mid_set_resumes_and_sends_ui_once(
    tmp_path: Path, emulator: Emulator, tls: TLSFiles, settings: Callable[..., PushSettings]
) -> None:
    set_dir = write_set(tmp_path / "set", "docs", [[insert(1)], [insert(2)], [insert(3)]])
    emulator.add_fault(Fault.slow(0))
    # Holds the second file while the push is killed (which the test's end waits for).
    emulator.add_fault(Fault.slow(1.5))
    argv = [sys.executable, "-m", "fastfeed", "thunderstone", "push", str(set_dir)]
    argv += ["--url", recv_url(emulator), "--cacert", str(tls.ca_path)]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not journaled(set_dir):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the first file was never accepted"
            time.sleep(0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
    emulator.clear_faults()

    resumed = push(set_dir, recv_url(emulator), settings(emulator))

    assert resumed.ok
    assert outcomes(resumed)[0] == ("docs-000001.xml", Outcome.SKIPPED)
    assert outcomes(resumed)[-1] == (UPDATE_INDEXES, Outcome.ACCEPTED)
    first_file = [
        r
        for r in emulator.thunderstone_requests()
        if r.items[:1] == [("I", "http://docs.example.com/1", "OK")]
    ]
    assert len(first_file) == 1
    assert ui_requests(emulator) == 1
    assert len(emulator.thunderstone_documents("docs")) == 3
