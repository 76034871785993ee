"""A sync that sends every record (the first, `--resend-all`, fingerprints of another version)
reads its snapshot once: the writer fingerprints each record as it builds it. What the user
sees is the same as two passes gave: the index equals the snapshot, the guard stops mass
deletes before anything is sent, warnings name the input line."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastfeed import MassDelete, PushSettings, sync
from fastfeed.emulator import Emulator
from fastfeed.sets import snapshot
from fastfeed.sets.state import FINGERPRINT_VERSION, SyncState
from test_sync import doc, expected, index, received, write

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
