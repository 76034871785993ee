"""A sync's snapshot: every record of its inputs, fingerprinted by the Rust core into the
state's snapshot table; then the lines of the records to send, read again where they are.

A sync reads its inputs twice (to compare, then to send what changed), so every input must be
a file it can read again: a regular file is read in place; standard input, a pipe and the
records made from a directory are first written to the work directory.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from fastfeed import _core
from fastfeed.errors import FastfeedError, InputError, RecordError
from fastfeed.progress import Progress, human_bytes
from fastfeed.sets.build import MappedInput, directory_batches, mappable
from fastfeed.sets.state import Changed, DuplicateUrl, SyncState


@dataclass
class _Source:
    #: As the user named it.
    name: str
    #: The file holding its JSON Lines.
    path: Path
    #: The records were made from a directory's files: a line is named by its file.
    directory: bool = False


class Snapshot:
    """The inputs of a sync, read into `state`'s snapshot table by `read`."""

    def __init__(self, inputs: Sequence[str], base_url: str | None, work: Path, skip: str) -> None:
        self._inputs = inputs
        self._base_url = base_url or ""
        self._work = work
        self._skip = skip
        self._sources: list[_Source] = []
        self._files: dict[int, int] = {}
        self.records = 0
        self.bytes = 0

    def read(self, state: SyncState, progress: Progress | None = None) -> None:
        """Fingerprints every record into the state's snapshot table, in input order."""
        state.start_snapshot()
        for name in self._inputs:
            source = self._source(name)
            self._sources.append(source)
            self._read(len(self._sources) - 1, source, state, progress)
        if progress is not None:
            progress.close()

    def _source(self, name: str) -> _Source:
        n = len(self._sources)
        if name == "-":
            return _Source("<stdin>", self._spool(sys.stdin.buffer, f"input-{n}.jsonl"))
        path = Path(name)
        if path.is_dir():
            return _Source(name, self._records_of(path, f"input-{n}.jsonl"), directory=True)
        try:
            with path.open("rb") as stream:
                if mappable(stream):
                    return _Source(name, path)
                return _Source(name, self._spool(stream, f"input-{n}.jsonl"))
        except OSError as exc:
            raise FastfeedError(f"cannot read {name}: {exc.strerror}") from None

    def _spool(self, stream: IO[bytes], file: str) -> Path:
        path = self._work / file
        with path.open("wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
        return path

    def _records_of(self, root: Path, file: str) -> Path:
        """The records of a directory's files, as `fastfeed build` makes them; a file that
        cannot be read stops the sync (left out, its document would be deleted)."""
        path = self._work / file
        with path.open("wb") as out:
            for batch in directory_batches(root, self._base_url, self._skip):
                for where, item in batch:
                    if isinstance(item, str):
                        raise InputError(where, item)
                    out.write(orjson.dumps(item) + b"\n")
        return path

    def _read(self, n: int, source: _Source, state: SyncState, progress: Progress | None) -> None:
        with source.path.open("rb") as stream:
            if os.fstat(stream.fileno()).st_size == 0:
                return
            mapped = MappedInput(stream)
            try:
                first_line, base = 1, 0
                for chunk in mapped.chunks():
                    try:
                        lines, starts, ends, urls, fps, count = _core.fingerprint_jsonl(chunk)
                    except RecordError as exc:
                        self._check(mapped, source)
                        reason = f"{exc.field}: {exc.reason}" if exc.field else exc.reason
                        raise InputError(self._where(n, first_line + exc.index), reason) from None
                    seq = self.records
                    rows = [
                        (url, fps[16 * i : 16 * i + 16], seq + i, n, base + starts[i],
                         base + ends[i], first_line + lines[i])
                        for i, url in enumerate(urls)
                    ]  # fmt: skip
                    try:
                        state.add_snapshot(rows)
                    except DuplicateUrl as dup:
                        line = rows[dup.seq - seq][6]
                        raise InputError(
                            self._where(n, line),
                            f"{dup.url} is also at {self._where(dup.source, dup.line)}: a "
                            "snapshot holds each URL once",
                        ) from None
                    self._check(mapped, source)
                    self.records += len(urls)
                    self.bytes += len(chunk)
                    first_line += count
                    base += len(chunk)
                    if progress is not None:
                        progress.update(
                            f"compared {self.records:,} records ({human_bytes(self.bytes)})"
                        )
            finally:
                mapped.close()

    @staticmethod
    def _check(mapped: MappedInput, source: _Source) -> None:
        if mapped.changed():
            raise InputError(
                source.name,
                "the file shrank while it was read (truncated or rewritten): sync again once "
                "it is complete",
            )

    def _where(self, n: int, line: int) -> str:
        """Names a line of a source as the user knows it: a file's line, or a directory's file."""
        source = self._sources[n]
        if not source.directory:
            return f"{source.name}:{line}"
        with source.path.open("rb") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return str(orjson.loads(text)["content_path"])
        return source.name

    def line(self, record: Changed) -> bytes:
        """The line of a record the comparison found, read again. Read, not mapped: a file
        that shrank since would kill a process reading its mapping past the new end."""
        fd = self._files.get(record.source)
        if fd is None:
            fd = os.open(self._sources[record.source].path, os.O_RDONLY)
            self._files[record.source] = fd
        size = record.end - record.start
        text = os.pread(fd, size, record.start)
        if len(text) != size:
            raise InputError(
                self._sources[record.source].name,
                "the file changed while the sync read it: sync again once it is complete",
            )
        return text

    def where(self, record: Changed) -> str:
        return self._where(record.source, record.line)

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
