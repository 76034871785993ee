"""`fastfeed emulator` as a user runs it: a separate process, scripted over HTTP."""

from __future__ import annotations

import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastfeed.cli import main

FEED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">\n'
    b"<gsafeed><header><datasource>docs</datasource><feedtype>full</feedtype></header>"
    b'<group><record url="http://e.com/a" mimetype="text/plain"><content>a</content></record>'
    b"</group></gsafeed>"
)
FORM = {"datasource": "docs", "feedtype": "full"}


class Running:
    def __init__(self, process: subprocess.Popen[str], banner: str) -> None:
        self.process = process
        self.banner = banner
        self.log = ""  # its stderr, once stopped

    def found(self, pattern: str) -> str:
        match = re.search(pattern, self.banner)
        assert match, f"{pattern!r} not in the banner:\n{self.banner}"
        return match.group(1)

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        out, self.log = self.process.communicate(timeout=30)
        return self.process.returncode, out


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[subprocess.Popen[str]] = []

    def run(*options: str) -> Running:
        process = subprocess.Popen(
            [sys.executable, "-m", "fastfeed", "emulator", "--http-port", "0"]
            + ["--https-port", "0", "--data-dir", str(tmp_path / "emulator"), *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None
        banner = ""
        while "Ctrl-C to stop" not in banner:
            line = process.stdout.readline()
            assert line, f"the emulator exited early:\n{banner}"
            banner += line
        return Running(process, banner)

    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_cli_emulator_serves_http_and_https_with_its_own_ca(start: Callable[..., Running]) -> None:
    emulator = start()
    http_url = emulator.found(r"over HTTP: +(\S+)/xmlfeed")
    https_url = emulator.found(r"over HTTPS: +(\S+)/xmlfeed")
    ca = emulator.found(r"--cacert\): (\S+)")
    files = {"data": ("feed.xml", FEED, "text/xml")}

    with httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=30) as client:
        assert client.post(f"{https_url}/xmlfeed", data=FORM, files=files).text == "Success"
        fault = client.post(f"{http_url}/_emulator/faults", json={"kind": "disk_full"})
        assert fault.status_code == 200
        refused = client.post(f"{http_url}/xmlfeed", data=FORM, files=files).text
        assert refused.startswith("Feed not accepted due to insufficient disk space")
        assert client.get(f"{http_url}/getbacklogcount").text.isdigit()

    status, out = emulator.stop()
    assert status == 0 and "stopped" in out


def test_cli_emulator_logs_each_request_and_feed_on_stderr(start: Callable[..., Running]) -> None:
    emulator = start()
    http_url = emulator.found(r"over HTTP: +(\S+)/xmlfeed")

    files = {"data": ("docs-1.xml", FEED, "text/xml")}
    assert httpx.post(f"{http_url}/xmlfeed", data=FORM, files=files, timeout=30).text == "Success"
    deadline = time.monotonic() + 10  # the feeder applies it at once, in a moment
    while httpx.get(f"{http_url}/status.json").json()["backlog"] and time.monotonic() < deadline:
        time.sleep(0.02)
    emulator.stop()

    # Time (UTC), client, request, answer; the push, its datasource, feed type, file and size;
    # then the feeder's line with its records. Polls of the status pages are not logged.
    utc = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    push = rf"push 1 \(docs, full, docs-1.xml, {len(FEED)} bytes\)"
    assert re.fullmatch(
        rf"{utc} 127.0.0.1 POST /xmlfeed 200 in \d+ ms: {push} received\n"
        rf"{utc} 127.0.0.1 {push} processed: 1 record, 1 added, 0 deleted\n",
        emulator.log,
    ), emulator.log


def test_cli_emulator_refuses_untrusted_clients(start: Callable[..., Running]) -> None:
    emulator = start("--trusted-ip", "192.0.2.1")
    http_url = emulator.found(r"over HTTP: +(\S+)/xmlfeed")

    files = {"data": ("feed.xml", FEED, "text/xml")}
    answer = httpx.post(f"{http_url}/xmlfeed", data=FORM, files=files, timeout=30)

    assert answer.text == "Error - Unauthorized Request"
    assert emulator.stop()[0] == 0


def test_cli_emulator_reports_a_busy_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        status = main(
            ["emulator", "--http-port", str(port), "--https-port", "0"]
            + ["--data-dir", str(tmp_path / "emulator")]
        )

    assert status == 1
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


def test_cli_emulator_needs_cert_and_key_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["emulator", "--cert", str(tmp_path / "c.pem"), "--data-dir", str(tmp_path)])

    assert status == 1
    assert "give both --cert and --key" in capsys.readouterr().err


#: Ways aiohttp fails to import: absent, as in an install without the extra; broken, as an
#: install whose library does not load, with an ImportError that names no module.
UNIMPORTABLE = {
    "absent": "sys.modules['aiohttp'] = None",
    "broken": """
class Broken:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "aiohttp":
            raise ImportError("libc.so.6: version `GLIBC_2.99' not found")
sys.meta_path.insert(0, Broken())""",
}


@pytest.mark.parametrize("how", UNIMPORTABLE)
@pytest.mark.parametrize(
    "command", [["demo"], ["emulator"], ["seedlist", "serve", "x.db", "--port", "0"]]
)
def test_server_commands_without_the_server_extra_say_how_to_install_it(
    command: list[str], how: str, tmp_path: Path
) -> None:
    script = (
        f"import sys\n{UNIMPORTABLE[how]}\n"
        "from fastfeed.cli import main\n"
        f"sys.exit(main({command!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 1
    assert "needs aiohttp, of the server extra: pip install 'fastfeed[server]'" in done.stderr
    assert "needs None" not in done.stderr and "Traceback" not in done.stderr
    if how == "broken":
        assert "(aiohttp cannot be imported: libc.so.6: version `GLIBC_2.99'" in done.stderr


def test_building_needs_no_server_extra(tmp_path: Path) -> None:
    (tmp_path / "docs.jsonl").write_text('{"url": "http://e.example.com/a", "content": "a"}\n')
    script = (
        "import sys; sys.modules['aiohttp'] = None; sys.modules['trustme'] = None\n"
        "from fastfeed.cli import main\n"
        "sys.exit(main(['build', 'docs.jsonl', '--datasource', 'd', '--out', 'out']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
