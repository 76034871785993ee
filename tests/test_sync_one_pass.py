"""A sync that sends every record (the first, `--resend-all`, fingerprints of another version)
reads its snapshot once: the writer fingerprints each record as it builds it. What the user
sees is the same as two passes gave: the index equals the snapshot, the guard stops mass
deletes before anything is sent, warnings name the input line."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastfeed import InputError, MassDelete, PushSettings, sync
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets import snapshot
from fastfeed.sets.journal import JOURNAL
from fastfeed.sets.state import FINGERPRINT_VERSION, SyncState
from test_sync import _child_sync, doc, expected, index, received, write

Settings = Callable[..., PushSettings]

pytestmark = pytest.mark.usefixtures("clean_env")


def _held(state: Path, emulator: Emulator) -> dict[str, str]:
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        return {url: fp for url, fp, _ in st.documents()}


def test_a_first_sync_builds_as_it_reads_and_the_next_compares_first(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes: list[int] = []
    fingerprint_jsonl = snapshot._core.fingerprint_jsonl

    def counted(chunk: Any, **where: int) -> Any:
        passes.append(1)
        return fingerprint_jsonl(chunk, **where)

    monkeypatch.setattr(snapshot._core, "fingerprint_jsonl", counted)
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(20)]
    first = sync([write(tmp_path / "a.jsonl", records)], state, "docs", push_settings(emulator),
                 out_dir=tmp_path / "s1")  # fmt: skip
    assert first.ok and first.diff.new == 20 and first.pushed is not None
    assert passes == [], "the first sync fingerprints in the build's own pass"
    assert index(emulator) == expected(records)
    held = _held(state, emulator)
    assert set(held) == {r["url"] for r in records}

    records[3]["content"] = "changed"
    second = sync([write(tmp_path / "b.jsonl", records)], state, "docs",
                  push_settings(emulator), out_dir=tmp_path / "s2")  # fmt: skip
    assert passes, "a sync that sends what changed compares first"
    assert (second.diff.changed, second.diff.unchanged) == (1, 19)
    assert received(emulator) == 21 and index(emulator) == expected(records)
    # The writer's fingerprints are the comparison's: the 19 unchanged kept theirs.
    now = _held(state, emulator)
    assert [u for u in held if held[u] != now[u]] == [records[3]["url"]]


def test_resend_all_over_the_guard_sends_nothing_and_keeps_no_set(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    sync([write(tmp_path / "a.jsonl", [doc(n) for n in range(10)])], state, "docs",
         push_settings(emulator), out_dir=tmp_path / "s1")  # fmt: skip
    before = _held(state, emulator)
    with pytest.raises(MassDelete) as refused:
        sync([write(tmp_path / "b.jsonl", [doc(n) for n in range(5)])], state, "docs",
             push_settings(emulator), out_dir=tmp_path / "s2", resend_all=True)  # fmt: skip
    assert (refused.value.deleted, refused.value.held) == (5, 10)
    assert received(emulator) == 10 and not (tmp_path / "s2").exists()
    assert _held(state, emulator) == before


def test_fingerprints_of_another_version_are_said_and_sent_once_again(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    src = write(tmp_path / "a.jsonl", [doc(n) for n in range(10)])
    sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s1")
    # A state an earlier fastfeed left: version 1 fingerprints, and no version recorded.
    db = sqlite3.connect(state)
    db.execute("UPDATE documents SET fingerprint = 'v1' || substr(fingerprint, 3)")
    db.execute("DELETE FROM meta WHERE key = 'fingerprint'")
    db.commit()
    db.close()

    again = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s2")
    assert again.ok and again.outdated == "fastfeed-fp1"
    assert (again.diff.changed, again.diff.unchanged) == (10, 0)
    assert f"were fastfeed-fp1, this fastfeed makes {FINGERPRINT_VERSION}" in again.describe()
    assert again.to_dict()["outdated_fingerprints"] == "fastfeed-fp1"

    last = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s3")
    assert last.pushed is None and last.outdated == "" and last.diff.unchanged == 10
    assert received(emulator) == 20


def test_a_warning_of_a_first_sync_names_the_input_line(
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = write(tmp_path / "a.jsonl", [doc(1), doc(2, content="x" * 5000), doc(3)])
    summary = sync([src], tmp_path / "docs.state", "docs", push_settings(emulator),
                   out_dir=tmp_path / "s1", max_bytes=2000, compress="never")  # fmt: skip
    assert summary.ok and received(emulator) == 3
    assert f"warning: {src}:2: the record is" in capsys.readouterr().err


def _unlinked_files(pid: int) -> list[int]:
    """The sizes of the files process `pid` holds open that have no name any more (SQLite's
    temporary files: a snapshot's table, a sort)."""
    sizes = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                sizes.append(os.stat(f"/proc/{pid}/fd/{fd}").st_size)
        except FileNotFoundError:
            continue  # closed meanwhile
    return sizes


def test_while_a_first_sync_pushes_its_state_holds_each_url_once_and_nothing_else(
    make_emulator: Callable[..., Emulator], tls: Any, tmp_path: Path
) -> None:
    emulator = make_emulator()
    emulator.add_fault(Fault(kind="slow", seconds=0.3, times=100))
    records = [doc(n) for n in range(3000)]
    state = tmp_path / "docs.state"
    argv = ["sync", write(tmp_path / "a.jsonl", records), "--datasource", "docs", "--state",
            str(state), "--host", "127.0.0.1", "--port", str(emulator.port), "--cacert",
            str(tls.ca_path), "--max-records", "500", "--out", str(tmp_path / "s1")]  # fmt: skip
    child = _child_sync(argv, tmp_path)
    journal = tmp_path / "s1" / JOURNAL
    deadline = time.monotonic() + 30
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 1):
        assert time.monotonic() < deadline and child.poll() is None, "the push never started"
        time.sleep(0.01)

    # Pushing: the URLs are in the pending set alone, committed; no copy of them in a
    # temporary table, and nothing of the reading (where each record's line is) beside it.
    assert not list(tmp_path.glob(".docs.state.sync-*"))
    assert [size for size in _unlinked_files(child.pid) if size] == []
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
        held, pending = db.execute(
            "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM pending)"
        ).fetchone()
    assert held + pending == 3000 and pending >= 2000  # some files may be accepted already
    assert child.wait(60) == 0
    assert index(emulator) == expected(records)


def test_the_state_writes_each_url_of_a_first_sync_once_more_when_the_set_is_accepted(
    tmp_path: Path,
) -> None:
    with SyncState(tmp_path / "docs.state", "appliance datasource docs") as st:
        st.start_snapshot(pending=True)
        for first in range(0, 20_000, 5000):
            rows = [
                [f"http://docs.example.com/{n}", f"{n:032x}"] for n in range(first, first + 5000)
            ]
            st.add_snapshot(orjson.dumps(rows).decode())
        assert st.compare(repeats=True).new == 20_000
        st.set_pending_snapshot(tmp_path / "s1", "appliance", deletes=False)
        assert st.pending_count() == 20_000
        st._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL from here: the commit's
        st.commit_records([(0, 20_000)])
        assert (st.count(), st.pending_count()) == (20_000, 0)
        documents = st._db.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'documents'")
        wal = os.path.getsize(f"{tmp_path / 'docs.state'}-wal")
        # Their pages, and few more: the pending rows' pages freed, not written again.
        assert wal < 1.2 * documents.fetchone()[0]


def test_a_first_sync_refused_at_its_last_record_leaves_no_set_behind(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(2000)]
    bad = [*records, doc(2000, url="http://unqualified/2000")]
    with pytest.raises(InputError, match=r"a.jsonl:2001: url: host 'unqualified'"):
        sync([write(tmp_path / "a.jsonl", bad)], state, "docs", push_settings(emulator),
             out_dir=tmp_path / "s1")  # fmt: skip

    with SyncState(state, None) as st:
        assert (st.pending_set, st.pending_count(), st.count()) == (None, 0, 0)
    again = sync([write(tmp_path / "b.jsonl", records)], state, "docs", push_settings(emulator),
                 out_dir=tmp_path / "s2")  # fmt: skip
    assert again.ok and again.diff.new == 2000 and again.resumed == 0
    assert index(emulator) == expected(records)
