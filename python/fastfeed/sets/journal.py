"""The push journal: which files of a feed set an appliance has accepted.

`DIR/push-journal.jsonl` sits beside the manifest. Each accepted file appends one line, written
with a single `write` on an `O_APPEND` descriptor and fsynced before the push moves on, so a
crash (even kill -9) loses at most the line of the file being acknowledged at that moment: that
file is pushed once more by the next run, which is harmless, whereas skipping it would lose it.
A torn last line is ignored when reading for the same reason, and so is a line that parses but
is not a journal line (edited by hand, written by something else), with a warning naming it.

Lines are keyed by target (`host:port`), datasource, file name and digest (`sha256` in the lines
of earlier versions, which name SHA-256 digests): the same feed set pushed to another appliance,
or rebuilt with different content, is new to the journal.
`fastfeed replay` appends a generation marker for its target; acceptances before the last marker
no longer count, which is what makes a replay push everything again.
"""

from __future__ import annotations

import fcntl
import os
import time
import warnings
from pathlib import Path

import orjson

from fastfeed.errors import JournalError
from fastfeed.sets.manifest import ManifestEntry

JOURNAL = "push-journal.jsonl"

Key = tuple[str, str, str]


class JournalWarning(UserWarning):
    """Lines of a journal were ignored: their files, if any, are pushed again."""


_FIELDS = {"accepted": ("target", "datasource", "file", "digest"), "replay": ("target",)}


def _journal_line(item: object) -> dict[str, str] | None:
    """The line's fields if it is a journal line (an event with its fields, all strings)."""
    if not isinstance(item, dict) or item.get("event") not in _FIELDS:
        return None
    if isinstance(item.get("sha256"), str) and "digest" not in item:
        item["digest"] = f"sha256:{item['sha256']}"  # a line of an earlier version
    fields = _FIELDS[item["event"]]
    if not all(isinstance(item.get(name), str) for name in fields):
        return None
    return item


def _key(entry: ManifestEntry) -> Key:
    return (entry.datasource, entry.file, entry.digest)


class Journal:
    """One feed set's journal for one target, held exclusively while a push uses it.

    The lock keeps two pushes of the same set from sending every file twice; it is released
    by the kernel when the process dies, so a killed push never blocks the next one.
    """

    def __init__(self, directory: str | os.PathLike[str], target: str) -> None:
        self.path = Path(directory) / JOURNAL
        self.target = target
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise JournalError(
                f"cannot open the push journal {self.path}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise JournalError(
                f"another fastfeed push is using {self.path.parent}; wait for it to finish"
            ) from None
        self._accepted = self._load()

    def _load(self) -> set[Key]:
        accepted: set[Key] = set()
        ignored = []
        for number, line in enumerate(
            os.pread(self._fd, os.fstat(self._fd).st_size, 0).split(b"\n"), 1
        ):
            try:
                item = _journal_line(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # a line torn by a crash (or the empty end): its file is pushed again
            if item is None:
                ignored.append(number)
            elif item["target"] != self.target:
                continue
            elif item["event"] == "replay":
                accepted.clear()
            else:
                accepted.add((item["datasource"], item["file"], item["digest"]))
        if ignored:
            shown = ", ".join(map(str, ignored[:10])) + (", ..." if len(ignored) > 10 else "")
            what = (
                "a line that is not a journal line"
                if len(ignored) == 1
                else f"{len(ignored):,} lines that are not journal lines"
            )
            warnings.warn(
                JournalWarning(
                    f"{self.path}: ignored {what} (line {shown}); any file named there is "
                    "pushed again"
                ),
                stacklevel=3,
            )
        return accepted

    def is_accepted(self, entry: ManifestEntry) -> bool:
        return _key(entry) in self._accepted

    def record(self, entry: ManifestEntry) -> None:
        """Remembers durably that the target accepted `entry`; returns once it is on disk."""
        self._append(
            {
                "event": "accepted",
                "target": self.target,
                "datasource": entry.datasource,
                "file": entry.file,
                "digest": entry.digest,
            }
        )
        self._accepted.add(_key(entry))

    def start_replay(self) -> None:
        """Forgets, durably, what the target accepted before: everything will be sent again."""
        self._append({"event": "replay", "target": self.target})
        self._accepted.clear()

    def _append(self, item: dict[str, object]) -> None:
        item["at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        line = orjson.dumps(item) + b"\n"
        try:
            # A line may follow a torn one: start it on its own line so both parse apart.
            os.write(self._fd, line if self._ends_with_newline() else b"\n" + line)
            os.fsync(self._fd)
        except OSError as exc:
            raise JournalError(f"cannot write the push journal {self.path}: {exc}") from None

    def _ends_with_newline(self) -> bool:
        size = os.fstat(self._fd).st_size
        return size == 0 or os.pread(self._fd, 1, size - 1) == b"\n"

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
