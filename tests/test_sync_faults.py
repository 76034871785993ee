"""A sync carrying changes and deletes, when the appliance fails it part way (retries exhausted,
kill -9): the state never runs ahead of what the appliance's index holds, and the next sync
finishes the job. And `--resend-all`, after an index reset."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastfeed import Outcome, PushSettings, sync
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.journal import JOURNAL
from fastfeed.sets.state import SyncState
from test_sync import _child_sync, _rerun, doc, expected, index, received, write

Settings = Callable[..., PushSettings]

pytestmark = pytest.mark.usefixtures("clean_env")

OLD = [doc(n) for n in range(10)]


def _new() -> list[dict[str, Any]]:
    """OLD with 3 records changed, 2 deleted (8 and 9) and 2 added: in the set, the changes
    (0, 1, 2, 10, 11) come first, then the deletes."""
    new = [doc(n) for n in range(8)] + [doc(10), doc(11)]
    for record in new[:3]:
        record["content"] = f"{record['content']}, changed"
    return new


def _held(state: Path, emulator: Emulator) -> dict[str, str]:
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        return {url: fp for url, fp, _ in st.documents()}


def _assert_state_not_ahead(
    state: Path, emulator: Emulator, old_fingerprints: dict[str, str], *, exact: bool = True
) -> None:
    """The state never claims more than the index holds: a URL whose fingerprint moved holds
    the new record there, and a URL the state dropped is gone. `exact`: nor less (a push that
    ended commits every file accepted; one killed may leave the last ones to the next sync)."""
    held = _held(state, emulator)
    now = index(emulator)
    old, new = expected(OLD), expected(_new())
    assert set(held) <= set(now) if not exact else set(held) == set(now)
    for url, fingerprint in held.items():
        if fingerprint != old_fingerprints.get(url):
            assert now[url] == new[url]
        elif exact:
            assert now[url] == old[url]


@pytest.mark.parametrize("fault", ["503", "disk full"])
@pytest.mark.parametrize("accepted", [1, 3])
def test_a_sync_whose_retries_run_out_records_only_what_arrived(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, fault: str, accepted: int
) -> None:
    state = tmp_path / "docs.state"
    settings = push_settings(emulator, retries=1, disk_full_retries=1)
    sync([write(tmp_path / "a.jsonl", OLD)], state, "docs", settings, out_dir=tmp_path / "s1")
    before = _held(state, emulator)

    # Files of 2 records: [0, 1], [2, 10], [11, delete 8], [delete 9]. The first `accepted` go
    # through; every attempt at the next one fails.
    for _ in range(accepted):
        emulator.add_fault(Fault.slow(0))
    failing = Fault.http_status(503, times=50) if fault == "503" else Fault.disk_full(times=50)
    emulator.add_fault(failing)
    src = write(tmp_path / "b.jsonl", _new())
    second = sync([src], state, "docs", settings, out_dir=tmp_path / "s2", max_records=2,
                  allow_deletes=2)  # fmt: skip

    assert not second.ok and second.pushed is not None
    assert second.pushed.count(Outcome.ACCEPTED) == accepted
    _assert_state_not_ahead(state, emulator, before)
    assert (doc(8)["url"] in _held(state, emulator)) == (accepted < 3)

    emulator.clear_faults()
    third = sync([src], state, "docs", settings, out_dir=tmp_path / "s3", allow_deletes=2)
    assert third.ok and third.pushed is None and third.resumed > 0
    assert index(emulator) == expected(_new())
    _assert_state_not_ahead(state, emulator, before)


def test_a_sync_of_changes_and_deletes_killed_mid_push_loses_nothing(
    make_emulator: Callable[..., Emulator], push_settings: Settings, tls: Any, tmp_path: Path
) -> None:
    emulator = make_emulator()
    state = tmp_path / "docs.state"
    sync([write(tmp_path / "a.jsonl", OLD)], state, "docs", push_settings(emulator),
         out_dir=tmp_path / "s1")  # fmt: skip
    before = _held(state, emulator)
    src = write(tmp_path / "b.jsonl", _new())
    argv = ["sync", src, "--datasource", "docs", "--state", str(state), "--host", "127.0.0.1",
            "--port", str(emulator.port), "--cacert", str(tls.ca_path), "--max-records", "1",
            "--allow-deletes", "2"]  # fmt: skip
    # Each answer takes 0.3 s, so that the sync can be caught between files.
    emulator.add_fault(Fault(kind="slow", seconds=0.3, times=100))
    child = _child_sync([*argv, "--out", str(tmp_path / "s2")], tmp_path)
    journal = tmp_path / "s2" / JOURNAL
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        journal.exists() and journal.read_bytes().count(b"\n") >= 3
    ):
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    emulator.clear_faults()
    _assert_state_not_ahead(state, emulator, before, exact=False)

    summary = _rerun([*argv, "--out", str(tmp_path / "s3")], tmp_path)
    assert summary["resumed"] > 0 and summary["unchanged"] == 10 and summary["deleted"] == 0
    assert index(emulator) == expected(_new())
    assert set(_held(state, emulator)) == {r["url"] for r in _new()}
    # 10 at first, then 7 records in files of one: only the file in flight may come twice.
    assert received(emulator) <= 10 + 7 + 1


def test_resend_all_sends_every_record_again_and_still_deletes(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    settings = push_settings(emulator)
    sync([write(tmp_path / "a.jsonl", OLD)], state, "docs", settings, out_dir=tmp_path / "s1")
    emulator.wait_idle(timeout=30)  # accepted is not yet processed
    # The index was reset: the appliance lost everything the state says it holds.
    with emulator.state.index.transaction() as db:
        db.execute("DELETE FROM documents")
    assert index(emulator) == {}

    kept = OLD[:9]  # and one deleted
    again = sync([write(tmp_path / "b.jsonl", kept)], state, "docs", settings,
                 out_dir=tmp_path / "s2", resend_all=True)  # fmt: skip

    d = again.diff
    assert (d.new, d.changed, d.deleted, d.unchanged) == (0, 9, 1, 0)
    assert again.ok and again.pushed is not None and again.pushed.records_sent == 10
    assert index(emulator) == expected(kept)
    assert set(_held(state, emulator)) == {r["url"] for r in kept}
