"""What a push did: a result per file and the summary, and the error that stops a push."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from fastfeed.progress import human_bytes, plural
from fastfeed.sets.manifest import ManifestEntry


class Outcome(enum.StrEnum):
    ACCEPTED = "accepted"  # the appliance answered Success to this run
    SKIPPED = "skipped"  # the journal says this target accepted it before
    FAILED = "failed"  # not accepted: see the message
    BLOCKED = "blocked"  # not sent, because an earlier file of its datasource failed


@dataclass(frozen=True)
class FeedFile:
    """A file to push: its set's directory and its manifest entry."""

    directory: Path
    entry: ManifestEntry
    #: Why its digest is not the entry's, when it is not (`check_file`).
    CHANGED: ClassVar[str] = "differs from the manifest's: it changed since it was built"

    @property
    def path(self) -> Path:
        return self.directory / self.entry.file


@dataclass(frozen=True)
class FileResult:
    feed: FeedFile
    outcome: Outcome
    attempts: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "file": str(self.feed.path),
            "kind": self.feed.entry.kind,
            "datasource": self.feed.entry.datasource,
            "feedtype": self.feed.entry.feedtype,
            "records": self.feed.entry.records,
            "bytes": self.feed.entry.bytes,
            "outcome": self.outcome.value,
            "attempts": self.attempts,
            "message": self.message,
        }


@dataclass
class PushSummary:
    target: str
    results: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    retries: int = 0
    backlog: int | None = None

    @property
    def files(self) -> list[FileResult]:
        """The results of feed files: the counts a summary shows. A receiver whose pushes
        also make requests of another kind (Thunderstone's index update) leaves them out."""
        return self.results

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.files if r.outcome is outcome)

    @property
    def ok(self) -> bool:
        """Every file is on the appliance, pushed now or before."""
        return all(r.outcome in (Outcome.ACCEPTED, Outcome.SKIPPED) for r in self.results)

    @property
    def bytes_sent(self) -> int:
        return sum(r.feed.entry.bytes for r in self.results if r.outcome is Outcome.ACCEPTED)

    @property
    def records_sent(self) -> int:
        return sum(r.feed.entry.records for r in self.results if r.outcome is Outcome.ACCEPTED)

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "target": self.target,
            "files": {o.value: self.count(o) for o in Outcome},
            "records": self.records_sent,
            "bytes": self.bytes_sent,
            "seconds": round(self.seconds, 3),
            "retries": self.retries,
            "backlog": self.backlog,
            "results": [r.to_dict() for r in self.results],
        }

    def describe(self) -> str:
        counts = ", ".join(f"{self.count(o)} {o.value}" for o in Outcome if self.count(o))
        rate = self.bytes_sent / self.seconds if self.seconds > 0 else 0.0
        return (
            f"{self.target}: {counts or 'no files'}; {plural(self.records_sent, 'record')}, "
            f"{human_bytes(self.bytes_sent)} in {self.seconds:.1f} s "
            f"({human_bytes(rate)}/s), {plural(self.retries, 'retry', 'retries')}"
        )
