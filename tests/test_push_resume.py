"""Resumability: a push killed with SIGKILL at a random moment, then run again, ends with every
file accepted and none skipped that the appliance had not accepted."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastfeed import FastfeedError, build_and_push_async, push
from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator, Fault
from fastfeed.gsa import run
from fastfeed.sets.journal import JOURNAL
from fastfeed.sets.manifest import MANIFEST
from feeds import sha256s


def cli(feeds: Path, emulator: Emulator, tls: Any, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "fastfeed", "push", str(feeds),
        "--host", "127.0.0.1", "--port", str(emulator.port), "--cacert", str(tls.ca_path),
        "--backlog-interval", "0.05", "--backoff-base", "0.01", *extra,
    ]  # fmt: skip


def accepted_lines(feeds: Path) -> int:
    path = feeds / JOURNAL
    if not path.exists():
        return 0
    return sum(b'"accepted"' in line for line in path.read_bytes().splitlines())


def wait_until_accepted(child: subprocess.Popen[Any], feeds: Path, files: int) -> None:
    """Waits (30 s at most) until the push in `child` has journaled `files` accepted files."""
    deadline = time.monotonic() + 30
    while accepted_lines(feeds) < files:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, f"{files} files were never accepted"
        time.sleep(0.02)


def interrupted(
    emulator: Emulator, argv: list[str], journaled: Path, cwd: Path | None = None
) -> tuple[int, str]:
    """Runs `argv`, Ctrl-C once the appliance accepted its first file and holds the second;
    returns its exit status and stderr."""
    emulator.add_fault(Fault.slow(seconds=0.0))
    emulator.add_fault(Fault.slow(seconds=5.0))
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )
    try:
        wait_until_accepted(child, journaled, 1)
        time.sleep(0.3)  # the second file is being sent now, held by the appliance
    finally:
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    emulator.clear_faults()
    return child.returncode, err


def test_a_push_killed_mid_file_and_run_again_loses_nothing(
    emulator: Emulator, make_feed_set: Callable[..., Path], tls: Any
) -> None:
    feeds = make_feed_set("docs", "full", files=5)
    # Two files go through, the third is held long enough to kill the push while it is sent.
    emulator.add_fault(Fault.slow(seconds=0.0, times=2))
    emulator.add_fault(Fault.slow(seconds=5.0))
    child = subprocess.Popen(
        cli(feeds, emulator, tls), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_until_accepted(child, feeds, 2)
        time.sleep(0.3)  # the third file is being sent now, held by the appliance
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    emulator.clear_faults()

    again = subprocess.run(
        cli(feeds, emulator, tls, "--json"), capture_output=True, text=True, timeout=60
    )

    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["files"]["skipped"] == 2 and summary["files"]["accepted"] == 3
    accepted = [p.sha256 for p in emulator.pushes() if not p.outcome.startswith("refused")]
    # Every file accepted, in manifest order; the one in flight at the kill was sent again.
    assert accepted == sha256s(feeds)
    emulator.wait_idle()
    assert len(emulator.documents("docs")) == 25
    assert accepted_lines(feeds) == 5


def test_running_a_finished_push_again_sends_nothing(
    emulator: Emulator, make_feed_set: Callable[..., Path], tls: Any
) -> None:
    feeds = make_feed_set("docs", files=2)
    first = subprocess.run(cli(feeds, emulator, tls), capture_output=True, timeout=60)
    assert first.returncode == 0, first.stderr

    again = subprocess.run(cli(feeds, emulator, tls, "--json"), capture_output=True, timeout=60)

    assert again.returncode == 0
    assert json.loads(again.stdout)["files"] == {
        "accepted": 0, "skipped": 2, "failed": 0, "blocked": 0,
    }  # fmt: skip
    assert len(emulator.pushes()) == 2


def test_ctrl_c_says_how_to_send_the_rest(
    emulator: Emulator, make_feed_set: Callable[..., Path], tls: Any
) -> None:
    feeds = make_feed_set("docs", "full", files=3)
    status, err = interrupted(emulator, cli(feeds, emulator, tls), feeds)
    assert status == 130
    assert "interrupted" in err
    assert "1 of 3 files accepted;" in err
    assert f"to send the rest: fastfeed push {feeds}" in err


def test_the_resume_hint_of_a_replay_keeps_its_arguments_and_no_secret(
    emulator: Emulator, make_feed_set: Callable[..., Path], tls: Any, tmp_path: Path
) -> None:
    make_feed_set("docs", "full", files=3, name="replay")  # a set whose name is a command
    key = ["--client-cert", str(tls.cert_path), "--client-key", str(tls.key_path)]
    argv = cli(Path("replay"), emulator, tls, *key, "--client-key-password", "s3cret")
    argv[argv.index("push")] = "replay"
    status, err = interrupted(emulator, argv, tmp_path / "replay", cwd=tmp_path)

    assert status == 130
    assert "1 of 3 files accepted;" in err
    assert "s3cret" not in err
    hint = err.split("to send the rest: ")[1].split(" (--client-key-password left out")[0]
    assert "(--client-key-password left out: set FASTFEED_CLIENT_KEY_PASSWORD)" in err
    again = shlex.split(hint)
    assert again[:3] == ["fastfeed", "push", "replay"]
    done = subprocess.run(
        [sys.executable, "-m", "fastfeed", *again[1:], "--json"],
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "FASTFEED_CLIENT_KEY_PASSWORD": "s3cret"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == {
        "accepted": 2, "skipped": 1, "failed": 0, "blocked": 0,
    }  # fmt: skip


def test_ctrl_c_during_a_run_names_its_set_and_how_to_send_the_rest(
    emulator: Emulator, tls: Any, tmp_path: Path
) -> None:
    """A run's set is in a directory the user may not have chosen (--out defaults to a
    timestamped one): the hint names it, and whether `fastfeed push` can finish it."""
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(f'{{"url": "http://e.example.com/{n}", "content": "{n}"}}\n' for n in range(6))
    )
    out = tmp_path / "run-set"
    argv = cli(Path(source), emulator, tls, "--datasource", "docs", "--max-records", "2",
               "--out", str(out))  # fmt: skip
    argv[argv.index("push")] = "run"
    status, err = interrupted(emulator, argv, out)

    assert status == 130
    assert (
        f"fastfeed run: 1 of 3 files accepted; the build had finished: send the rest with "
        f"fastfeed push {out}, giving it this run's appliance options" in err
    )


def run_from_a_pipe(
    emulator: Emulator,
    tls: Any,
    out: Path,
    *extra: str,
    stdin: int = subprocess.PIPE,
    feedtype: str = "full",
) -> subprocess.Popen[str]:
    """`fastfeed run - --feedtype FEEDTYPE --max-records 2 --out OUT`, its records to write to
    its stdin (a pipe of its own, or the descriptor `stdin`)."""
    argv = cli(Path("-"), emulator, tls, "--datasource", "docs", "--feedtype", feedtype,
               "--max-records", "2", "--out", str(out), *extra)  # fmt: skip
    argv[argv.index("push")] = "run"
    return subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_ctrl_c_during_a_run_from_a_pipe_writes_no_manifest_for_the_input_cut_short(
    emulator: Emulator, tls: Any, tmp_path: Path
) -> None:
    """Ctrl-C in a terminal also ends the program feeding the pipe (`export | fastfeed run -`):
    the builder then sees the end of its input. A full set built from what came before it would
    replace the datasource with part of it: the run stops its build, writes no manifest, and
    says the set cannot be pushed as it is."""
    out = tmp_path / "run-set"
    child = run_from_a_pipe(emulator, tls, out)
    assert child.stdin is not None
    try:
        child.stdin.write(
            "".join(
                f'{{"url": "http://e.example.com/{n}", "content": "{n}"}}\n' for n in range(300)
            )
        )
        child.stdin.flush()
        deadline = time.monotonic() + 30
        while not out.exists():  # the run has started its build
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGINT)
        time.sleep(0.3)
        child.stdin.close()  # the feeding program ended by the same Ctrl-C
        child.wait(timeout=30)
    assert child.stderr is not None
    err = child.stderr.read()

    assert child.returncode == 130, err
    assert not (out / "manifest.jsonl").exists()
    assert f"the build had not finished ({out} has no manifest); nothing was pushed" in err
    assert "fastfeed push" not in err
    assert emulator.pushes() == []


def open_input(source: str) -> tuple[int, int]:
    """The ends of a `source` ("pipe" or "terminal") to give a child as its stdin: the one the
    child reads, and the one the test writes to and keeps open."""
    if source == "terminal":
        keyboard, read_end = os.openpty()
    else:
        read_end, keyboard = os.pipe()
    return read_end, keyboard


def ctrl_c_once_building(child: subprocess.Popen[str], out: Path, keyboard: int) -> str:
    """Types a record to `child` through `keyboard` (its input, kept open), and once its build
    has started (`out` exists) and waits for more, sends one Ctrl-C; returns what it said on
    stderr. A child still running 5 s later is killed, and the test fails."""
    try:
        os.write(keyboard, b'{"url": "http://e.example.com/1", "content": "1"}\n')
        deadline = time.monotonic() + 30
        while not out.exists():
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.02)
        time.sleep(0.3)  # the builder waits for more input
        child.send_signal(signal.SIGINT)
        return child.communicate(timeout=5)[1]
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        os.close(keyboard)


@pytest.mark.parametrize("source", ["pipe", "terminal"])
def test_ctrl_c_stops_a_run_whose_input_stays_open(
    emulator: Emulator, tls: Any, tmp_path: Path, source: str
) -> None:
    """At a terminal, or fed by a program the Ctrl-C does not end (a writer in another session),
    the input stays open: the run stops its builder's wait for more, ends at the first Ctrl-C,
    and says the build did not finish. Its builder once waited for the input's end, and the
    process with it, until a fourth Ctrl-C aborted it."""
    out = tmp_path / "run-set"
    read_end, keyboard = open_input(source)
    child = run_from_a_pipe(emulator, tls, out, stdin=read_end)
    os.close(read_end)
    err = ctrl_c_once_building(child, out, keyboard)

    assert child.returncode == 130, err
    assert not (out / MANIFEST).exists()
    assert f"the build had not finished ({out} has no manifest); nothing was pushed" in err
    assert "fastfeed push" not in err
    assert emulator.pushes() == []


@pytest.mark.parametrize("source", ["pipe", "terminal"])
def test_ctrl_c_stops_a_build_whose_input_stays_open(tmp_path: Path, source: str) -> None:
    """`fastfeed build -` reads on its main thread: the first Ctrl-C stops it too."""
    out = tmp_path / "o"
    read_end, keyboard = open_input(source)
    child = subprocess.Popen(
        [sys.executable, "-m", "fastfeed", "build", "-", "--datasource", "d", "--out", str(out)],
        stdin=read_end, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(read_end)
    err = ctrl_c_once_building(child, out, keyboard)

    assert child.returncode == 130, err
    assert not (out / MANIFEST).exists()


def held_by_the_backlog(
    emulator: Emulator, make_feed_set: Callable[..., Path], settings: PushSettings
) -> None:
    """Another client's file waits in the appliance's backlog, above a mark of 0: a push with
    `--backlog-high 0` sends nothing, so a run's builder waits for room (`max_ahead`)."""
    emulator.pause_feeder()
    assert push(make_feed_set("other", files=1), settings).ok


def three_records(path: Path) -> Path:
    """With `max_records=2` and `max_ahead=1`, the builder of an incremental set waits for room
    on its second file, which only the writer's close finishes: after it wrote the manifest."""
    path.write_text(
        "".join(f'{{"url": "http://e.example.com/{n}", "content": "{n}"}}\n' for n in range(3))
    )
    return path


async def run_held_once_its_manifest_is_written(
    tmp_path: Path, out: Path, settings: PushSettings
) -> asyncio.Future[Any]:
    """An incremental run of `three_records` into `out`, held by the backlog
    (`held_by_the_backlog`), once its close wrote the manifest and its first file is in the
    journal: its builder waits for room to say its last file."""
    running = asyncio.ensure_future(
        build_and_push_async([str(three_records(tmp_path / "docs.jsonl"))], out, "docs",
                             "incremental", settings, max_ahead=1, max_records=2)
    )  # fmt: skip
    while not ((out / MANIFEST).exists() and (out / JOURNAL).exists()):
        assert not running.done()
        await asyncio.sleep(0.01)
    return running


def test_a_run_stopped_once_its_manifest_is_written_but_before_its_build_ends_keeps_none(
    emulator: Emulator, make_feed_set: Callable[..., Path], push_settings: Callable[..., Any],
    tmp_path: Path,
) -> None:  # fmt: skip
    """The writer's close encodes the last chunk and writes the manifest before it says its
    last files; a Ctrl-C then (the end of input may be the Ctrl-C's own) must not leave a set
    that `fastfeed push` would send as complete: the files and journal stay, the manifest goes."""
    settings = push_settings(emulator, backlog_high=0, backlog_low=0)
    held_by_the_backlog(emulator, make_feed_set, settings)
    out = tmp_path / "run-set"

    async def interrupted() -> None:
        running = await run_held_once_its_manifest_is_written(tmp_path, out, settings)
        running.cancel()  # what Ctrl-C does to `fastfeed run`
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(interrupted())

    assert not (out / MANIFEST).exists()
    assert len(list(out.glob("*.xml"))) == 2 and (out / JOURNAL).exists()
    with pytest.raises(FastfeedError, match="a `fastfeed run` into it stopped before its build"):
        push(out, settings)
    assert len(emulator.pushes()) == 1


def test_a_run_whose_push_fails_once_its_build_finished_keeps_the_manifest_to_resume(
    emulator: Emulator, make_feed_set: Callable[..., Path], push_settings: Callable[..., Any],
    tmp_path: Path,
) -> None:  # fmt: skip
    """Only an interrupt may have cut the input short: a push refused (an untrusted IP) while
    the builder hands over its last files leaves a finished set, which `fastfeed push` resumes
    once the appliance trusts this machine again, as the error says."""
    settings = push_settings(emulator, backlog_high=0, backlog_low=0)
    held_by_the_backlog(emulator, make_feed_set, settings)
    out = tmp_path / "run-set"
    trusted = emulator.state.trusted_ips

    async def refused() -> None:
        running = await run_held_once_its_manifest_is_written(tmp_path, out, settings)
        emulator.state.trusted_ips = frozenset({"10.9.9.9"})
        emulator.resume_feeder()
        with pytest.raises(FastfeedError, match="Unauthorized"):
            await running

    asyncio.run(refused())

    assert (out / MANIFEST).exists()
    emulator.state.trusted_ips = trusted
    assert push(out, settings).ok
    # The refused POST is kept with no datasource: the two files of the set went after it.
    assert sorted(p.datasource for p in emulator.pushes()) == ["", "docs", "docs", "other"]


def test_ctrl_c_right_after_a_piped_input_ends_leaves_no_manifest_to_push(
    emulator: Emulator, make_feed_set: Callable[..., Path], push_settings: Callable[..., Any],
    tls: Any, tmp_path: Path,
) -> None:  # fmt: skip
    """The program feeding the pipe ends first, then Ctrl-C reaches an incremental run while
    its builder (held by the backlog) has written the manifest but not yet ended: the run says
    the build did not finish, and leaves no set that `fastfeed push` would send as whole."""
    held_by_the_backlog(emulator, make_feed_set, push_settings(emulator))
    out = tmp_path / "run-set"
    child = run_from_a_pipe(emulator, tls, out, "--max-ahead", "1", "--backlog-high", "0",
                            "--backlog-low", "0", feedtype="incremental")  # fmt: skip
    assert child.stdin is not None
    try:
        child.stdin.write(three_records(tmp_path / "docs.jsonl").read_text())
        child.stdin.close()  # the feeding program ends
        deadline = time.monotonic() + 30
        while not ((out / MANIFEST).exists() and (out / JOURNAL).exists()):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=30)
    assert child.stderr is not None
    err = child.stderr.read()

    assert child.returncode == 130, err
    assert not (out / MANIFEST).exists() and len(list(out.glob("*.xml"))) == 2
    assert f"the build had not finished ({out} has no manifest)" in err
    assert "fastfeed push" not in err
    assert len(emulator.pushes()) == 1


def test_ctrl_c_just_as_a_full_runs_build_ends_leaves_no_set_and_sends_nothing(
    emulator: Emulator, push_settings: Callable[..., Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A Ctrl-C that reaches a full run once its build has ended, but before its push starts,
    may be the one that ended the build's input (the program feeding its pipe): its set, maybe
    cut short, would replace the datasource. Nothing is sent, and the manifest goes, so that
    `fastfeed push` does not send it either."""
    out = tmp_path / "run-set"
    build = run.build

    async def interrupted() -> None:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert task is not None

        def build_then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
            built = build(*args, **kwargs)
            loop.call_soon_threadsafe(task.cancel)  # what Ctrl-C does to `fastfeed run`
            return built

        monkeypatch.setattr(run, "build", build_then_ctrl_c)
        await build_and_push_async([str(three_records(tmp_path / "docs.jsonl"))], out, "docs",
                                   "full", push_settings(emulator), max_records=2)  # fmt: skip

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(interrupted())

    assert not (out / MANIFEST).exists() and len(list(out.glob("*.xml"))) == 2
    assert emulator.pushes() == []


def test_a_full_run_whose_push_stops_midway_is_finished_by_push(
    emulator: Emulator, tls: Any, tmp_path: Path
) -> None:
    """A full run's push starts once its set is whole; a file the appliance refuses stops its
    datasource's push there. `fastfeed push OUT` sends the rest in order, not the file
    accepted before (the journal), and the index ends equal to the input."""
    source = tmp_path / "docs.jsonl"
    urls = [f"http://e.example.com/{n}" for n in range(6)]
    source.write_text("".join(f'{{"url": "{url}", "content": "{url}"}}\n' for url in urls))
    out = tmp_path / "run-set"
    argv = cli(source, emulator, tls, "--datasource", "docs", "--feedtype", "full",
               "--max-records", "2", "--out", str(out))  # fmt: skip
    argv[argv.index("push")] = "run"
    emulator.add_fault(Fault.slow(seconds=0.0))
    emulator.add_fault(Fault.answer("Error - the appliance dislikes this"))
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1, ran.stderr

    done = subprocess.run(cli(out, emulator, tls, "--json"), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == {
        "accepted": 2, "skipped": 1, "failed": 0, "blocked": 0,
    }  # fmt: skip
    assert [p.filename for p in emulator.pushes()] == [
        "docs-000001.xml", "docs-000002.xml", "docs-000002.xml", "docs-000003.xml",
    ]  # fmt: skip
    emulator.wait_idle()
    assert sorted(emulator.documents("docs")) == sorted(urls)
