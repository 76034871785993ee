"""The emulated appliance, driven over real HTTPS like the uploader drives a real one."""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator

DOCTYPE = '<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">'


def feed(datasource: str, feedtype: str, *groups: str) -> bytes:
    body = "".join(groups) or "<group/>"
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{DOCTYPE}\n<gsafeed><header>'
        f"<datasource>{datasource}</datasource><feedtype>{feedtype}</feedtype></header>"
        f"{body}</gsafeed>"
    ).encode()


def record(url: str, content: str | None = None, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    inner = f"<content>{content}</content>" if content is not None else ""
    return f'<record url="{url}" mimetype="text/plain"{extra}>{inner}</record>'


def group(*records: str, action: str | None = None) -> str:
    attr = f' action="{action}"' if action else ""
    return f"<group{attr}>{''.join(records)}</group>"


@pytest.fixture
def client(tls: TLSFiles) -> Iterator[httpx.Client]:
    with httpx.Client(verify=tls.client_context(), timeout=30) as http:
        yield http


def push(
    client: httpx.Client,
    emu: Emulator,
    source: str,
    feedtype: str,
    data: bytes,
    *,
    groups: bool = False,
) -> httpx.Response:
    """POSTs a feed to /xmlfeed for datasource `source` (with `groups`, a groups feed to
    /xmlgroups for groupsource `source`) as a multipart form, as the pushers do."""
    path, field, name = (
        ("xmlgroups", "groupsource", "groups.xml")
        if groups
        else ("xmlfeed", "datasource", "feed.xml")
    )
    return client.post(
        f"{emu.url}/{path}",
        data={field: source, "feedtype": feedtype},
        files={"data": (name, data, "text/xml")},
    )


def test_multipart_push_is_answered_success_and_indexed(
    client: httpx.Client, emulator: Emulator
) -> None:
    data = feed("docs", "full", group(record("http://example.com/a", "hello")))

    response = push(client, emulator, "docs", "full", data)
    emulator.wait_idle()

    assert (response.status_code, response.text) == (200, "Success")
    assert response.headers["content-type"].startswith("text/plain")
    doc = emulator.documents("docs")["http://example.com/a"]
    assert (doc.content, doc.mimetype, doc.kind) == (b"hello", "text/plain", "content")
    [received] = emulator.pushes()
    assert (received.datasource, received.feedtype, received.outcome) == ("docs", "full", "applied")
    assert (received.bytes, received.sha256) == (len(data), hashlib.sha256(data).hexdigest())


def test_urlencoded_push_is_decoded_exactly(client: httpx.Client, emulator: Emulator) -> None:
    # '+', '%', '&' and '=' in the feed must survive form encoding.
    data = feed(
        "docs", "incremental", group(record("http://example.com/q?a=1&amp;b=2", "1+1=2 &amp; 50%"))
    )

    response = client.post(
        f"{emulator.url}/xmlfeed",
        data={"feedtype": "incremental", "datasource": "docs", "data": data.decode()},
    )
    emulator.wait_idle()

    assert response.text == "Success"
    assert emulator.pushes()[0].sha256 == hashlib.sha256(data).hexdigest()
    assert emulator.documents("docs")["http://example.com/q?a=1&b=2"].content == b"1+1=2 & 50%"


def test_post_fields_win_over_the_feed_header(client: httpx.Client, emulator: Emulator) -> None:
    data = feed("other", "full", group(record("http://example.com/a", "x")))

    push(client, emulator, "docs", "incremental", data)
    emulator.wait_idle()

    assert set(emulator.documents("docs")) == {"http://example.com/a"}
    assert emulator.documents("other") == {}


@pytest.mark.parametrize(
    ("pushed_as", "header", "body"),
    [
        # Content and a pagerank: refused by a metadata-and-url header, valid for the POST.
        (
            ("docs", "incremental"),
            ("docs", "metadata-and-url"),
            record("http://e.com/a", "x", pagerank="80"),
        ),
        # Metadata alone: refused by a full header, valid (and ignored) for the POST.
        (
            ("web", "incremental"),
            ("docs", "full"),
            '<record url="http://e.com/a" mimetype="text/html">'
            '<metadata><meta name="author" content="ann"/></metadata></record>',
        ),
    ],
    ids=["content-under-a-metadata-and-url-header", "metadata-alone-under-a-full-header"],
)
def test_the_feed_is_validated_as_the_post_says_not_as_its_header(
    client: httpx.Client,
    emulator: Emulator,
    pushed_as: tuple[str, str],
    header: tuple[str, str],
    body: str,
) -> None:
    """The guide: "Any datasource or feedtype values that you specify within the XML document
    are ignored", by validation as by applying."""
    data = feed(*header, group(body))

    push(client, emulator, *pushed_as, data)
    emulator.wait_idle()

    [pushed] = emulator.pushes()
    assert pushed.outcome == "applied"
    assert set(emulator.documents(pushed_as[0])) == {"http://e.com/a"}


def test_full_feed_replaces_the_datasource_only(client: httpx.Client, emulator: Emulator) -> None:
    push(
        client,
        emulator,
        "docs",
        "full",
        feed("docs", "full", group(record("http://e.com/a", "a"), record("http://e.com/b", "b"))),
    )
    push(
        client, emulator, "keep", "full", feed("keep", "full", group(record("http://e.com/k", "k")))
    )
    push(
        client, emulator, "docs", "full", feed("docs", "full", group(record("http://e.com/c", "c")))
    )
    emulator.wait_idle()

    assert set(emulator.documents("docs")) == {"http://e.com/c"}
    assert set(emulator.documents("keep")) == {"http://e.com/k"}


def test_empty_full_feed_deletes_every_document(client: httpx.Client, emulator: Emulator) -> None:
    push(
        client, emulator, "docs", "full", feed("docs", "full", group(record("http://e.com/a", "a")))
    )
    push(client, emulator, "docs", "full", feed("docs", "full", "<group/>"))
    emulator.wait_idle()

    assert emulator.documents("docs") == {}
    assert [p.outcome for p in emulator.pushes()] == ["applied", "applied"]


def test_incremental_adds_updates_and_deletes(client: httpx.Client, emulator: Emulator) -> None:
    first = group(
        record("http://e.com/a", "a1"),
        record("http://e.com/b", "b1"),
        record("http://e.com/c", "c1"),
    )
    push(client, emulator, "docs", "incremental", feed("docs", "incremental", first))
    second = group(
        record("http://e.com/a"),  # the group deletes it
        record("http://e.com/b", "b2", action="add"),  # the record's action overrides the group's
        action="delete",
    )
    push(client, emulator, "docs", "incremental", feed("docs", "incremental", second))
    emulator.wait_idle()

    docs = emulator.documents("docs")
    assert set(docs) == {"http://e.com/b", "http://e.com/c"}
    assert docs["http://e.com/b"].content == b"b2"
    assert docs["http://e.com/c"].content == b"c1"
    assert [(p.added, p.deleted) for p in emulator.pushes()] == [(3, 0), (1, 1)]


def test_encoded_content_and_metadata_are_decoded(client: httpx.Client, emulator: Emulator) -> None:
    binary = bytes(range(256))
    packed = base64.b64encode(zlib.compress(b"compressed text" * 10)).decode()
    name = base64.b64encode(b"project_name").decode()
    value = base64.b64encode("caf\u00e9 <&>".encode()).decode()
    records = (
        f'<record url="http://e.com/bin" mimetype="application/octet-stream">'
        f'<content encoding="base64binary">{base64.b64encode(binary).decode()}</content></record>'
        f'<record url="http://e.com/z" mimetype="text/html" displayurl="http://show.e.com/z"'
        f' last-modified="Mon, 15 Nov 2004 04:58:08 GMT" lock="true">'
        f'<metadata><meta name="plain" content="v1"/>'
        f'<meta encoding="base64binary" name="{name}" content="{value}"/></metadata>'
        f'<content encoding="base64compressed">{packed}</content></record>'
    )
    push(client, emulator, "docs", "full", feed("docs", "full", group(records)))
    emulator.wait_idle()

    docs = emulator.documents("docs")
    assert docs["http://e.com/bin"].content == binary
    z = docs["http://e.com/z"]
    assert z.content == b"compressed text" * 10
    assert z.metadata == [("plain", "v1"), ("project_name", "caf\u00e9 <&>")]
    assert (z.displayurl, z.last_modified, z.lock) == (
        "http://show.e.com/z",
        "Mon, 15 Nov 2004 04:58:08 GMT",
        True,
    )


def test_metadata_and_url_feed_records_urls_without_content(
    client: httpx.Client, emulator: Emulator
) -> None:
    meta = '<metadata><meta name="author" content="ann"/></metadata>'
    records = (
        f'<record url="http://e.com/page" mimetype="text/html" crawl-immediately="true">{meta}'
        "</record>"
    )
    push(
        client, emulator, "web", "metadata-and-url", feed("web", "metadata-and-url", group(records))
    )
    emulator.wait_idle()

    page = emulator.documents("web")["http://e.com/page"]
    assert (page.kind, page.content, page.crawl_immediately) == ("web", None, True)
    assert page.metadata == [("author", "ann")]


def test_an_incremental_web_feed_ignores_metadata_as_the_appliance_does(
    client: httpx.Client, emulator: Emulator
) -> None:
    meta = (
        '<metadata><meta name="author" content="ann"/>'
        '<meta name="google:aclusers" content="joe"/></metadata>'
    )
    records = f'<record url="http://e.com/page" mimetype="text/html">{meta}</record>'
    push(client, emulator, "web", "incremental", feed("web", "incremental", group(records)))
    emulator.wait_idle()

    page = emulator.documents("web")["http://e.com/page"]
    assert (page.kind, page.metadata) == ("web", [])
    assert emulator.acls("web") == {}
    [pushed] = emulator.pushes()
    assert pushed.status() == "processed"


def test_a_records_pagerank_overrides_its_groups(client: httpx.Client, emulator: Emulator) -> None:
    records = record("http://e.com/a", "a", pagerank="90") + record("http://e.com/b", "b")
    data = feed("docs", "incremental", group(records).replace("<group>", '<group pagerank="80">'))

    push(client, emulator, "docs", "incremental", data)
    emulator.wait_idle()

    docs = emulator.documents("docs")
    assert (docs["http://e.com/a"].pagerank, docs["http://e.com/b"].pagerank) == (90, 80)


def test_incremental_metadata_only_keeps_the_content(
    client: httpx.Client, emulator: Emulator
) -> None:
    push(
        client,
        emulator,
        "docs",
        "incremental",
        feed("docs", "incremental", group(record("http://e.com/a", "body"))),
    )
    meta = (
        '<record url="http://e.com/a" mimetype="text/plain">'
        '<metadata><meta name="k" content="v"/></metadata></record>'
    )
    push(client, emulator, "docs", "incremental", feed("docs", "incremental", group(meta)))
    emulator.wait_idle()

    doc = emulator.documents("docs")["http://e.com/a"]
    assert (doc.content, doc.metadata) == (b"body", [("k", "v")])


def test_invalid_feed_is_accepted_then_failed_in_error_and_not_applied(
    client: httpx.Client, emulator: Emulator
) -> None:
    push(
        client, emulator, "docs", "full", feed("docs", "full", group(record("http://e.com/a", "a")))
    )
    bad = feed(
        "docs",
        "full",
        group('<record url="http://e.com/b"><content>no mimetype</content></record>'),
    )

    response = push(client, emulator, "docs", "full", bad)
    emulator.wait_idle()

    assert response.text == "Success"  # the feedergate only receives; the feeder validates
    outcome = emulator.pushes()[1].outcome
    assert outcome.startswith("failed in error: ") and "mimetype" in outcome
    assert set(emulator.documents("docs")) == {"http://e.com/a"}


def test_malformed_xml_and_entities_are_not_expanded(
    client: httpx.Client, emulator: Emulator
) -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE gsafeed [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b"<gsafeed><header><datasource>docs</datasource><feedtype>full</feedtype></header>"
        b'<group><record url="http://e.com/a" mimetype="text/plain"><content>&x;</content>'
        b"</record></group></gsafeed>"
    )
    push(client, emulator, "docs", "full", bomb)
    push(client, emulator, "docs", "full", b"<gsafeed><header>")
    emulator.wait_idle()

    assert all(p.outcome.startswith("failed in error: ") for p in emulator.pushes())
    assert emulator.documents("docs") == {}


def test_backlog_counts_files_until_the_feeder_processes_them(
    client: httpx.Client, emulator: Emulator
) -> None:
    emulator.pause_feeder()
    for name in "abc":
        push(
            client,
            emulator,
            "docs",
            "incremental",
            feed("docs", "incremental", group(record(f"http://e.com/{name}", name))),
        )

    held = client.get(f"{emulator.url}/getbacklogcount")
    assert (held.status_code, held.text, emulator.backlog) == (200, "3", 3)
    assert [p.outcome for p in emulator.pushes()] == ["accepted"] * 3
    assert emulator.documents("docs") == {}

    emulator.resume_feeder()
    emulator.wait_idle()
    assert client.get(f"{emulator.url}/getbacklogcount").text == "0"
    assert len(emulator.documents("docs")) == 3


def test_wait_idle_times_out_while_the_feeder_is_paused(
    client: httpx.Client, emulator: Emulator
) -> None:
    emulator.pause_feeder()
    push(client, emulator, "docs", "full", feed("docs", "full"))

    with pytest.raises(TimeoutError, match="1 feed file"):
        emulator.wait_idle(timeout=0.2)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"feedtype": "full"}, "missing form field(s) datasource, data"),
        ({"datasource": "docs", "feedtype": "partial", "data": "x"}, "feedtype 'partial'"),
        ({"datasource": "9 bad", "feedtype": "full", "data": "x"}, "datasource '9 bad'"),
    ],
)
def test_missing_or_invalid_fields_are_refused_with_400(
    client: httpx.Client, emulator: Emulator, fields: dict[str, str], expected: str
) -> None:
    response = client.post(f"{emulator.url}/xmlfeed", data=fields)

    assert response.status_code == 400
    assert expected in response.text
    assert emulator.pushes()[0].outcome.startswith("refused: ")
    assert emulator.backlog == 0


def test_drain_rate_keeps_files_in_the_backlog(
    client: httpx.Client, make_emulator: Callable[..., Emulator]
) -> None:
    slow = make_emulator(drain_per_second=1.0)

    push(client, slow, "docs", "full", feed("docs", "full", group(record("http://e.com/a", "a"))))

    assert client.get(f"{slow.url}/getbacklogcount").text == "1"
    slow.wait_idle()
    assert client.get(f"{slow.url}/getbacklogcount").text == "0"
    assert list(slow.documents("docs")) == ["http://e.com/a"]


def test_backlog_and_index_survive_a_restart_on_the_same_data_dir(
    client: httpx.Client, make_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    first = make_emulator(data_dir=tmp_path / "appliance")
    push(
        client,
        first,
        "docs",
        "incremental",
        feed("docs", "incremental", group(record("http://e.com/a", "a"))),
    )
    first.wait_idle()
    first.pause_feeder()
    push(
        client,
        first,
        "docs",
        "incremental",
        feed("docs", "incremental", group(record("http://e.com/b", "b"))),
    )
    first.stop()

    second = make_emulator(data_dir=tmp_path / "appliance")
    second.wait_idle()

    assert set(second.documents("docs")) == {"http://e.com/a", "http://e.com/b"}
    assert [p.outcome for p in second.pushes()] == ["applied", "applied"]
