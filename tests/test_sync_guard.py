"""What keeps a sync from deleting much by accident, and the ways out a user is given: a
missing input, the share form of --allow-deletes, a dry run over the guard, forgetting a whole
state, and abandoning a set that fails every time."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastfeed.sets.state
import orjson
import pytest
from fastfeed import FastfeedError, PushError, PushSettings, StateError, sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.state import SyncState
from fastfeed.sets.sync import locked
from test_sync import _CLI, doc, expected, index, received, write

Settings = Callable[..., PushSettings]

pytestmark = pytest.mark.usefixtures("clean_env")


def _argv(emulator: Emulator, tls: Any, src: str, state: Path) -> list[str]:
    return ["sync", src, "--datasource", "docs", "--state", str(state), "--host", "127.0.0.1",
            "--port", str(emulator.port), "--cacert", str(tls.ca_path)]  # fmt: skip


def test_a_missing_input_directory_is_refused_whatever_deletes_are_allowed(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    for n in range(3):
        (share / f"{n}.txt").write_text(f"file {n}")
    state = tmp_path / "share.state"
    base = "http://files.example.com/share/"
    sync([str(share)], state, "docs", push_settings(emulator), base_url=base,
         out_dir=tmp_path / "s1")  # fmt: skip
    share.rename(tmp_path / "elsewhere")  # an unmounted share, a mistyped path

    with pytest.raises(FastfeedError, match="cannot read .*share: No such file or directory"):
        sync([str(share)], state, "docs", push_settings(emulator), base_url=base,
             out_dir=tmp_path / "s2", allow_deletes=1.0)  # fmt: skip
    assert received(emulator) == 3 and len(index(emulator)) == 3
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        assert st.count() == 3


def test_allow_deletes_takes_a_share(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "docs.state"
    argv = _argv(emulator, tls, write(tmp_path / "a.jsonl", [doc(n) for n in range(10)]), state)
    assert main(argv) == 0
    half = [doc(n) for n in range(5)]
    argv = _argv(emulator, tls, write(tmp_path / "b.jsonl", half), state)
    capsys.readouterr()

    for short in ("0.4", "40%"):  # 5 of 10 is more than 40%
        assert main([*argv, "--allow-deletes", short]) == 3
        assert "5 of the 10 documents" in capsys.readouterr().err
    assert main([*argv, "--allow-deletes", "0.5", "--dry-run"]) == 0
    assert main([*argv, "--allow-deletes", "50%"]) == 0
    assert index(emulator) == expected(half)


def test_a_dry_run_over_the_guard_shows_what_it_found_then_the_refusal(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "docs.state"
    assert main(_argv(emulator, tls, write(tmp_path / "a.jsonl", [doc(n) for n in range(4)]),
                      state)) == 0  # fmt: skip
    capsys.readouterr()

    empty = _argv(emulator, tls, write(tmp_path / "empty.jsonl", []), state)
    assert main([*empty, "--dry-run", "--json"]) == 3
    out, err = capsys.readouterr()
    preview = err.index("would send 0 new, 0 changed, 4 deleted")
    assert err.index("deleted: http://docs.example.com/0") < preview < err.index("refused:")
    shown = json.loads(out)
    assert not shown["ok"] and shown["deleted"] == 4 and "--allow-deletes 4" in shown["refused"]
    assert received(emulator) == 4


def test_forget_all_takes_your_word_and_waits_for_a_running_sync(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "docs.state"
    src = write(tmp_path / "a.jsonl", [doc(n) for n in range(3)])
    sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s1")

    with pytest.raises(SystemExit) as usage:
        main(["state", "forget", str(state), "--all"])
    assert usage.value.code == 2 and "add --yes" in capsys.readouterr().err
    with locked(state):  # a sync is running
        assert main(["state", "forget", str(state), "--all", "--yes"]) == 1
        assert "another sync is using" in capsys.readouterr().err
    assert main(["state", "forget", str(state), "--all", "--yes"]) == 0

    again = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s2")
    assert (again.diff.new, again.diff.unchanged, again.diff.held) == (3, 0, 0)


def test_forgotten_urls_leave_no_trace_in_the_state_file(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n, url=f"http://docs.example.com/{n}.html") for n in range(3000)]
    sync([write(tmp_path / "a.jsonl", records)], state, "docs", push_settings(emulator),
         out_dir=tmp_path / "s1")  # fmt: skip

    def held(n: int) -> int:
        """How many times the state's file holds the URL of record n."""
        return state.read_bytes().count(records[n]["url"].encode())

    forgotten = [17, 1500, 2999]
    argv = ["state", "forget", str(state)]
    assert main([*argv, *(a for n in forgotten for a in ("--url", records[n]["url"]))]) == 0
    assert [held(n) for n in forgotten] == [0, 0, 0]
    assert held(18) == 1
    assert main([*argv, "--all", "--yes"]) == 0
    assert b"docs.example.com" not in state.read_bytes()
    assert sorted(p.name for p in tmp_path.glob("docs.state*")) == ["docs.state", "docs.state.lock"]


def _write_locked(state: Path) -> None:
    """Waits until a sync holds the write lock of `state` (a first sync, from its read)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if state.exists():
            probe = sqlite3.connect(state, timeout=0, isolation_level=None)
            made = None
            try:
                made = probe.execute("SELECT 1 FROM meta WHERE key = 'schema'").fetchone()
                probe.execute("BEGIN IMMEDIATE")  # fails while the sync holds the lock
                probe.execute("ROLLBACK")
            except sqlite3.OperationalError:
                if made:  # the state made, then the lock taken again: the read
                    return
            finally:
                probe.close()
        time.sleep(0.05)
    raise AssertionError(f"no sync took {state}")


def test_the_state_answers_while_a_first_sync_reads_and_changes_to_it_wait(
    emulator: Emulator,
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "docs.state"
    argv = [*_argv(emulator, tls, "-", state), "--out", str(tmp_path / "s1")]
    child = subprocess.Popen([*_CLI, *argv], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdin is not None
    try:
        # A first sync, held at its read of a slow input: its write lock held all the while.
        child.stdin.write(b"".join(orjson.dumps(doc(n)) + b"\n" for n in range(50)))
        child.stdin.flush()
        _write_locked(state)

        started = time.monotonic()
        assert main(["state", "show", str(state), "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert (shown["documents"], shown["pending_set"]) == (0, None)  # what it held before
        assert main(["state", "export", str(state)]) == 0
        assert capsys.readouterr().out == ""
        assert time.monotonic() - started < 3  # not after SQLite's wait for the lock
        for change in (["forget", str(state), "--all", "--yes"], ["abandon", str(state)]):
            assert main(["state", *change]) == 1
            assert f"another sync is using {state}; wait for it to end" in capsys.readouterr().err
        # Any write to the state waits for it, then says so (not SQLite's "database is locked").
        monkeypatch.setattr(fastfeed.sets.state, "WAIT", 0.1)
        with SyncState(state, None) as st, pytest.raises(StateError) as busy:
            st.forget(["http://docs.example.com/1"])
        assert str(busy.value) == f"another sync is using {state}; wait for it to end"
    finally:
        _, err = child.communicate(timeout=60)  # the end of its input
    assert child.returncode == 0, err.decode()
    assert main(["state", "show", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 50


def test_abandoning_a_set_that_fails_every_time_lets_the_next_sync_go_on(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "docs.state"
    settings = push_settings(emulator, retries=0)
    records = [doc(n) for n in range(4)]
    # The appliance refuses the second file every time (say, a record it cannot take).
    emulator.add_fault(Fault.slow(0))
    emulator.add_fault(Fault.http_status(503, times=100))
    first = sync([write(tmp_path / "a.jsonl", records)], state, "docs", settings,
                 out_dir=tmp_path / "s1", max_records=2)  # fmt: skip
    assert not first.ok
    with pytest.raises(PushError, match=f"fastfeed state abandon {state}"):
        sync([write(tmp_path / "a.jsonl", records)], state, "docs", settings,
             out_dir=tmp_path / "s2")  # fmt: skip

    assert main(["state", "abandon", str(state)]) == 0
    said = capsys.readouterr().err
    assert f"abandoned {tmp_path / 's1'}: the next sync sends again the 2 URLs" in said
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        # What the appliance accepted; the others maybe held (a refused file may have arrived),
        # new records still: it held none of them before.
        assert st.pending_set is None and (st.count(), st.maybe_held()) == (2, 2)
    emulator.clear_faults()
    fixed = sync([write(tmp_path / "b.jsonl", records)], state, "docs", settings,
                 out_dir=tmp_path / "s3")  # fmt: skip
    assert fixed.ok and fixed.resumed == 0 and (fixed.diff.new, fixed.diff.changed) == (2, 0)
    assert index(emulator) == expected(records)
