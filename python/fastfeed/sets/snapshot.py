"""A sync's snapshot: every record of its inputs, fingerprinted by the Rust core into the
state's snapshot table; then the lines of the records to send, read again where they are.

A sync that sends only what changed reads its inputs twice (to compare, then to build what
changed), so every input must be a file it can read again: a regular file is read in place, a
Parquet or Arrow file too (its rows as JSON Lines, a batch at a time in memory, and again by
their row); standard input, a pipe and the records made from a directory are first written to
the work directory. A sync that sends every record (the first, `--resend-all`) reads them once:
the receiver's writer fingerprints each record as it builds it.
"""

from __future__ import annotations

import bisect
import functools
import os
import shutil
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import orjson

from fastfeed import _core
from fastfeed.errors import FastfeedError, InputError, RecordError
from fastfeed.progress import Progress, Stage, Unit, plural, stage
from fastfeed.sets import tables
from fastfeed.sets.inputs import MappedInput, directory_batches, mappable
from fastfeed.sets.state import Changed, Diff, DuplicateUrl, SyncState
from fastfeed.sets.writer import FeedWarning, SetWriter, print_warning

#: A chunk's records as the core fingerprinted them: snapshot rows, spans, URL keys, records,
#: lines (`_core.fingerprint_jsonl`).
Fingerprinted = tuple[str, bytes, bytes, int, int]

#: Why an input read twice is refused when it is no longer what was read first.
_CHANGED = (
    "the file changed while the sync read it (truncated or rewritten): sync again once it is "
    "complete"
)

#: A record's place in its input: source, start and end of its line, line number in its chunk
#: (the layout of `fingerprint::spans` in the core).
_SPAN = struct.Struct("=4q")


@dataclass
class _Source:
    #: As the user named it.
    name: str
    #: The file holding its JSON Lines.
    path: Path
    #: The records were made from a directory's files: a line is named by its file.
    directory: bool = False
    #: The records are a Parquet or Arrow file's rows: a line is named by its row (from 0), and
    #: read again by it (`_TableRows`); its span's bytes are of the rows' JSON, made in memory.
    table: bool = False
    #: A table's size, times and identity when its reading started: its rows are read twice,
    #: and the second reading must find the file the first one compared. The change time too:
    #: a rewrite of the same size can put the modification time back, never the change time.
    stamp: tuple[int, int, int, int, int] | None = None

    def changed(self) -> bool:
        """Whether the table is no longer the file whose reading started (rewritten, replaced)."""
        return _stamp(self.path) != self.stamp


def _stamp(path: Path) -> tuple[int, int, int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None  # reading it says why
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_dev, status.st_ino


class Snapshot:
    """The inputs of a sync, read into `state`'s snapshot table by `read`."""

    def __init__(
        self,
        inputs: Sequence[str],
        base_url: str | None,
        work: Path,
        skip: str,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        self._inputs = inputs
        self._on_warning = on_warning or print_warning
        self._base_url = base_url or ""
        self._work = work
        self._skip = skip
        self._sources: list[_Source] = []
        self._files: dict[int, int] = {}
        self._tables: dict[int, _TableRows] = {}
        # Where each record's line is, _SPAN a record, by its place in the snapshot: on disk,
        # not in memory, whatever the snapshot's size.
        self._spans = (work / "spans.bin").open("w+b")
        # A hash of each record's URL, to tell whether one is there twice (see `compare`).
        self._keys = (work / "keys.bin").open("wb")
        # The first record and first line of each chunk read: spans number lines in their chunk.
        self._chunks: list[int] = []
        self._chunk_lines: list[int] = []
        self._first_line = 1
        # The source being read.
        self._reading = 0
        self.records = 0
        self.bytes = 0

    def read(
        self,
        state: SyncState,
        progress: Progress | None = None,
        writer: SetWriter | None = None,
    ) -> None:
        """Fingerprints every record into the state's snapshot table, in input order. With a
        `writer` (its `fingerprint_records` on), the writer builds every record as well,
        fingerprinting each as it encodes it: one pass over the inputs."""
        # Every record is sent: its row is the pending set's (see `SyncState.start_snapshot`).
        state.start_snapshot(pending=writer is not None)
        for name in self._inputs:
            self._sources.append(self._source(name))
        # Input bytes, or records where a table's are not read in order (as a build counts).
        tabled = any(source.table for source in self._sources)
        total = None if tabled else sum(os.stat(source.path).st_size for source in self._sources)
        unit: Unit = "records" if tabled else "bytes"
        with stage(progress, "compare" if writer is None else "build", total, unit=unit) as line:
            for n, source in enumerate(self._sources):
                self._read(n, source, state, line, writer)

    def warn(self, warning: FeedWarning) -> None:
        """Reports a writer's warning about a record of the chunk being taken (`read`)."""
        where = self._where(self._reading, self._first_line + warning.index)
        self._on_warning(f"{where}: {warning}")

    def compare(self, state: SyncState, *, resend_all: bool = False) -> Diff:
        """The state's comparison, with a URL found twice named where the user gave it."""
        self._keys.close()
        repeats = _core.repeated_keys(self._keys.name)
        try:
            return state.compare(resend_all=resend_all, repeats=repeats)
        except DuplicateUrl as dup:
            raise InputError(
                self.where(dup.second),
                f"{dup.url} is also at {self.where(dup.first)}: a snapshot holds each URL once",
            ) from None

    def _source(self, name: str) -> _Source:
        n = len(self._sources)
        if name == "-":
            return _Source("<stdin>", self._spool(sys.stdin.buffer, f"input-{n}.jsonl"))
        path = Path(name)
        if tables.is_table(name):
            return _Source(name, path, table=True)
        if path.is_dir():
            return _Source(name, self._records_of(path, f"input-{n}.jsonl"), directory=True)
        try:
            with path.open("rb") as stream:
                if mappable(stream):
                    return _Source(name, path)
                return _Source(name, self._spool(stream, f"input-{n}.jsonl"))
        except OSError as exc:
            # Never an empty snapshot, whatever --allow-deletes says: read as one, it would
            # delete everything the input held (an unmounted share, a mistyped path).
            raise FastfeedError(
                f"cannot read {name}: {exc.strerror}; nothing was sent (a missing input is "
                "never taken for an empty source)"
            ) from None

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
                for where, reason in batch.refused:
                    raise InputError(where, reason)
                out.write(batch.lines)
        return path

    def _read(
        self, n: int, source: _Source, state: SyncState, line: Stage, writer: SetWriter | None
    ) -> None:
        """Fingerprints a source's chunks: a file's, mapped; a table's, its batches' rows."""
        if source.table:
            source.stamp = _stamp(source.path)
            rows = (tables.rows_json(batch) for batch in tables.batches(source.name))
            self._read_chunks(n, rows, source.changed, source, state, line, writer)
            return
        with source.path.open("rb") as stream:
            if os.fstat(stream.fileno()).st_size == 0:
                return
            mapped = MappedInput(stream, source.name)
            try:
                self._read_chunks(n, mapped.chunks(), mapped.changed, source, state, line, writer)
            finally:
                mapped.close()

    def _read_chunks(
        self,
        n: int,
        chunks: Iterable[bytes | memoryview],
        changed: Callable[[], bool],
        source: _Source,
        state: SyncState,
        line: Stage,
        writer: SetWriter | None,
    ) -> None:
        """Fingerprints chunks one ahead: the core hashes chunk N+1 on its threads (or the
        writer encodes it) while this thread stores chunk N's rows (SQLite too runs without
        the GIL). One after the other, storing left both cores idle for a third of a sync's
        time. `changed` says whether the source is no longer what was read."""
        pool = ThreadPoolExecutor(1, thread_name_prefix="fastfeed-fingerprint")
        try:
            self._first_line, self._reading = 1, n
            done = "compared" if writer is None else "built and compared"
            ahead: Callable[[], Fingerprinted] | None = None
            base = 0

            def show() -> None:
                at = self.records if line.unit == "records" else self.bytes + base
                line.update(at, f"{plural(self.records, 'record')} {done}")

            for chunk in chunks:
                started: Callable[[], Fingerprinted]
                if writer is None:
                    hashing = pool.submit(_core.fingerprint_jsonl, chunk, source=n, base=base)
                    started = hashing.result
                else:
                    writer.start_jsonl(chunk)
                    started = functools.partial(_built, writer, n, base)
                base += len(chunk)
                if ahead is not None:
                    self._store(ahead, n, changed, source, state)
                ahead = started
                show()
            if ahead is not None:
                self._store(ahead, n, changed, source, state)
            self.bytes += base
            show()
        except BaseException:
            if writer is not None:
                # The chunk started ahead may still be encoding: aborting waits for it, and
                # it reads the mapping, which must stay guarded until then.
                writer.abort()
            raise
        finally:
            pool.shutdown(cancel_futures=True)

    def _store(
        self,
        fingerprinted: Callable[[], Fingerprinted],
        n: int,
        changed: Callable[[], bool],
        source: _Source,
        state: SyncState,
    ) -> None:
        """Takes a chunk's records into the snapshot, and where their lines are."""
        try:
            rows, spans, keys, records, lines = fingerprinted()
        except RecordError as exc:
            self._check(changed, source)
            reason = f"{exc.field}: {exc.reason}" if exc.field else exc.reason
            raise InputError(self._where(n, self._first_line + exc.index), reason) from None
        self._check(changed, source)
        state.add_snapshot(rows)
        self._spans.write(spans)
        self._keys.write(keys)
        # Line numbers in spans count from the chunk's first line, known only now.
        self._chunks.append(self.records)
        self._chunk_lines.append(self._first_line)
        self.records += records
        self._first_line += lines

    @staticmethod
    def _check(changed: Callable[[], bool], source: _Source) -> None:
        if changed():
            raise InputError(source.name, _CHANGED)

    def _where(self, n: int, line: int) -> str:
        """Names a line of a source as the user knows it: a file's line, or a directory's file."""
        source = self._sources[n]
        if source.table:
            return f"{source.name}, row {line - 1}"
        if not source.directory:
            return f"{source.name}:{line}"
        with source.path.open("rb") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return str(orjson.loads(text)["content_path"])
        return source.name

    def _span(self, seq: int) -> tuple[int, int, int, int]:
        """Where record `seq` is: its source, the byte span of its line, and the line number."""
        self._spans.flush()
        source, start, end, line = cast(
            tuple[int, int, int, int],
            _SPAN.unpack(os.pread(self._spans.fileno(), _SPAN.size, seq * _SPAN.size)),
        )
        chunk = bisect.bisect_right(self._chunks, seq) - 1
        return source, start, end, self._chunk_lines[chunk] + line

    def line(self, record: Changed) -> bytes:
        """The line of a record the comparison found, read again. Read, not mapped: a file
        that shrank since would kill a process reading its mapping past the new end."""
        source, start, end, line = self._span(record.seq)
        if self._sources[source].table:
            rows = self._tables.setdefault(source, _TableRows(self._sources[source]))
            return rows.row(line - 1)
        fd = self._files.get(source)
        if fd is None:
            fd = os.open(self._sources[source].path, os.O_RDONLY)
            self._files[source] = fd
        text = os.pread(fd, end - start, start)
        if len(text) != end - start:
            raise InputError(self._sources[source].name, _CHANGED)
        return text

    def where(self, seq: int) -> str:
        """Names record `seq` as the user gave it."""
        source, _, _, line = self._span(seq)
        return self._where(source, line)

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        for rows in self._tables.values():
            rows.close()
        self._spans.close()
        self._keys.close()


def _built(writer: SetWriter, source: int, base: int) -> Fingerprinted:
    """Takes the oldest chunk the writer started, and the fingerprints of its records."""
    lines = writer.wait_jsonl()
    return (*writer.take_fingerprints(source=source, base=base), lines)


class _TableRows:
    """A table's rows read again by their row, in the snapshot's order, as the first reading
    made them: the batches are read again (a row before the batch held reads the file again
    from its start), and a batch holding a row asked is made JSON Lines whole, once, as the
    first reading made it. Row by row cost a batch's dictionaries once a row (190 us a row of
    a 32,000-row batch with a dictionary column)."""

    def __init__(self, source: _Source) -> None:
        self._source = source
        self._batches: Iterator[Any] | None = None
        # The lines of the batch holding the last row asked, and its first row.
        self._lines: list[bytes] = []
        self._first = 0

    def row(self, row: int) -> bytes:
        if self._batches is None or row < self._first:
            self._batches, self._lines, self._first = tables.batches(self._source.name), [], 0
        while row >= self._first + len(self._lines):
            self._first += len(self._lines)
            batch = next(self._batches, None)
            if batch is None:  # fewer rows than were compared
                raise InputError(self._source.name, _CHANGED)
            # JSON escapes a newline within a value: each one ends a row's line.
            self._lines = tables.rows_json(batch).split(b"\n")[:-1]
            # Checked once the rows are read (their values may be read from the file only now).
            if self._source.changed():
                raise InputError(self._source.name, _CHANGED)
        return self._lines[row - self._first]

    def close(self) -> None:
        self._batches, self._lines = None, []  # lets go of the file's mapping
