"""`fastfeed seedlist serve`, crawled over real HTTPS (trustme certificates) by a crawler written
here from the seedlist response reference (004), not from fastfeed's code: it follows rel="next"
links from the first page to the last, parses every page strictly and fetches content from
atom:content src."""

from __future__ import annotations

import base64
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest
from conftest import TLSFiles
from fastfeed.seedlist import SeedlistStore
from fastfeed.seedlist.server import SeedlistServer
from lxml import etree

ATOM = "http://www.w3.org/2005/Atom"
WPLC = "http://www.ibm.com/wplc/atom/1.0"
NS = {"atom": ATOM, "wplc": WPLC}
#: Strict: no recovery from malformed XML, no entities, no network.
PARSER = etree.XMLParser(recover=False, resolve_entities=False, no_network=True)


@dataclass
class Crawl:
    #: Entries in page order: {"id", "action", ...} as `entry()` reads them.
    entries: list[dict[str, Any]] = field(default_factory=list)
    timestamp: str = ""
    pages: int = 0

    def by_action(self, action: str) -> dict[str, dict[str, Any]]:
        return {e["id"]: e for e in self.entries if e["action"] == action}


def entry(element: Any, client: httpx.Client) -> dict[str, Any]:
    """What an indexer takes from an entry; content is fetched when given by src."""
    action = element.find("wplc:action", NS)
    assert action is not None, "every entry carries wplc:action"
    result: dict[str, Any] = {
        "id": element.findtext("atom:id", namespaces=NS),
        "action": action.get("do"),
        "title": element.findtext("atom:title", namespaces=NS),
        "updated": element.findtext("atom:updated", namespaces=NS),
    }
    assert result["action"] in ("insert", "update", "delete")
    assert result["title"] is not None and result["updated"] is not None
    if result["action"] == "delete":
        return result
    result["fields"] = sorted(
        (f.get("id"), f.text or "") for f in element.findall("wplc:field", NS)
    )
    acls = element.find("wplc:acls", NS)
    result["acl"] = None if acls is None else [a.text for a in acls.findall("wplc:acl", NS)]
    result["authors"] = [a.text for a in element.findall("atom:author/atom:name", NS)]
    result["summary"] = element.findtext("atom:summary", namespaces=NS)
    link = element.find("atom:link[@rel='alternate']", NS)
    result["link"] = None if link is None else link.get("href")
    content = element.find("atom:content", NS)
    result["content"] = None
    if content is not None:
        src = content.get("src")
        if src is None:
            result["content"] = (content.text or "").encode()
            result["inline"] = content.get("type")
        else:
            response = client.get(src)
            assert response.status_code == 200, response.text
            result["content"] = response.content
            result["mimetype"] = content.get("type")
            assert response.headers["content-type"] == content.get("type")
    return result


def crawl(
    client: httpx.Client,
    url: str,
    *,
    timestamp: str | None = None,
    range_: int | None = None,
    after_first_page: Callable[[], object] | None = None,
) -> Crawl:
    """Crawls from the first page to the last and returns what it collected;
    `after_first_page` runs once, between the first page and the second."""
    params: dict[str, str] = {}
    if timestamp is not None:
        params["Timestamp"] = timestamp
    if range_ is not None:
        params["Range"] = str(range_)
    result = Crawl()
    next_url: str | None = str(httpx.URL(url, params=params))
    while next_url is not None:
        response = client.get(next_url)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/atom+xml")
        feed = etree.fromstring(response.content, PARSER)
        assert feed.tag == f"{{{ATOM}}}feed"
        assert feed.nsmap.get("wplc") == WPLC and feed.nsmap.get("atom") == ATOM
        result.pages += 1
        declared = {info.get("id") for info in feed.findall("wplc:fieldInfo", NS)}
        assert {"title", "updated"} <= declared
        for info in feed.findall("wplc:fieldInfo", NS):
            assert info.get("type") in ("Boolean", "string", "date", "double", "int", "long")
        for element in feed.findall("atom:entry", NS):
            got = entry(element, client)
            assert {name for name, _ in got.get("fields", [])} <= declared
            result.entries.append(got)
        link = feed.find("atom:link[@rel='next']", NS)
        if link is None:
            result.timestamp = feed.findtext("wplc:timestamp", namespaces=NS) or ""
            assert result.timestamp, "the last page carries wplc:timestamp"
            next_url = None
        else:
            assert feed.find("wplc:timestamp", NS) is None
            next_url = link.get("href")
            query = parse_qs(urlsplit(next_url).query)
            assert {"Range", "Start", "State"} <= set(query)
            if after_first_page is not None and result.pages == 1:
                after_first_page()
    return result


# The corpus and what a crawler must see of it


def record(i: int, version: int = 0) -> dict[str, Any]:
    """Document i: text, or binary for every tenth; an ACL on every fourth."""
    r: dict[str, Any] = {
        "url": f"http://docs.example.com/doc/{i}",
        "metadata": {
            "title": f"Document {i}",
            "dept": ["eng", "ops"][i % 2],
            "tag": [f"t{i % 3}", "all"],
        },
        "last_modified": 1_700_000_000 + i,
    }
    if i % 10 == 0:
        r["mimetype"] = "application/pdf"
        r["content_base64"] = base64.b64encode(bytes([i % 256, 0, 255, version]) * 50).decode()
    else:
        r["content"] = f"text of {i}, version {version} <&>"
    if i % 4 == 0:
        r["acl"] = {
            "principals": [
                {"name": f"User{i}", "scope": "user", "access": "permit", "case_sensitive": False},
                {"name": "staff", "scope": "group", "namespace": "corp"},
            ]
        }
    return r


def seen(r: dict[str, Any]) -> dict[str, Any]:
    """What the crawler must collect for record r: the mapping the README documents."""
    metadata = r["metadata"]
    fields = sorted(
        (name, value)
        for name, values in metadata.items()
        if name != "title"
        for value in (values if isinstance(values, list) else [values])
    )
    content = (
        base64.b64decode(r["content_base64"]) if "content_base64" in r else r["content"].encode()
    )
    acl = None
    if "acl" in r:
        acl = [
            f"{p['scope']}:{p.get('namespace', 'Default')}:"
            + (p["name"].lower() if p.get("case_sensitive") is False else p["name"])
            for p in r["acl"]["principals"]
        ]
    return {"title": metadata["title"], "fields": fields, "acl": acl, "content": content}


def collected(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry[k] for k in ("title", "fields", "acl", "content")}


def apply(known: dict[str, dict[str, Any]], changes: Crawl) -> None:
    """What an index does with a crawl's entries."""
    for e in changes.entries:
        if e["action"] == "delete":
            known.pop(e["id"], None)
        else:
            known[e["id"]] = collected(e)


# Fixtures


@pytest.fixture
def serve(tls: TLSFiles) -> Iterator[Callable[..., SeedlistServer]]:
    """Starts seedlist servers over HTTPS (options as SeedlistServer's); stops them after."""
    started: list[SeedlistServer] = []

    def start(path: Path, **options: Any) -> SeedlistServer:
        options.setdefault("tls", tls.server)
        server = SeedlistServer(path, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def client(tls: TLSFiles) -> Iterator[httpx.Client]:
    with httpx.Client(verify=tls.client_context(), timeout=30) as http:
        yield http


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "seedlist.sqlite"


# Crawling


def test_full_crawl_pages_through_a_large_corpus_then_incremental_gets_exactly_the_changes(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    records = {i: record(i) for i in range(2500)}
    with SeedlistStore(db) as store:
        store.load(records.values())
    server = serve(db)

    full = crawl(client, server.url, range_=100)

    assert full.pages == 25
    assert len(full.entries) == 2500
    assert {e["action"] for e in full.entries} == {"insert"}
    known = {e["id"]: collected(e) for e in full.entries}
    assert known == {r["url"]: seen(r) for r in records.values()}

    changes: list[dict[str, Any]] = []
    changes += [record(i, version=1) for i in range(1, 11)]  # updated (doc 10 is binary)
    changes += [records[i] for i in range(11, 16)]  # loaded again, unchanged
    changes += [{"url": records[i]["url"], "action": "delete"} for i in range(20, 27)]
    changes += [record(i) for i in range(2500, 2503)]  # new
    acl_changed = {**records[32], "acl": {"principals": [{"name": "Boss", "scope": "user"}]}}
    changes.append(acl_changed)
    with SeedlistStore(db) as store:
        summary = store.load(changes)
    assert (summary.inserted, summary.updated, summary.deleted, summary.unchanged) == (3, 11, 7, 5)

    delta = crawl(client, server.url, timestamp=full.timestamp, range_=4)

    url = "http://docs.example.com/doc/{}".format
    assert set(delta.by_action("insert")) == {url(i) for i in range(2500, 2503)}
    assert set(delta.by_action("update")) == {url(i) for i in [*range(1, 11), 32]}
    assert set(delta.by_action("delete")) == {url(i) for i in range(20, 27)}
    assert len(delta.entries) == 21 and delta.pages == 6
    apply(known, delta)
    current = {r["url"]: seen(r) for r in records.values()}
    for r in changes:
        if r.get("action") == "delete":
            del current[r["url"]]
        else:
            current[r["url"]] = seen(r)
    assert known == current
    assert known[url(32)]["acl"] == ["user:Default:Boss"]

    nothing = crawl(client, server.url, timestamp=delta.timestamp)
    assert nothing.entries == [] and nothing.pages == 1 and nothing.timestamp


def test_a_snapshot_load_tells_crawlers_what_left_the_source_and_nothing_else(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    records = {i: record(i) for i in range(40)}
    with SeedlistStore(db) as store:
        store.load(records.values())
    server = serve(db)
    full = crawl(client, server.url)
    known = {e["id"]: collected(e) for e in full.entries}

    # The whole source as it is now, exported anew: keys and metadata names in another order,
    # one document changed, one new, two gone.
    snapshot = [dict(reversed(r.items())) for i, r in records.items() if i not in (7, 8)]
    snapshot[3] = record(3, version=1)
    snapshot.append(record(40))
    with SeedlistStore(db) as store:
        summary = store.load(snapshot, snapshot=True)
    delta = crawl(client, server.url, timestamp=full.timestamp)

    url = "http://docs.example.com/doc/{}".format
    assert (summary.inserted, summary.updated, summary.deleted) == (1, 1, 2)
    assert [(e["action"], e["id"]) for e in delta.entries] == [
        ("update", url(3)), ("insert", url(40)), ("delete", url(7)), ("delete", url(8))
    ]  # fmt: skip
    apply(known, delta)
    assert known == {r["url"]: seen(r) for r in snapshot}
    again = crawl(client, server.url)
    assert {e["id"]: collected(e) for e in again.entries} == known


def test_documents_loaded_during_a_crawl_come_with_the_next_one(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(250))
    server = serve(db)

    def load_meanwhile() -> None:
        with SeedlistStore(db) as store:
            store.load(
                [
                    record(200, version=1),
                    {"url": record(150)["url"], "action": "delete"},
                    record(250),
                ]
            )

    full = crawl(client, server.url, range_=100, after_first_page=load_meanwhile)
    delta = crawl(client, server.url, timestamp=full.timestamp)

    known = {e["id"]: collected(e) for e in full.entries}
    assert len(known) == len(full.entries)  # none twice
    apply(known, delta)
    expected = {r["url"]: seen(r) for r in map(record, range(251)) if not r["url"].endswith("/150")}
    expected[record(200)["url"]] = seen(record(200, version=1))
    assert known == expected
    assert {e["action"] for e in delta.entries} == {"insert", "update", "delete"}


def test_crawls_begun_before_loads_get_exactly_the_state_they_began_at(
    db: Path, serve: Callable[..., SeedlistServer], tls: TLSFiles
) -> None:
    """Eight crawlers, begun before loads that update and delete while they page: each gets
    the 300 documents of its start, in their first versions, each once."""
    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(300))
    server = serve(db)
    crawlers = 8
    begun = threading.Barrier(crawlers + 1, timeout=30)
    results: list[Crawl] = []

    def one_crawl() -> None:
        with httpx.Client(verify=tls.client_context(), timeout=30) as own:
            results.append(crawl(own, server.url, range_=20, after_first_page=begun.wait))

    threads = [threading.Thread(target=one_crawl) for _ in range(crawlers)]
    for thread in threads:
        thread.start()
    begun.wait()
    with SeedlistStore(db) as store:
        for n in range(5):  # while they page: updates, deletes and a new document
            gone = range(250 + 5 * n, 255 + 5 * n)
            store.load(
                [record(i, version=1) for i in range(n * 40, n * 40 + 30)]
                + [{"url": record(i)["url"], "action": "delete"} for i in gone]
                + [record(300 + n)]
            )
    for thread in threads:
        thread.join(timeout=60)

    expected = {r["url"]: seen(r) for r in map(record, range(300))}
    assert len(results) == crawlers
    for result in results:
        assert {e["id"]: collected(e) for e in result.entries} == expected
        assert len(result.entries) == 300


def test_pages_are_served_while_a_load_is_in_progress(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(1, 4))
    server = serve(db)
    during: list[Crawl] = []

    def records() -> Iterator[dict[str, Any]]:
        yield record(4)
        during.append(crawl(client, server.url))  # the load's transaction is open here
        yield record(5)

    with SeedlistStore(db) as store:
        store.load(records())
    after = crawl(client, server.url, timestamp=during[0].timestamp)

    assert len(during[0].entries) == 3
    assert set(after.by_action("insert")) == {record(4)["url"], record(5)["url"]}


def test_text_and_markup_arrive_exactly_and_binary_or_unsafe_content_by_src(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    tricky = 'a\r\nb\r <c attr="x"> & ]]> \u2028 \U0001f600 \t end '
    records = [
        {
            "url": "http://docs.example.com/tricky",
            "content": tricky,
            "metadata": {
                "title": "Quotes \" and ' and <tags>",
                "summary": "line\r\nbreaks\tand tabs",
                "author": ["Zoë", "Ann & Bob"],
                'a "field" name': "value with\r\nCR LF\ttab",
            },
            "displayurl": "http://show.example.com/t?a=1&b=2",
        },
        # Control characters XML cannot carry: content goes by src, byte for byte.
        {"url": "http://docs.example.com/control", "content": "bell \x07 nul \x00 esc \x1b"},
        {"url": "http://docs.example.com/long.txt", "content": "x" * 100_000},
        {"url": "http://docs.example.com/page.html", "content": "<p>Hi &amp; bye</p>"},
        {"url": "http://docs.example.com/empty", "metadata": {"title": "no content"}},
        # An XML type's inline content would be an element (RFC 4287 4.1.3.3): by src.
        {"url": "http://docs.example.com/a", "mimetype": "text/xml", "content": "<a>&amp;</a>"},
    ]
    with SeedlistStore(db) as store:
        store.load(records)
    server = serve(db)

    got = {e["id"]: e for e in crawl(client, server.url).entries}

    first = got["http://docs.example.com/tricky"]
    assert first["content"] == tricky.encode() and first["inline"] == "text"
    assert first["title"] == records[0]["metadata"]["title"]
    assert first["summary"] == "line\r\nbreaks\tand tabs"
    assert first["authors"] == ["Zoë", "Ann & Bob"]
    assert first["fields"] == [('a "field" name', "value with\r\nCR LF\ttab")]
    assert first["link"] == "http://show.example.com/t?a=1&b=2"
    control = got["http://docs.example.com/control"]
    assert "inline" not in control and control["content"] == records[1]["content"].encode()
    assert control["mimetype"] == "text/plain"
    assert got["http://docs.example.com/long.txt"]["content"] == b"x" * 100_000
    assert "inline" not in got["http://docs.example.com/long.txt"]
    html = got["http://docs.example.com/page.html"]
    assert html["inline"] == "html" and html["content"] == b"<p>Hi &amp; bye</p>"
    xml = got["http://docs.example.com/a"]
    assert "inline" not in xml
    assert (xml["content"], xml["mimetype"]) == (b"<a>&amp;</a>", "text/xml")
    empty = got["http://docs.example.com/empty"]
    assert empty["content"] is None and empty["acl"] is None and empty["title"] == "no content"


def test_content_of_a_deleted_document_is_gone_once_no_crawl_can_need_it(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    with SeedlistStore(db) as store:
        store.load([record(10)])
    server = serve(db)
    page = etree.fromstring(client.get(server.url).content, PARSER)
    src = page.find("atom:entry/atom:content", NS).get("src")
    assert client.get(src).status_code == 200
    with SeedlistStore(db) as store:
        assert store.delete(record(10)["url"])

    # The crawl that listed it began before the deletion: its version is still served.
    assert client.get(src).status_code == 200
    latest = client.get(src.rsplit(".", 1)[0])
    with SeedlistStore(db) as store:
        store.purge_history(before=time.time() + 1)
    response = client.get(src)
    unknown = [
        client.get(src.rsplit("/", 1)[0] + f"/{n}") for n in ("2", "x", "²", "9" * 30, "1.x")
    ]

    assert latest.status_code == 404 and "deleted" in latest.text
    assert response.status_code == 404 and "deleted" in response.text
    assert [r.status_code for r in unknown] == [404] * 5


# Protection


def test_basic_authentication_refuses_without_the_password_and_accepts_with_it(
    db: Path, serve: Callable[..., SeedlistServer], tls: TLSFiles
) -> None:
    with SeedlistStore(db) as store:
        store.load([record(10)])
    server = serve(db, credentials=("crawler", "s3cret:é"))

    with httpx.Client(verify=tls.client_context()) as anonymous:
        refused = anonymous.get(server.url)
        wrong = anonymous.get(server.url, auth=("crawler", "guess"))
        other_user = anonymous.get(server.url, auth=("admin", "s3cret:é"))
        content = anonymous.get(server.url.replace("myserver", "content/1"))
    assert refused.status_code == wrong.status_code == other_user.status_code == 401
    assert content.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Basic ")
    assert "s3cret" not in refused.text

    with httpx.Client(verify=tls.client_context(), auth=("crawler", "s3cret:é")) as crawler:
        result = crawl(crawler, server.url)
    assert [e["content"] for e in result.entries] == [seen(record(10))["content"]]


def test_plain_http_without_tls(db: Path, serve: Callable[..., SeedlistServer]) -> None:
    with SeedlistStore(db) as store:
        store.load([record(1)])
    server = serve(db, tls=None)
    assert server.url.startswith("http://")
    with httpx.Client() as plain:
        assert [e["id"] for e in crawl(plain, server.url).entries] == [record(1)["url"]]


# Bad parameters: 4xx with a message, never a 500


def _first_next(client: httpx.Client, url: str) -> str:
    page = etree.fromstring(client.get(url).content, PARSER)
    href: str = page.find("atom:link[@rel='next']", NS).get("href")
    return href


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"Timestamp": "not-a-timestamp"}, "Timestamp"),
        ({"Timestamp": "eyJhIjoxfQ"}, "Timestamp"),  # base64 JSON, but not ours
        ({"Timestamp": ""}, "Timestamp"),
        ({"Start": "5"}, "without State"),
        ({"Start": "-1"}, "Start"),
        ({"Start": "abc"}, "Start"),
        ({"Start": "²"}, "Start"),
        ({"Range": "²"}, "Range"),
        ({"Range": "9" * 30}, "Range"),
        ({"State": "Zm9v"}, "State"),
        ({"State": "WyJ4IiwyLDEsMCwwXQ"}, "State"),  # since after upto
        ({"Range": "0"}, "Range"),
        ({"Range": "1001"}, "Range"),
        ({"Range": "ten"}, "Range"),
        ({"Action": "GetChildren"}, "Action"),
    ],
)
def test_malformed_parameters_get_400_with_a_message(
    db: Path,
    serve: Callable[..., SeedlistServer],
    client: httpx.Client,
    query: dict[str, str],
    message: str,
) -> None:
    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(5))
    server = serve(db)

    response = client.get(server.url, params=query)

    assert response.status_code == 400, response.text
    assert message in response.text


def test_next_links_cannot_be_mixed_up(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(5))
    server = serve(db)
    next_url = httpx.URL(_first_next(client, server.url + "?Range=2"))

    wrong_start = client.get(next_url.copy_set_param("Start", "3"))
    other_timestamp = client.get(
        next_url.copy_set_param("Timestamp", crawl(client, server.url).timestamp)
    )

    assert wrong_start.status_code == 400 and "does not match State" in wrong_start.text
    assert other_timestamp.status_code == 400 and "Timestamp" in other_timestamp.text
    assert client.get(next_url).status_code == 200


def test_stale_timestamps_and_states_get_410(
    tmp_path: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    first, second, backup = (tmp_path / n for n in ("a.sqlite", "b.sqlite", "backup.sqlite"))
    for path in (first, second):
        with SeedlistStore(path) as store:
            store.load(record(i) for i in range(5))
    shutil.copy(first, backup)
    with SeedlistStore(first) as store:
        store.load([record(5)])
    server, other, restored = serve(first), serve(second), serve(backup)
    timestamp = crawl(client, server.url).timestamp
    next_url = httpx.URL(_first_next(client, server.url + "?Range=2"))

    from_another_store = client.get(other.url, params={"Timestamp": timestamp})
    state_of_another = client.get(next_url.copy_with(port=other.port))
    newer_than_backup = client.get(restored.url, params={"Timestamp": timestamp})

    for response in (from_another_store, state_of_another, newer_than_backup):
        assert response.status_code == 410, response.text
        assert "crawl again in full" in response.text
    assert "another seedlist store" in from_another_store.text
    assert "newer than this store" in newer_than_backup.text


def test_a_timestamp_older_than_purged_deletions_gets_410(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:
    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(3))
    server = serve(db)
    old = crawl(client, server.url).timestamp
    with SeedlistStore(db) as store:
        store.delete(record(0)["url"])
    recent = crawl(client, server.url, timestamp=old).timestamp
    with SeedlistStore(db) as store:
        assert store.purge_deletions(before=time.time() + 1) == 1

    stale = client.get(server.url, params={"Timestamp": old})
    fine = crawl(client, server.url, timestamp=recent)

    assert stale.status_code == 410 and "purged" in stale.text
    assert fine.entries == []


def test_altered_or_made_up_crawl_values_get_400(
    db: Path, serve: Callable[..., SeedlistServer], client: httpx.Client
) -> None:

    with SeedlistStore(db) as store:
        store.load(record(i) for i in range(5))
        identity = store.position().store
    server = serve(db)
    next_url = httpx.URL(_first_next(client, server.url + "?Range=2"))
    state = next_url.params["State"]
    payload, _, signature = state.partition(".")
    numbers = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    skipped = [numbers[0], numbers[1], numbers[2], numbers[3], numbers[4] + 1]  # skip one entry
    altered_payload = base64.urlsafe_b64encode(orjson.dumps(skipped)).decode().rstrip("=")
    made_up = base64.urlsafe_b64encode(orjson.dumps([identity, 0])).decode().rstrip("=")

    assert client.get(next_url).status_code == 200
    for params in (
        {"State": f"{altered_payload}.{signature}", "Start": "2"},
        {"State": payload, "Start": "2"},  # unsigned, as values were before
        {"State": state[:-1] + ("A" if state[-1] != "A" else "B"), "Start": "2"},
        {"Timestamp": made_up},
    ):
        response = client.get(server.url, params=params)
        assert response.status_code == 400, (params, response.text)
        assert "is not a value this server gave" in response.text
