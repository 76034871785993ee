"""A sync killed mid-push whose set the next one cannot simply finish: run again from another
directory (as under cron), its set removed, or given up with `fastfeed state abandon`. Whatever
of it the appliance may hold, the next sync of the restored source makes the index equal to it
again: nothing it deleted is lost for good."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastfeed import sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.journal import JOURNAL
from fastfeed.sets.manifest import MANIFEST
from fastfeed.sets.state import UNKNOWN, SyncState
from test_sync import _CLI, _child_sync, doc, write

pytestmark = pytest.mark.usefixtures("clean_env")

RECORDS = [{"url": f"http://docs.example.com/{n}", "content": f"document {n}"} for n in range(100)]


def _argv(receiver: str, emulator: Emulator, tls: Any, src: str, state: Path) -> list[str]:
    if receiver == "gsa":
        where = ["sync", src, "--datasource", "docs", "--host", "127.0.0.1", "--port",
                 str(emulator.port)]  # fmt: skip
    else:
        where = ["thunderstone", "sync", src, "--profile", "docs", "--url",
                 f"{emulator.url}/texis/dowalk/recvdata.xml"]  # fmt: skip
    return [*where, "--state", str(state), "--cacert", str(tls.ca_path), "--max-records", "2"]


def _index(receiver: str, emulator: Emulator) -> set[str]:
    emulator.wait_idle()
    if receiver == "gsa":
        return set(emulator.documents("docs"))
    return set(emulator.thunderstone_documents("docs"))


def _accepted(journal: Path) -> int:
    return journal.read_bytes().count(b'"accepted"') if journal.exists() else 0


@pytest.mark.parametrize("receiver", ["gsa", "thunderstone"])
@pytest.mark.parametrize("then", ["run from another directory", "set removed", "abandoned"])
def test_a_sync_killed_mid_push_loses_no_delete_whatever_becomes_of_its_set(
    make_emulator: Callable[..., Emulator],
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    receiver: str,
    then: str,
) -> None:
    emulator = make_emulator()
    state = tmp_path / "docs.state"
    in0 = write(tmp_path / "in0.jsonl", RECORDS)
    in1 = write(tmp_path / "in1.jsonl", RECORDS[20:])  # URLs 0 to 19 deleted
    argv0 = _argv(receiver, emulator, tls, in0, state)
    assert main([*argv0, "--out", str(tmp_path / "first")]) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()

    # The deletes go 2 a file (10 files), each answer taking 0.5 s: killed once some of them
    # are accepted and journalled, others maybe in flight. The set is kept under the default
    # --out, relative to the directory the sync runs in.
    emulator.add_fault(Fault(kind="slow", seconds=0.5, times=200))
    argv1 = _argv(receiver, emulator, tls, in1, state)
    child = _child_sync([*argv1, "--allow-deletes", "0.5"], a)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
        _accepted(j) >= 2 for j in a.glob(f"fastfeed-feeds/*/{JOURNAL}")
    ):
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    emulator.clear_faults()
    (feed_set,) = a.glob("fastfeed-feeds/*")
    accepted = _accepted(feed_set / JOURNAL)
    assert 2 <= accepted < 10
    assert len(_index(receiver, emulator)) <= 100 - 2 * accepted

    cwd = a
    if then == "run from another directory":
        cwd = b
    elif then == "set removed":
        shutil.rmtree(feed_set)
    else:
        capsys.readouterr()
        assert main(["state", "abandon", str(state)]) == 0
        said = capsys.readouterr().err
        assert (
            f"recorded {2 * accepted} records its journal says were accepted; the next sync "
            f"sends again the {20 - 2 * accepted} URLs"
        ) in said
        with SyncState(state, None) as st:
            assert (st.pending_set, st.count()) == (None, 100 - 2 * accepted)
            assert st.unknown() == 20 - 2 * accepted
    restored = subprocess.run([*_CLI, *argv0], cwd=cwd, capture_output=True, text=True)
    assert restored.returncode == 0, restored.stderr
    if then == "set removed":
        assert (
            f"cannot finish the set {feed_set} an interrupted sync left: it no longer exists"
            in (restored.stderr)
        )
    assert _index(receiver, emulator) == {r["url"] for r in RECORDS}
    with SyncState(state, None) as st:
        held = {url: fp for url, fp, _ in st.documents()}
    assert set(held) == {r["url"] for r in RECORDS} and UNKNOWN not in held.values()


def _gsa_argv(emulator: Emulator, tls: Any, src: str, state: Path, out: Path) -> list[str]:
    return ["sync", src, "--datasource", "docs", "--state", str(state), "--out", str(out),
            "--host", "127.0.0.1", "--port", str(emulator.port),
            "--cacert", str(tls.ca_path)]  # fmt: skip


@pytest.mark.parametrize("lost", ["set removed", "manifest removed"])
@pytest.mark.parametrize("source", ["as it was", "as the lost set had it"])
def test_a_lost_set_of_new_records_sends_them_as_new_and_guards_their_deletes(
    emulator: Emulator,
    push_settings: Callable[..., Any],
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lost: str,
    source: str,
) -> None:
    """The appliance held none of a lost set's new records before it: sent again, they are new;
    deleted, they count as held for the mass-delete guard, for the appliance may hold them all.
    A dry run says what the sync then does."""
    state = tmp_path / "docs.state"
    in100, in150 = [doc(n) for n in range(100)], [doc(n) for n in range(150)]
    src100, src150 = write(tmp_path / "in100.jsonl", in100), write(tmp_path / "in150.jsonl", in150)
    settings = push_settings(emulator, retries=1)
    assert sync([src100], state, "docs", settings, out_dir=tmp_path / "s1").ok
    emulator.add_fault(Fault.http_status(503, times=100))
    left = tmp_path / "s2"
    assert not sync([src150], state, "docs", settings, out_dir=left, max_records=10).ok
    emulator.clear_faults()
    if lost == "set removed":
        shutil.rmtree(left)
        why = "it no longer exists"
    else:
        (left / MANIFEST).unlink()
        (left / JOURNAL).unlink(missing_ok=True)  # nothing accepted; none is made (a dry run)
        why = f"its {MANIFEST} is gone (the sync wrote it before sending any file; removed since?)"
    records = in100 if source == "as it was" else in150
    argv = _gsa_argv(emulator, tls, src100 if records is in100 else src150, state, tmp_path / "s3")
    counts = {"new": 0, "changed": 0, "deleted": 50, "unchanged": 100, "held": 100,
              "maybe_held": 50, "unknown": 50}  # fmt: skip
    if records is in150:
        counts.update(new=50, deleted=0)
    capsys.readouterr()

    if records is in100:
        # 50 deletes of the 150 URLs the appliance may hold: more than the default 10%.
        for dry_run in (True, False):
            assert main([*argv, *(["--dry-run"] if dry_run else [])]) == 3
            said = capsys.readouterr().err
            assert f"cannot finish the set {left} an interrupted sync left: {why}." in said
            assert "would delete 50 of the 150 documents" in said
        with SyncState(state, None) as st:  # given up by the sync refused, and nothing sent
            assert (st.pending_set, st.count(), st.maybe_held()) == (None, 100, 50)
        argv = [*argv, "--allow-deletes", "50"]
    for dry_run in (True, False):
        assert main([*argv, "--json", *(["--dry-run"] if dry_run else [])]) == 0
        said = capsys.readouterr()
        assert {k: v for k, v in json.loads(said.out).items() if k in counts} == counts
        if records is in150:
            assert f"cannot finish the set {left} an interrupted sync left: {why}." in said.err
            assert "fastfeed run" not in said.err
            with SyncState(state, None) as st:
                assert (st.pending_set, st.count()) == ((left, 100) if dry_run else (None, 150))
    assert _index("gsa", emulator) == {r["url"] for r in records}
    with SyncState(state, None) as st:
        assert (st.unknown(), st.maybe_held()) == (0, 0)
    assert not (left / JOURNAL).exists()


def test_an_empty_snapshot_after_a_lost_first_sync_deletes_nothing_unasked(
    emulator: Emulator,
    push_settings: Callable[..., Any],
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every URL of a lost first sync is maybe held, and the appliance may hold them all (the
    files arrived, the answers lost): an empty export must not delete them without a word."""
    state = tmp_path / "docs.state"
    src = write(tmp_path / "in.jsonl", [doc(n) for n in range(20)])
    emulator.add_fault(Fault.http_status(503, times=100))
    left = tmp_path / "s1"
    assert not sync([src], state, "docs", push_settings(emulator, retries=1), out_dir=left).ok
    emulator.clear_faults()
    shutil.rmtree(left)
    empty = write(tmp_path / "empty.jsonl", [])
    capsys.readouterr()
    assert main(_gsa_argv(emulator, tls, empty, state, tmp_path / "s2")) == 3
    said = capsys.readouterr().err
    assert "would delete 20 of the 20 documents" in said
    assert "none when the snapshot is empty" in said
    with SyncState(state, None) as st:
        assert (st.pending_set, st.count(), st.maybe_held()) == (None, 0, 20)


def test_abandoning_a_removed_set_says_it_has_no_journal(
    emulator: Emulator, push_settings: Callable[..., Any], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    state = tmp_path / "docs.state"
    src = write(tmp_path / "in.jsonl", [doc(n) for n in range(20)])
    emulator.add_fault(Fault.http_status(503, times=100))
    left = tmp_path / "s1"
    assert not sync([src], state, "docs", push_settings(emulator, retries=1), out_dir=left).ok
    shutil.rmtree(left)
    capsys.readouterr()
    assert main(["state", "abandon", str(state)]) == 0
    said = capsys.readouterr().err
    assert f"abandoned {left}: it has no {JOURNAL} (gone, or its push never started)" in said
    assert "the next sync sends again the 20 URLs" in said
    assert not left.exists()


def _as_an_earlier_fastfeed_left_it(state: Path, feed_set: str, urls: list[str]) -> None:
    """Records a pending set as a fastfeed before the set's absolute path was recorded did:
    before building it, named as given (`--out`, relative to the directory it ran in), with no
    `pending_journal`."""
    db = sqlite3.connect(state)
    with db:
        db.executemany("INSERT INTO pending VALUES (?, ?, ?)",
                       [(n, url, "ab" * 16) for n, url in enumerate(urls)])  # fmt: skip
        db.execute("INSERT INTO meta VALUES ('pending_set', ?)", (feed_set,))
    db.close()


@pytest.mark.parametrize("run_from", ["the directory it ran in", "another directory"])
def test_an_earlier_fastfeeds_set_killed_while_building_is_known_unsent(
    emulator: Emulator,
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    run_from: str,
) -> None:
    """An earlier fastfeed pushed a set only once built: one without a manifest sent nothing,
    and its URLs are not sent again. One not found from the directory a sync runs in is not said
    to be gone."""
    state = tmp_path / "docs.state"
    in100 = [doc(n) for n in range(100)]
    src100 = write(tmp_path / "in100.jsonl", in100)
    assert main(_gsa_argv(emulator, tls, src100, state, tmp_path / "s1")) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    feed_set = Path("fastfeed-feeds/docs-sync-20261126-080000")
    (a / feed_set).mkdir(parents=True)
    (a / feed_set / "docs-00001.xml").write_bytes(b"<?xml")  # the build killed in its first file
    b.mkdir()
    _as_an_earlier_fastfeed_left_it(state, str(feed_set), [doc(n)["url"] for n in range(100, 150)])
    monkeypatch.chdir(a if run_from == "the directory it ran in" else b)
    capsys.readouterr()

    argv = [*_gsa_argv(emulator, tls, src100, state, tmp_path / "s2"), "--json"]
    if run_from == "the directory it ran in":
        assert main(argv) == 0
        said = capsys.readouterr()
        assert (json.loads(said.out)["deleted"], json.loads(said.out)["push"]) == (0, None)
        assert "cannot finish" not in said.err
    else:
        # Which of its files were sent is not known: its URLs, maybe held, are deleted, which
        # deletes a third of what the appliance may hold: that takes the user's word.
        assert main(argv) == 3
        said = capsys.readouterr()
        assert "no longer exists" not in said.err
        assert (
            f"cannot finish the set {feed_set} an interrupted sync left: an earlier fastfeed "
            "named it relative to the directory that sync ran in, and it is not found from this "
            f"one ({b}): that sync ran elsewhere, or it was removed."
        ) in said.err
        assert "would delete 50 of the 150 documents" in said.err
        assert main([*argv, "--allow-deletes", "50"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert (summary["deleted"], summary["held"], summary["maybe_held"]) == (50, 100, 50)
    assert _index("gsa", emulator) == {r["url"] for r in in100}
    with SyncState(state, None) as st:
        assert (st.pending_set, st.count(), st.maybe_held()) == (None, 100, 0)


#: The command line, its set's build ended but the set not yet recorded: killed there.
_KILLED_ONCE_BUILT = """
import os, signal, sys
import fastfeed.sets.sync as sets_sync
from fastfeed.cli import main
built = sets_sync.write_set
def build_then_die(*args, **kwargs):
    built(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
sets_sync.write_set = build_then_die
sys.exit(main())
"""


@pytest.mark.parametrize("stopped", ["build failed", "killed once built"])
def test_a_sync_stopped_before_its_set_is_recorded_leaves_the_state_as_it_was(
    emulator: Emulator,
    tls: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stopped: str,
) -> None:
    state = tmp_path / "docs.state"
    in100 = [doc(n) for n in range(100)]
    assert (
        main(_gsa_argv(emulator, tls, write(tmp_path / "a.jsonl", in100), state, tmp_path / "s1"))
        == 0
    )
    with SyncState(state, None) as st:
        before = list(st.documents())
    changed = write(tmp_path / "b.jsonl", [doc(n, content="new") for n in range(120)][5:])
    argv = _gsa_argv(emulator, tls, changed, state, tmp_path / "s2")
    if stopped == "build failed":

        def fails(*args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("fastfeed.sets.sync.write_set", fails)
        assert main(argv) != 0
    else:
        child = subprocess.run(
            [sys.executable, "-c", _KILLED_ONCE_BUILT, *argv], capture_output=True
        )
        assert child.returncode == -signal.SIGKILL, child.stderr
    with SyncState(state, None) as st:
        assert (st.pending_set, st.pending_count()) == (None, 0)
        assert list(st.documents()) == before
    assert _index("gsa", emulator) == {r["url"] for r in in100}


@pytest.mark.parametrize("built", [True, False])
def test_abandoning_an_earlier_fastfeeds_set_says_what_is_known_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], built: bool
) -> None:
    """An earlier fastfeed did not record which appliance it pushed its set to: its journal
    cannot say which files that one accepted; and one it never finished building it never
    sent."""
    state = tmp_path / "docs.state"
    SyncState(state, "127.0.0.1:1 datasource docs").close()
    feed_set = tmp_path / "s1"
    feed_set.mkdir()
    if built:
        (feed_set / MANIFEST).write_bytes(b"")
    _as_an_earlier_fastfeed_left_it(state, str(feed_set), ["http://docs.example.com/1"])
    capsys.readouterr()
    assert main(["state", "abandon", str(state)]) == 0
    said = capsys.readouterr().err
    assert "cannot be read" not in said
    if built:
        assert (
            f"abandoned {feed_set}: an earlier fastfeed made it and did not record which "
            "appliance it pushed it to, so its push journal cannot say which files that one "
            "accepted; the next sync sends again the 1 URL"
        ) in said
    else:
        assert "never finished, so nothing of it was sent" in said
    with SyncState(state, None) as st:
        assert (st.pending_set, st.maybe_held()) == (None, int(built))
