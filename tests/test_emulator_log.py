"""The emulator's log: a line per request and per applied or failed feed, as any server keeps;
quiet in the Python API unless the program configures logging."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator, Fault
from test_emulator import feed, group, record

GOOD = feed("docs", "full", group(record("http://e.example.com/a", "a")))
BAD = feed("docs", "incremental", '<group><record url="http://e.example.com/b"/></group>')
FORM = {"datasource": "docs", "feedtype": "full"}


@pytest.fixture
def client(tls: TLSFiles) -> Iterator[httpx.Client]:
    with httpx.Client(verify=tls.client_context(), timeout=30) as http:
        yield http


def test_each_request_and_each_feed_gets_a_line(
    emulator: Emulator, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fastfeed.emulator")

    client.post(f"{emulator.url}/xmlfeed", data=FORM, files={"data": ("docs-1.xml", GOOD)})
    emulator.wait_idle()
    bad = {"datasource": "docs", "feedtype": "incremental", "data": BAD.decode()}
    client.post(f"{emulator.url}/xmlfeed", data=bad)
    emulator.wait_idle()
    emulator.add_fault(Fault.disk_full())
    client.post(f"{emulator.url}/xmlfeed", data=FORM, files={"data": ("docs-3.xml", GOOD)})
    client.get(f"{emulator.url}/status")
    client.get(f"{emulator.url}/getbacklogcount")
    client.get(f"{emulator.url}/nowhere")

    # The time a request took varies: " in 3 ms" goes.
    lines = [(r.levelname, re.sub(r" in \d+ ms", "", r.getMessage())) for r in caplog.records]
    good, bad = f"{len(GOOD)} bytes", f"{len(BAD):,} bytes"
    disk_full = (
        "Feed not accepted due to insufficient disk space. Contact Google Enterprise Support."
    )
    # The request's line says what the feedergate made of the push; the feeder's, what became
    # of it, with its records.
    assert lines == [
        ("INFO", f"127.0.0.1 POST /xmlfeed 200: push 1 (docs, full, docs-1.xml, {good}) received"),
        (
            "INFO",
            f"127.0.0.1 push 1 (docs, full, docs-1.xml, {good}) processed: 1 record, 1 added,"
            " 0 deleted",
        ),
        ("INFO", f"127.0.0.1 POST /xmlfeed 200: push 2 (docs, incremental, {bad}) received"),
        (
            "WARNING",
            f"127.0.0.1 push 2 (docs, incremental, {bad}) failed: line 3: Element record does not"
            " carry attribute mimetype",
        ),
        (
            "WARNING",
            f"127.0.0.1 POST /xmlfeed 200: push 3 (docs, full, docs-3.xml, {good}) rejected:"
            f" HTTP 200 {disk_full}",
        ),
        ("DEBUG", "127.0.0.1 GET /status 200"),
        ("INFO", "127.0.0.1 GET /getbacklogcount 200"),
        ("WARNING", "127.0.0.1 GET /nowhere 404"),
    ]


def test_the_root_leads_to_the_status_page(emulator: Emulator, client: httpx.Client) -> None:
    answer = client.get(f"{emulator.url}/", follow_redirects=False)

    assert (answer.status_code, answer.headers["location"]) == (302, "/status")


def test_the_python_api_logs_nothing_unless_asked(tmp_path: Path) -> None:
    # A program of its own: pytest configures logging, a user's program does not.
    script = f"""
import httpx
from fastfeed.emulator import Emulator
with Emulator({str(tmp_path / "emulator")!r}) as emulator:
    form = {{"datasource": "docs", "feedtype": "incremental", "data": {BAD.decode()!r}}}
    assert httpx.post(emulator.url + "/xmlfeed", data=form).text == "Success"
    httpx.get(emulator.url + "/nowhere")
    emulator.wait_idle()
    assert emulator.pushes()[0].status() == "failed"
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)

    assert (done.returncode, done.stderr, done.stdout) == (0, "", "")
