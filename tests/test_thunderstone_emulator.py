"""The emulator's Thunderstone receiver, spoken to directly over HTTPS: each Type's effect on
the profile's documents, the reply's results, the form encodings and the refusals."""

from __future__ import annotations

import base64
from collections.abc import Callable

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator
from fastfeed.thunderstone.recvdata import parse_reply

HEAD = '<ThunderstoneReplication xmlns:dt="urn:schemas-microsoft-com:datatypes">'
Send = Callable[..., list[tuple[str, str, str]]]


@pytest.fixture
def send(emulator: Emulator, tls: TLSFiles) -> Send:
    """POSTs items (XML) for a profile; returns (Type, Status, Info) per result."""

    def post(
        *items: str, profile: str = "docs", multipart: bool = False
    ) -> list[tuple[str, str, str]]:
        data = f"{HEAD}{''.join(items)}</ThunderstoneReplication>"
        with httpx.Client(verify=tls.client_context()) as client:
            url = f"{emulator.url}/texis/dowalk/recvdata.xml"
            if multipart:
                files = {"data": ("data.xml", data.encode(), "text/xml")}
                response = client.post(url, data={"profile": profile}, files=files)
            else:
                response = client.post(url, data={"profile": profile, "data": data})
        assert response.status_code == 200
        return [(r.type, r.status, r.info) for r in parse_reply(response.content)]

    return post


def item(kind: str, url: str, **fields: str) -> str:
    body = "".join(f"<{name}>{value}</{name}>" for name, value in fields.items())
    return f"<Item><Type>{kind}</Type><Url>{url}</Url>{body}</Item>"


def test_update_keeps_the_fields_it_does_not_give(emulator: Emulator, send: Send) -> None:
    raw = base64.b64encode(b"\x00pdf").decode()
    update = item("U", "http://e.example.com/1", Title="New").replace(
        "</Item>", f'<RawData dt:dt="bin.base64">{raw}</RawData></Item>'
    )
    send(item("I", "http://e.example.com/1", Title="Old", Body="body"), update, multipart=True)
    doc = emulator.thunderstone_documents("docs")["http://e.example.com/1"]
    assert doc.fields == {"Title": "New", "Body": "body"}
    assert doc.raw_data == b"\x00pdf"

    # An insert replaces everything the URL had.
    send(item("I", "http://e.example.com/1", Title="Again"))
    doc = emulator.thunderstone_documents("docs")["http://e.example.com/1"]
    assert doc.fields == {"Title": "Again"} and doc.raw_data is None


def test_delete_and_delete_by_pattern(emulator: Emulator, send: Send) -> None:
    urls = [
        "http://e.example.com/dir/a",
        "http://e.example.com/dir/sub/b?x=1",
        "http://e.example.com/dirt",
        "http://e.example.com/other",
    ]
    send(*(item("I", u) for u in urls))

    results = send(
        item("DP", "http://e.example.com/dir/*"),
        item("D", "http://e.example.com/other"),
        item("D", "http://e.example.com/never"),
    )

    assert results == [("DP", "OK", ""), ("D", "OK", ""), ("D", "OK", "Not found")]
    assert list(emulator.thunderstone_documents("docs")) == ["http://e.example.com/dirt"]


def test_pattern_delete_reports_its_count(emulator: Emulator, tls: TLSFiles, send: Send) -> None:
    send(item("I", "http://e.example.com/a1"), item("I", "http://e.example.com/a2"))
    data = f"{HEAD}{item('DP', 'http://e.example.com/a*')}</ThunderstoneReplication>"
    response = httpx.post(
        f"{emulator.url}/texis/dowalk/recvdata.xml",
        data={"profile": "docs", "data": data},
        verify=tls.client_context(),
    )
    assert parse_reply(response.content)[0].deleted == 2


def test_profiles_are_apart(emulator: Emulator, send: Send) -> None:
    send(item("I", "http://e.example.com/1"), profile="a")
    send(item("I", "http://e.example.com/2"), profile="b")
    assert list(emulator.thunderstone_documents("a")) == ["http://e.example.com/1"]
    assert list(emulator.thunderstone_documents("b")) == ["http://e.example.com/2"]


def test_unknown_types_missing_urls_and_no_data(emulator: Emulator, send: Send) -> None:
    results = send(
        "<Item><Url>http://e.example.com/1</Url></Item>",
        item("Q", "http://e.example.com/2"),
        "<Item><Type>I</Type><Title>t</Title></Item>",
        "<Item><Type>UI</Type></Item>",
    )
    assert [(t, s) for t, s, _ in results] == [
        ("", "FAIL_UNKNOWNTYPE"),
        ("Q", "FAIL_UNKNOWNTYPE"),
        ("I", "FAIL"),
        ("UI", "OK"),
    ]
    assert send() == [("", "NODATA", "no <Item> in <ThunderstoneReplication>")]
    assert emulator.thunderstone_documents("docs") == {}


def test_unparseable_data_is_nodata(emulator: Emulator, tls: TLSFiles) -> None:
    response = httpx.post(
        f"{emulator.url}/texis/dowalk/recvdata.xml",
        data={"profile": "docs", "data": "<ThunderstoneReplication><Item>"},
        verify=tls.client_context(),
    )
    assert [r.status for r in parse_reply(response.content)] == ["NODATA"]


def test_a_request_without_profile_is_no_profile(send: Send) -> None:
    assert send(item("I", "http://e.example.com/1"), profile="")[0][1] == "No Profile"


def test_data_with_a_dtd_of_its_own_is_refused_as_a_feed_is(
    emulator: Emulator, tls: TLSFiles
) -> None:
    data = (
        '<?xml version="1.0"?><!DOCTYPE ThunderstoneReplication '
        '[<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        "<ThunderstoneReplication><Item><Type>I</Type><Url>http://e.example.com/1</Url>"
        "<Body>&x;</Body></Item></ThunderstoneReplication>"
    )
    response = httpx.post(
        f"{emulator.url}/texis/dowalk/recvdata.xml",
        data={"profile": "docs", "data": data},
        verify=tls.client_context(),
    )
    [result] = parse_reply(response.content)
    assert result.status == "NODATA" and "a DTD of its own" in result.info
    assert emulator.thunderstone_documents("docs") == {}
