"""The sync state's file: one that holds no state (emptied, cut short) is refused, never taken
for a new state that would send no deletes; a new one is in place only once complete."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from fastfeed import PushSettings, StateError, sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator
from fastfeed.sets.state import SyncState
from test_sync import doc, expected, index, received, write

Settings = Callable[..., PushSettings]

pytestmark = pytest.mark.usefixtures("clean_env")


def _argv(emulator: Emulator, tls: Any, src: str, state: Path, out: Path) -> list[str]:
    return ["sync", src, "--datasource", "docs", "--state", str(state), "--out", str(out),
            "--host", "127.0.0.1", "--port", str(emulator.port),
            "--cacert", str(tls.ca_path)]  # fmt: skip


@pytest.mark.parametrize("emptied", ["truncated", "no tables"])
def test_a_state_file_that_holds_no_state_is_refused_and_nothing_is_sent(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], emptied: str
) -> None:
    state = tmp_path / "docs.state"
    in0 = [doc(n) for n in range(100)]
    assert (
        main(_argv(emulator, tls, write(tmp_path / "in0.jsonl", in0), state, tmp_path / "s1")) == 0
    )
    state.write_bytes(b"")  # `: > docs.state`
    if emptied == "no tables":  # an SQLite file, with no table (made by hand, vacuumed empty)
        sqlite3.connect(state).execute("PRAGMA user_version = 1").connection.close()
    capsys.readouterr()

    in1 = write(tmp_path / "in1.jsonl", in0[30:])
    assert main(_argv(emulator, tls, in1, state, tmp_path / "s2")) == 3
    err = capsys.readouterr().err
    assert f"{state} holds no sync state" in err
    assert "Restore it from a backup" in err and "remove it to start over" in err
    assert received(emulator) == 100 and index(emulator) == expected(in0)
    assert main(["state", "show", str(state)]) == 1
    assert f"{state} holds no sync state" in capsys.readouterr().err


def test_a_new_state_is_in_place_only_once_complete(
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "docs.state"
    src = write(tmp_path / "a.jsonl", [doc(n) for n in range(3)])

    def killed(*args: object) -> NoReturn:
        raise KeyboardInterrupt  # the sync stopped before its new state was in place

    with monkeypatch.context() as patched:
        patched.setattr(os, "rename", killed)
        with pytest.raises(KeyboardInterrupt):
            sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s1")
    assert not state.exists()  # no empty file, which the next sync would refuse
    assert received(emulator) == 0

    again = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s2")
    assert again.ok and again.diff.new == 3
    assert sorted(p.name for p in tmp_path.glob("*docs.state*")) == [
        "docs.state",
        "docs.state.lock",
    ]
    with pytest.raises(StateError, match="is the state of 127.0.0.1:.* datasource docs"):
        sync([src], state, "other", push_settings(emulator), out_dir=tmp_path / "s3")


def test_a_full_disk_under_the_state_stops_the_sync_before_it_sends_saying_so(
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "docs.state"
    first = [doc(n) for n in range(100)]
    sync([write(tmp_path / "a.jsonl", first)], state, "docs", push_settings(emulator),
         out_dir=tmp_path / "s1")  # fmt: skip
    opened = SyncState._open

    def full(st: SyncState, target: str | None) -> str:
        """The state's file cannot grow (SQLite's own "database or disk is full")."""
        held = opened(st, target)
        pages = st._db.execute("PRAGMA page_count").fetchone()[0]
        st._db.execute(f"PRAGMA max_page_count = {pages}")
        return held

    more = [doc(n) for n in range(3000)]
    with monkeypatch.context() as patched:
        patched.setattr(SyncState, "_open", full)
        with pytest.raises(StateError) as stopped:
            sync([write(tmp_path / "b.jsonl", more)], state, "docs", push_settings(emulator),
                 out_dir=tmp_path / "s2")  # fmt: skip
    assert str(stopped.value).startswith(f"cannot write the sync state {state}: the disk is full")
    assert "free space" in str(stopped.value)
    assert received(emulator) == 100  # nothing sent

    again = sync([write(tmp_path / "b.jsonl", more)], state, "docs", push_settings(emulator),
                 out_dir=tmp_path / "s3")  # fmt: skip
    assert again.ok and again.diff.new == 2900 and index(emulator) == expected(more)


def test_a_refused_state_file_is_left_as_it_was(tmp_path: Path) -> None:
    """A file of another program, or one cut short, is looked at before anything is written:
    refused, it gains no table and no write-ahead log."""
    state = tmp_path / "docs.state"
    db = sqlite3.connect(state)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.commit()
    db.close()
    before = state.read_bytes()
    with pytest.raises(StateError, match="holds no sync state"):
        SyncState(state, "127.0.0.1:1 datasource docs")
    assert state.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.state"]
