"""The emulator's Feeds page as an admin sees it: loaded in a real browser (headless chromium)
from an emulator that received feeds with the push API and by hand, some of which failed.

Set STATUS_PAGE_PNG to a path to keep the screenshot (the README's is docs/status-page.png).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator, Fault
from fastfeed.gsa.push import push
from lxml import html
from test_emulator import feed, group, record
from test_emulator_acl import acl_record, groups_feed, membership

BROWSER_TIMEOUT = 120


@pytest.fixture
def browser(tmp_path: Path) -> Callable[..., str]:
    """Runs headless chromium on a URL with the given switches; returns what it printed."""

    def run(url: str, *switches: str) -> str:
        done = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu"]
            # The emulator's certificate is from the test CA, which chromium does not know.
            + ["--ignore-certificate-errors", f"--user-data-dir={tmp_path / 'chromium'}"]
            + [*switches, url],
            capture_output=True,
            text=True,
            timeout=BROWSER_TIMEOUT,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    return run


@pytest.fixture
def client(tls: TLSFiles) -> Iterator[httpx.Client]:
    with httpx.Client(verify=tls.client_context(), timeout=30) as http:
        yield http


def text(element: html.HtmlElement) -> str:
    """The element's words, its parts apart as the browser shows them."""
    return " ".join(" ".join(element.itertext()).split())


def find(page: html.HtmlElement, path: str) -> list[html.HtmlElement]:
    found: list[html.HtmlElement] = page.xpath(path)
    return found


def texts(page: html.HtmlElement, path: str) -> list[str]:
    return [text(element) for element in find(page, path)]


def of_class(name: str) -> str:
    return f"contains(concat(' ', @class, ' '), ' {name} ')"


def statuses(source: html.HtmlElement) -> list[str]:
    return texts(source, f"./table//span[{of_class('badge')}]")


def rows(source: html.HtmlElement) -> list[list[str]]:
    """The cells of a source's feeds table, header left out."""
    return [texts(tr, "td") for tr in find(source, "./table//tr")[1:]]


@contextmanager
def index_locked(emulator: Emulator) -> Iterator[None]:
    """Holds the index's write lock: the feeder, once it takes a feed, waits on it with the feed
    in progress (the status page only reads, and goes on answering)."""
    db = sqlite3.connect(emulator.data_dir / "index.sqlite3", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        db.execute("ROLLBACK")
        db.close()


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_feeds_page_shows_each_feed_with_its_status_counts_and_reason(
    emulator: Emulator,
    client: httpx.Client,
    make_feed_set: Callable[..., Path],
    push_settings: Callable[..., Any],
    browser: Callable[..., str],
    tmp_path: Path,
) -> None:
    # A feed set of two files of 700 documents, with the push API.
    intranet = make_feed_set("intranet", "full", files=2, per_file=700)
    assert push(intranet, push_settings(emulator)).ok
    # A feed the feedergate takes and the feeder then fails (a record with no mimetype), sent
    # as the urlencoded form, which has no file name.
    bad = feed("intranet", "incremental", '<group><record url="http://e.com/x"/></group>')
    form = {"datasource": "intranet", "feedtype": "incremental", "data": bad.decode()}
    assert client.post(f"{emulator.url}/xmlfeed", data=form).text == "Success"
    # Documents with per-URL ACLs; then a feed refused for disk space.
    acls = feed(
        "wiki",
        "incremental",
        group(acl_record("http://wiki.example.com/a"), acl_record("http://wiki.example.com/b")),
    )
    files = {"data": ("wiki-acls.xml", acls, "text/xml")}
    wiki = {"datasource": "wiki", "feedtype": "incremental"}
    client.post(f"{emulator.url}/xmlfeed", data=wiki, files=files)
    emulator.wait_idle()
    emulator.add_fault(Fault.disk_full())
    client.post(f"{emulator.url}/xmlfeed", data=wiki, files=files)
    groups = groups_feed(membership("eng", "alice", "bob"), membership("ops", "carol"))
    client.post(
        f"{emulator.url}/xmlgroups",
        data={"groupsource": "ldap", "feedtype": "incremental"},
        files={"data": ("groups.xml", groups, "text/xml")},
    )
    emulator.wait_idle()
    # Two more feeds: the feeder takes the first and waits on the index; the second waits.
    emulator.pause_feeder()
    for name in ("wiki-3.xml", "wiki-4.xml"):
        data = feed("wiki", "incremental", group(record(f"http://wiki.example.com/{name}", "x")))
        client.post(f"{emulator.url}/xmlfeed", data=wiki, files={"data": (name, data)})
    screenshot = tmp_path / "status.png"
    with index_locked(emulator):
        emulator.resume_feeder()
        wait_until(lambda: emulator.status()["applying"] is not None)
        # The page refreshes itself every 5 s: 6 s of the browser's (virtual) time see it do so.
        dom = browser(emulator.url, "--virtual-time-budget=6000", "--dump-dom")
        browser(
            f"{emulator.url}/status",
            "--window-size=1280,1160",
            "--hide-scrollbars",
            f"--screenshot={screenshot}",
        )
    emulator.wait_idle()

    page = html.fromstring(dom)
    # Reached from / (which leads to the page), and refreshed in place by its script.
    assert texts(page, "//header/h1") == ["fastfeed emulator · Crawl and Index › Feeds"]
    assert int(page.body.get("data-refreshes", "0")) >= 1
    tiles = texts(page, f"//div[{of_class('tile')}]")
    assert tiles[:4] == [
        "2 feed files in the backlog",
        f"applying push #{len(emulator.pushes()) - 1} feeder",
        "2 data sources",
        "1,402 documents",
    ]

    [source] = find(page, "//section[@id='datasource-intranet']")
    assert texts(source, "h3") == ["intranet 1,400 documents · 0 ACLs"]
    assert statuses(source) == ["failed", "processed", "processed"]
    failed, processed, _ = rows(source)
    assert failed[1].startswith("push #") and failed[5] == "—"
    assert failed[6] == "failed line 3: Element record does not carry attribute mimetype"
    # The push API names its files; thousands separators everywhere.
    assert processed[1].endswith(".xml push #2") and processed[2] == "incremental"
    assert processed[5] == "700 +700 −0"
    assert int(processed[4].replace(",", "")) > 1000 and "," in processed[4]

    [source] = find(page, "//section[@id='datasource-wiki']")
    assert texts(source, "h3") == ["wiki 2 documents · 2 ACLs"]
    assert statuses(source) == ["received", "in progress", "rejected", "processed"]
    received, in_progress, rejected, acl_feed = rows(source)
    assert [received[1], in_progress[1]] == ["wiki-4.xml push #8", "wiki-3.xml push #7"]
    # A feed that was never processed shows no record count, not "0" as if it had been empty.
    assert [received[5], in_progress[5], rejected[5]] == ["—"] * 3
    assert "insufficient disk space" in rejected[6]
    assert acl_feed[1:3] == ["wiki-acls.xml push #4", "incremental"]

    [source] = find(page, "//section[@id='groupsource-ldap']")
    assert texts(source, "h3") == ["ldap 2 groups · 3 members"]
    assert statuses(source) == ["processed"] and rows(source)[0][5] == "2 +2 −0"

    [refused] = find(page, "//section[@id='rejected']/div")
    [row] = rows(refused)
    assert row[1:4] == ["127.0.0.1", "/xmlfeed", "wiki"]
    assert row[5].startswith("HTTP 200 Feed not accepted due to insufficient disk space")

    png = screenshot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    if keep := os.environ.get("STATUS_PAGE_PNG"):
        Path(keep).write_bytes(png)


def test_an_empty_emulator_says_none_in_each_section(
    emulator: Emulator, browser: Callable[..., str]
) -> None:
    page = html.fromstring(browser(f"{emulator.url}/status", "--dump-dom"))

    assert texts(page, "//p[@class='none']") == [
        "none: push a feed to /xmlfeed",
        "none: push groups to /xmlgroups",
        "none",
    ]
    assert texts(page, f"//div[{of_class('tile')}]")[:2] == [
        "0 feed files in the backlog",
        "running feeder",
    ]
