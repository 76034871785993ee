"""The push journal on disk: what survives a crash, what a replay forgets, who may write it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastfeed.errors import JournalError
from fastfeed.sets.journal import JOURNAL, Journal, JournalWarning
from fastfeed.sets.manifest import ManifestEntry


def entry(n: int, digest: str = "") -> ManifestEntry:
    return ManifestEntry(
        f"docs-{n:06}.xml", "docs", "incremental", 10, 1000, digest or f"blake3:{n:064x}"
    )


def test_accepted_files_are_remembered_across_runs(tmp_path: Path) -> None:
    with Journal(tmp_path, "gsa:19902") as journal:
        journal.record(entry(1))

    with Journal(tmp_path, "gsa:19902") as journal:
        assert journal.is_accepted(entry(1))
        assert not journal.is_accepted(entry(2))
        # Rebuilt with other content, the same file name is a new file.
        assert not journal.is_accepted(entry(1, digest="blake3:" + "f" * 64))
    with Journal(tmp_path, "other:19902") as journal:
        assert not journal.is_accepted(entry(1))


def test_a_line_of_an_earlier_version_still_counts_for_its_sha256_file(tmp_path: Path) -> None:
    (tmp_path / JOURNAL).write_bytes(
        b'{"event": "accepted", "target": "gsa:19902", "datasource": "docs", '
        b'"file": "docs-000001.xml", "sha256": "' + b"a" * 64 + b'"}\n'
    )
    with Journal(tmp_path, "gsa:19902") as journal:
        assert journal.is_accepted(entry(1, digest="sha256:" + "a" * 64))
        assert not journal.is_accepted(entry(1, digest="blake3:" + "a" * 64))


def test_a_line_torn_by_a_crash_is_ignored_and_later_lines_still_count(tmp_path: Path) -> None:
    with Journal(tmp_path, "gsa:19902") as journal:
        journal.record(entry(1))
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b'{"event": "accepted", "target": "gsa:19902", "datas')  # killed mid-write

    with Journal(tmp_path, "gsa:19902") as journal:
        assert journal.is_accepted(entry(1))
        journal.record(entry(2))
    with Journal(tmp_path, "gsa:19902") as journal:
        assert journal.is_accepted(entry(1)) and journal.is_accepted(entry(2))


def test_a_replay_forgets_earlier_acceptances_for_its_target_only(tmp_path: Path) -> None:
    with Journal(tmp_path, "gsa:19902") as journal:
        journal.record(entry(1))
    with Journal(tmp_path, "dr-site:19902") as journal:
        journal.record(entry(1))

    with Journal(tmp_path, "gsa:19902") as journal:
        journal.start_replay()
        assert not journal.is_accepted(entry(1))
        journal.record(entry(2))
    with Journal(tmp_path, "gsa:19902") as journal:
        assert not journal.is_accepted(entry(1)) and journal.is_accepted(entry(2))
    with Journal(tmp_path, "dr-site:19902") as journal:
        assert journal.is_accepted(entry(1))


def test_two_pushes_of_one_set_cannot_run_at_once(tmp_path: Path) -> None:
    with Journal(tmp_path, "gsa:19902"), pytest.raises(JournalError, match="another fastfeed"):
        Journal(tmp_path, "gsa:19902")
    Journal(tmp_path, "gsa:19902").close()  # released with the first


@pytest.mark.parametrize(
    "line",
    [
        b'{"event": "accepted", "target": "gsa:19902", "datasource": ["x"], "file": "f", '
        b'"sha256": "s"}',
        b'{"event": "accepted", "target": "gsa:19902", "file": "docs-000001.xml"}',
        b'{"event": "replay", "target": 7}',
        b'["accepted", "gsa:19902"]',
        b'{"event": "shipped", "target": "gsa:19902"}',
    ],
)
def test_a_well_formed_line_that_is_no_journal_line_is_ignored_with_a_warning(
    tmp_path: Path, line: bytes
) -> None:
    with Journal(tmp_path, "gsa:19902") as journal:
        journal.record(entry(1))
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(line + b"\n")

    with pytest.warns(JournalWarning, match=r"ignored a line that is not a journal line \(line 2"):
        journal = Journal(tmp_path, "gsa:19902")
    with journal:
        assert journal.is_accepted(entry(1))
        journal.record(entry(2))
    with pytest.warns(JournalWarning), Journal(tmp_path, "gsa:19902") as journal:
        assert journal.is_accepted(entry(2))
