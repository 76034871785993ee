"""Progress as a user sees it: the long commands run with stderr on a pseudo-terminal draw a
bar that ends at 100% with the final counts; with stderr on a pipe they print the summary
alone; stdout (--json) is never drawn on."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import cli_target
from fastfeed.emulator import Emulator
from fastfeed.progress import human_bytes

pytestmark = pytest.mark.usefixtures("clean_env")

MakeSet = Callable[..., Path]
# Cursor moves, colours, line clearing: what a terminal acts on rather than shows.
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BAR = "━"


@dataclass
class Ran:
    status: int
    #: Each line drawn on the terminal (redraws of a line are lines of their own), escapes removed.
    drawn: list[str]
    stdout: bytes

    def last(self, stage: str) -> str:
        """The last drawing of a stage: its bar's line and its counts' line, as one."""
        drawn = [i for i, line in enumerate(self.drawn) if line.startswith(stage + " ")]
        assert drawn, f"no {stage} line in {self.drawn}"
        return " ".join(self.drawn[drawn[-1] : drawn[-1] + 2])


def on_terminal(*argv: str) -> Ran:
    """Runs `fastfeed ARGV` with stderr on a pseudo-terminal 200 columns wide, stdout a pipe."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    process = subprocess.Popen(
        [sys.executable, "-m", "fastfeed", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=side,
        env={**env, "TERM": "xterm-256color"},
    )
    os.close(side)
    drawn = b""
    deadline = time.monotonic() + 120
    try:
        while select.select([main], [], [], max(0.0, deadline - time.monotonic()))[0]:
            try:
                block = os.read(main, 65536)
            except OSError:  # EIO: the command ended, and with it the terminal's other side
                break
            if not block:
                break
            drawn += block
        else:
            process.kill()
            raise AssertionError(f"fastfeed {' '.join(argv)} did not end: {drawn!r}")
    finally:
        os.close(main)
    assert process.stdout is not None
    stdout = process.stdout.read()
    status = process.wait(timeout=60)
    text = ESCAPES.sub("", drawn.decode("utf-8", "replace"))
    return Ran(status, re.split(r"[\r\n]+", text), stdout)


def piped(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "fastfeed", *argv], capture_output=True, check=False, timeout=60
    )


def records(path: Path, n: int) -> Path:
    path.write_bytes(
        b"".join(
            orjson.dumps({"url": f"http://docs.example.com/{i}", "content": "text " * 40}) + b"\n"
            for i in range(n)
        )
    )
    return path


def test_build_draws_a_bar_that_ends_full_with_the_final_counts(tmp_path: Path) -> None:
    source = records(tmp_path / "docs.jsonl", 3000)
    size = source.stat().st_size

    ran = on_terminal(
        "build", str(source), "--datasource", "docs", "--out", "feeds", "--max-records", "1000",
        "--json",
    )  # fmt: skip

    assert ran.status == 0
    line = ran.last("build")
    assert BAR in line and " 100% " in line
    # The input's bytes of their total, with the counts of what was written.
    assert f"{human_bytes(size)}/{human_bytes(size)}" in line
    assert "3,000 records in 3 files" in line
    assert any(d.startswith("wrote 3,000 records into 3 files") for d in ran.drawn)
    # stdout holds the JSON summary alone, whatever is drawn on the terminal.
    assert orjson.loads(ran.stdout)["records"] == 3000


def test_push_draws_every_file_accepted_at_100_percent(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet
) -> None:
    feeds = make_feed_set("docs", "full", files=4, per_file=300)

    ran = on_terminal("push", str(feeds), *cli_target(emulator, tls), "--json")

    assert ran.status == 0
    line = ran.last("push")
    assert BAR in line and " 100% " in line
    # Redrawn when the push ends: never `3/4 files` above a summary of 4 accepted.
    assert "4/4 files, 1,200 records accepted" in line
    assert any("4 accepted" in d for d in ran.drawn)
    assert orjson.loads(ran.stdout)["files"]["accepted"] == 4


@pytest.mark.parametrize("feedtype", ["incremental", "full"])  # a full feed's push waits
def test_run_draws_its_build_and_its_push(
    emulator: Emulator, tls: Any, tmp_path: Path, feedtype: str
) -> None:
    source = records(tmp_path / "docs.jsonl", 2000)

    ran = on_terminal(
        "run", str(source), "--datasource", "docs", "--feedtype", feedtype, "--out", "feeds",
        "--max-records", "500", *cli_target(emulator, tls),
    )  # fmt: skip

    assert ran.status == 0
    assert " 100% " in ran.last("build") and "2,000 records in 4 files" in ran.last("build")
    assert " 100% " in ran.last("push") and "4/4 files, 2,000 records" in ran.last("push")


def test_thunderstone_push_draws_its_files(emulator: Emulator, tls: Any, tmp_path: Path) -> None:
    source = records(tmp_path / "docs.jsonl", 1200)
    built = piped(
        "build", str(source), "--format", "thunderstone", "--profile", "docs", "--out", "set",
        "--max-records", "400",
    )  # fmt: skip
    assert built.returncode == 0, built.stderr

    ran = on_terminal(
        "thunderstone", "push", "set", "--url", f"{emulator.url}/texis/dowalk/recvdata.xml",
        "--cacert", str(tls.ca_path),
    )  # fmt: skip

    assert ran.status == 0
    line = ran.last("push")
    assert BAR in line and " 100% " in line and "3/3 files accepted" in line


def test_validate_draws_the_files_checked(make_feed_set: MakeSet, tmp_path: Path) -> None:
    feeds = make_feed_set("docs", "full", files=3)
    # Not well-formed from its first line: its check stops there, and it is checked all the same.
    broken = tmp_path / "broken.xml"
    broken.write_text("<gsafeed>" + "x" * 100_000)

    ran = on_terminal("validate", str(feeds), str(broken))

    assert ran.status == 1
    line = ran.last("validate")
    assert BAR in line and " 100% " in line and "4/4 files checked, 1 with problems" in line
    assert "fastfeed validate: 1 of 4 files has problems" in ran.drawn


def test_sync_draws_each_stage(emulator: Emulator, tls: Any, tmp_path: Path) -> None:
    source = records(tmp_path / "docs.jsonl", 1500)

    argv = ("sync", str(source), "--datasource", "docs", "--state", "docs.state")
    ran = on_terminal(*argv, *cli_target(emulator, tls))

    # The first sync sends everything: it builds as it compares, in one pass.
    assert ran.status == 0
    assert " 100% " in ran.last("build") and "1,500 records built and compared" in ran.last("build")
    assert " 100% " in ran.last("push") and "1,500 records accepted" in ran.last("push")

    # The next compares first, then builds what changed.
    changed = source.read_bytes().replace(b'/7"', b'/7","displayurl":"http://d/"', 1)
    source.write_bytes(changed)
    ran = on_terminal(*argv, *cli_target(emulator, tls))
    assert ran.status == 0
    assert " 100% " in ran.last("compare") and "1,500 records compared" in ran.last("compare")
    assert " 100% " in ran.last("build") and "1 record in 1 file" in ran.last("build")
    assert " 100% " in ran.last("push") and "1 record accepted" in ran.last("push")


def test_with_stderr_on_a_pipe_only_the_summary_is_printed(
    emulator: Emulator, tls: Any, tmp_path: Path
) -> None:
    source = records(tmp_path / "docs.jsonl", 2000)

    built = piped("build", str(source), "--datasource", "docs", "--out", "feeds")
    pushed = piped("push", "feeds", *cli_target(emulator, tls))
    checked = piped("validate", "feeds")

    assert built.returncode == pushed.returncode == checked.returncode == 0
    assert re.fullmatch(
        rb"wrote 2,000 records into 1 file \(.* KB\) in feeds in [0-9.]+ s\n", built.stderr
    )
    assert re.fullmatch(rb"fastfeed push: .*: 1 accepted; 2,000 records, .*\n", pushed.stderr)
    assert checked.stderr == b"fastfeed validate: 1 file valid\n"
    assert built.stdout == pushed.stdout == checked.stdout == b""
