"""`fastfeed sync --confirm` against the emulator over HTTPS: the sync ends once the appliance
processed what it accepted, a file its feeder failed is reported and sent again by the next
sync, and a feeder that never gets to the files ends the wait with a clear message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastfeed import PushSettings, Secret, sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.emulator.adminapi import ADMIN_PASSWORD, ADMIN_USER
from fastfeed.gsa.adminapi import AdminApi
from fastfeed.gsa.confirm import Confirm
from fastfeed.sets.state import UNKNOWN, SyncState
from test_sync import doc, expected, index, received, write

Settings = Callable[..., PushSettings]

pytestmark = pytest.mark.usefixtures("clean_env")


def admin(emulator: Emulator, password: str = ADMIN_PASSWORD) -> AdminApi:
    return AdminApi(emulator.url, ADMIN_USER, Secret(password))


def test_confirm_returns_once_the_feeder_processed_every_file(
    make_emulator: Callable[..., Emulator], push_settings: Settings, tmp_path: Path
) -> None:
    # A feeder slower than the push: the files wait in the backlog when the push ends.
    emulator = make_emulator(drain_per_second=8)
    records = [doc(n) for n in range(12)]
    summary = sync([write(tmp_path / "a.jsonl", records)], tmp_path / "docs.state", "docs",
                   push_settings(emulator), out_dir=tmp_path / "s1", max_records=2,
                   confirm=Confirm(timeout=30, admin=admin(emulator)))  # fmt: skip

    assert emulator.backlog == 0  # no waiting here: the sync did
    assert summary.ok and summary.confirmed is not None
    # 6 files; the feed log keeps the latest 5 of a datasource: the first is processed (the
    # backlog drained) but no longer reported.
    outcomes = [c.outcome for c in summary.confirmed.files]
    assert outcomes == ["unreported"] + ["processed"] * 5
    assert {u: (d.content, sorted(d.metadata)) for u, d in emulator.documents("docs").items()} \
        == expected(records)  # fmt: skip


def test_a_file_the_feeder_fails_is_reported_and_sent_again_by_the_next_sync(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(12)]
    src = write(tmp_path / "a.jsonl", records)
    argv = ["sync", src, "--datasource", "docs", "--state", str(state), "--host", "127.0.0.1",
            "--port", str(emulator.port), "--cacert", str(tls.ca_path), "--max-records", "4",
            "--confirm", "--admin-url", emulator.url, "--admin-user", ADMIN_USER,
            "--confirm-timeout", "30", "--backlog-interval", "0.05", "--json"]  # fmt: skip
    # The first file goes through; the second is accepted, then failed by the feeder.
    emulator.add_fault(Fault.slow(0))
    emulator.add_fault(Fault.fail_in_feeder())

    with pytest.MonkeyPatch.context() as env:
        env.setenv("FASTFEED_ADMIN_PASSWORD", ADMIN_PASSWORD)
        status = main([*argv, "--out", str(tmp_path / "s1")])
        out, err = capsys.readouterr()
        assert status == 1, err
        checks = json.loads(out)["confirm"]["files"]
        assert [c["outcome"] for c in checks] == ["processed", "failed", "processed"]
        failed = tmp_path / "s1" / checks[1]["file"]
        assert f"{failed}: failed: FAILED_IN_ERROR" in err
        assert "could not process the feed" in err  # the feed's log says why

        # The state no longer claims the failed file's records are held; the others are.
        lost = {r["url"] for r in records[4:8]}
        assert not lost & set(index(emulator))
        with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
            held = {url: fp for url, fp, _ in st.documents()}
        assert {u for u, fp in held.items() if fp == UNKNOWN} == lost and len(held) == 12
        assert main(["state", "show", str(state), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["unknown"] == 4

        # The next sync sends those four records, and only them.
        assert main([*argv, "--out", str(tmp_path / "s2")]) == 0
        again = json.loads(capsys.readouterr().out)
    assert (again["changed"], again["unchanged"], again["push"]["records"]) == (4, 8, 4)
    assert index(emulator) == expected(records)


def test_a_paused_feeder_ends_the_wait_with_a_clear_message(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(6)]
    emulator.pause_feeder()
    summary = sync([write(tmp_path / "a.jsonl", records)], state, "docs",
                   push_settings(emulator), out_dir=tmp_path / "s1", max_records=3,
                   confirm=Confirm(timeout=0.5))  # fmt: skip

    assert not summary.ok and summary.confirmed is not None
    assert "had not processed what it accepted after 0.5 s (2 files still in its backlog; " \
        "is its feeder paused?)" in summary.confirmed.problem  # fmt: skip
    assert [c.outcome for c in summary.confirmed.files] == ["unconfirmed"] * 2
    # Accepted is what the state records: the appliance holds the files, unprocessed.
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        assert st.count() == 6 and st.last_sync is None
    emulator.resume_feeder()
    assert index(emulator) == expected(records)


def test_a_refused_admin_login_stops_the_sync_before_it_sends(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    from fastfeed import PushError

    with pytest.raises(PushError, match="refused the login of 'admin'") as refused:
        sync([write(tmp_path / "a.jsonl", [doc(1)])], tmp_path / "docs.state", "docs",
             push_settings(emulator), out_dir=tmp_path / "s1",
             confirm=Confirm(admin=admin(emulator, password="wrong")))  # fmt: skip
    assert refused.value.refused
    assert emulator.pushes() == []


def test_a_sync_killed_while_it_confirmed_has_its_files_sent_again(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(6)]
    src = write(tmp_path / "a.jsonl", records)
    first = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s1")
    assert first.ok and received(emulator) == 6
    # What a sync killed while it waited for the feeder leaves: two records committed as the
    # appliance accepted their file, whose outcome it never read.
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        held = {url: fp for url, fp, _ in st.documents()}
        mine = [(r["url"], held[r["url"]]) for r in records[:2]]
        with st.recording_pending(tmp_path / "s0", f"127.0.0.1:{emulator.port}", mine):
            pass
        st.commit_records([(0, 2)], confirming=True)
        st.clear_pending()

    again = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s2")

    # The feeder may have failed that file: its records are sent again, and only they.
    assert again.ok and again.diff.changed == 2
    assert received(emulator) == 8
