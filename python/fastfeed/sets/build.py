"""The build pipeline every set shares: inputs to a set of files on disk (`write_set`).

Inputs are JSON Lines files, standard input, directories of documents, or Parquet and Arrow
files (`tables`, read a batch of rows at a time into `add_arrow`). JSON Lines are read
here in newline-aligned chunks and parsed by the Rust core on its worker threads: parsing on
this thread, under the GIL, would bound the whole build to one core. Chunks and batches are
bounded in bytes, which keeps memory flat whatever the corpus size, and a refused record is
reported with its file and line.
"""

from __future__ import annotations

import collections
import errno
import functools
import glob
import itertools
import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, TextIO, TypeVar

from fastfeed.errors import FastfeedError, FeedError, InputError, RecordError, SettingsError
from fastfeed.progress import Progress, Stage, human_bytes, plural, stage
from fastfeed.sets import tables
from fastfeed.sets.inputs import AHEAD, MappedInput, directory_batches, mappable, stream_chunks
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.writer import FeedWarning, SetWriter, print_warning

OnError = Literal["stop", "skip"]
T = TypeVar("T")
Chunk = bytes | memoryview

REJECTED = "rejected.jsonl"
REJECTED_LOG = "rejected.log"

#: A line's end, found in a chunk as it is: a mapped chunk (a memoryview) has no `find`, and
#: a copy to search it took the chunk's size again (200 MB more for a refused line of 200 MB).
_NEWLINE = re.compile(b"\n")


@dataclass
class BuildSummary:
    out_dir: str
    manifest: list[ManifestEntry]
    records: int
    rejected: int
    warnings: int
    bytes: int
    seconds: float
    rejected_file: str | None = None


# Functions, not dataclasses: making a dataclass takes 0.3 ms of every build's start.
def _line_of(name: str, first: int, i: int) -> str:
    """Names line `i` of a chunk that starts at line `first` of file `name`."""
    return f"{name}:{first + i}"


def _row_of(name: str, first: int, i: int) -> str:
    """Names row `i` of a batch that starts at row `first` (from 0) of file `name`."""
    return f"{name}, row {first + i}"


def _nothing() -> None:
    pass


class _Builder:
    """Feeds inputs to a writer, keeping what a refused record needs: its place and its bytes."""

    def __init__(
        self, on_error: OnError, line: Stage, out: Path, stop: Callable[[], None] = _nothing
    ) -> None:
        self.on_error = on_error
        #: Raises when the build is to stop; called after each chunk and before the manifest.
        self.stop = stop
        self.line = line
        #: Input bytes taken, when the line counts them (see `input_bytes`).
        self.taken = 0
        self.rejected = Rejected(out)
        # The chunk being written: what names its lines, and how many were already done.
        self._locate: Callable[[int], str] = str
        self._done = 0
        # Raises if the input being taken is no longer what was read.
        self._changed: Callable[[], None] = _nothing

    def start(self, writer: SetWriter) -> None:
        self.writer = writer
        writer.skip_refused(self.on_error == "skip")

    def refuse(self, location: str, raw: Chunk, reason: str) -> None:
        if self.on_error == "stop":
            raise InputError(location, reason, skippable=True)
        self.rejected.add(location, raw, reason)

    def where(self, index: int) -> str:
        """Names the line at `index` of what the writer was last given."""
        return self._locate(self._done + index)

    def jsonl(
        self,
        chunks: Iterable[Chunk],
        name: str,
        changed: Callable[[], bool] = lambda: False,
        resize: Callable[[int, int], None] = lambda taken, encoded: None,
    ) -> None:
        """Takes the chunks of the input `name`; `changed` says whether the input is no longer
        what was read (checked after each chunk, and before a refused line is believed);
        `resize` is told each chunk's size and what it encoded to."""
        self._changed = functools.partial(self._check_unchanged, name, changed)
        try:
            first = 1
            for chunk, _ in self._ahead(((chunk, None) for chunk in chunks), AHEAD):
                encoded = self.writer.bytes
                first += self._take(chunk, functools.partial(_line_of, name, first))
                resize(len(chunk), self.writer.bytes - encoded)
                self._changed()
                self.taken += len(chunk)
                self.stop()
                self.show()
        finally:
            self._changed = _nothing

    @staticmethod
    def _check_unchanged(name: str, changed: Callable[[], bool]) -> None:
        if changed():
            raise InputError(
                name,
                "the file shrank while it was read (truncated or rewritten): nothing of this "
                "build can be trusted; build again once the file is complete",
            )

    def directory(self, root: Path, base_url: str, skip: str) -> None:
        # The files' records go as JSON Lines too: one way into the core, one way to refuse.
        batches = ((batch.lines, batch) for batch in directory_batches(root, base_url, skip))
        for chunk, batch in self._ahead(batches):
            for path, reason in batch.refused:
                self.refuse(path, json.dumps({"content_path": path}).encode() + b"\n", reason)
            self._take(chunk, batch.paths.__getitem__)
            self.stop()
            self.show()

    def table(self, name: str) -> None:
        """Takes the rows of a Parquet or Arrow file, a batch at a time, read one batch ahead
        (see `tables.batches`) while the last one is encoded."""
        writer = self.writer
        first = 0
        for batch in tables.batches(name, writer.kind):
            self._locate, self._done = functools.partial(_row_of, name, first), 0
            first += batch.num_rows
            try:
                tables.add_rows(writer, batch, self._refuse_row)
            except FeedError as exc:  # a column that is no field of the writer's rows
                raise InputError(name, str(exc)) from None
            # Let go of the batch before the next one is read: its values point into pages
            # (up to tens of MB) that would stay in memory meanwhile.
            del batch
            self.stop()
            self.show()

    def _refuse_row(self, row: int, raw: bytes, reason: str) -> None:
        """Refuses row `row` of the batch being taken; the rest of it follows."""
        self.refuse(self._locate(row), raw, reason)
        self._done = row + 1

    def _ahead(
        self, chunks: Iterator[tuple[Chunk, T]], ahead: int = 1
    ) -> Iterator[tuple[Chunk, T]]:
        """Starts each chunk on the writer's threads, then yields the one `ahead` before it to
        be taken: the threads encode the next chunk while Python takes the last and reads on.
        Started two ahead, a chunk is planned (its files opened and read ahead) while the two
        before it are encoded, and encoded once Python is done with the first of them (see
        `FeedWriter::start_jsonl` in the core)."""
        started: collections.deque[tuple[Chunk, T]] = collections.deque()
        for item in chunks:
            self.writer.start_jsonl(item[0])
            started.append(item)
            if len(started) > ahead:
                yield started.popleft()
        yield from started

    def _take(self, chunk: Chunk, locate: Callable[[int], str]) -> int:
        """Takes the oldest chunk started, whose line `i` is named by `locate(i)`; returns how
        many lines it held."""
        self._locate, self._done = locate, 0
        # A batch at a time, each written out before the next is made (see `take_refused`).
        set_aside = itertools.chain.from_iterable(iter(self.writer.take_refused, []))
        try:
            lines = self.writer.wait_jsonl()
        except RecordError as exc:
            # Stopping: its first bad line stops the build. (Skipping, the core sets bad lines
            # aside and writes the others, in one pass over the chunk; one it cannot hold stops
            # it.) Those set aside in the rounds of the chunk written before go first.
            self._refuse_lines(chunk, itertools.chain(set_aside, [exc]))
            raise
        except Exception:
            # Whatever stopped the chunk (a full disk), the lines its rounds written before set
            # aside are saved: they are refused, and nowhere else.
            self._refuse_lines(chunk, set_aside)
            raise
        self._refuse_lines(chunk, set_aside)
        return lines

    def _refuse_lines(self, chunk: Chunk, refused: Iterable[RecordError]) -> None:
        """Refuses the lines of `chunk` (just taken) at the indices of `refused`, in line order,
        each written out from the chunk as it is, never copied."""
        data = memoryview(chunk)
        start = line = 0  # where line `line` starts
        for at, exc in enumerate(refused):
            if at == 0:
                # A line read past the end of a file that shrank is no line of it.
                self._changed()
            for _ in range(exc.index - line):
                start = _end_of_line(data, start)
            if exc.index < line or start == len(data):
                # The core refuses lines of the chunk, each once, in order: any other index
                # would write another line as refused, or none.
                raise RuntimeError(
                    f"line {exc.index} of a chunk refused out of order or past its end"
                )
            end = _end_of_line(data, start)
            reason = f"{exc.field}: {exc.reason}" if exc.field else exc.reason
            self.refuse(self.where(exc.index), data[start:end], reason)
            start, line = end, exc.index + 1

    def show(self, built: list[ManifestEntry] | None = None) -> None:
        """Updates the line with the writer's counts, or those of the set `built` (the
        manifest: the sizes of its files, headers counted)."""
        if not self.line.live:
            return
        w = self.writer
        records, files, size = (
            (w.records, w.files, w.bytes)
            if built is None
            else (sum(e.records for e in built), len(built), sum(e.bytes for e in built))
        )
        self.line.update(
            self.taken if self.line.unit == "bytes" else records,
            f"{plural(records, 'record')} in {plural(files, 'file')} ({human_bytes(size)})"
            + (f", {self.rejected.count:,} rejected" if self.rejected.count else ""),
        )


def _end_of_line(data: memoryview, start: int) -> int:
    """Where the line of `data` starting at `start` ends, after its newline if it has one."""
    found = _NEWLINE.search(data, start)
    return len(data) if found is None else found.end()


def input_bytes(inputs: Sequence[str]) -> int | None:
    """The bytes of the inputs, when they are all regular files of JSON Lines: what a build's
    line counts; None for standard input, a pipe or a directory, whose size is not known
    beforehand, and for Parquet or Arrow files, whose bytes are not read in order."""
    total = 0
    for name in inputs:
        if tables.is_table(name):
            return None
        try:
            status = os.stat(name) if name != "-" else None
        except OSError:
            return None  # the build says what is wrong with it
        if status is None or not stat.S_ISREG(status.st_mode):
            return None
        total += status.st_size
    return total


def expand(
    inputs: Sequence[str],
    base_url: str | None,
    state: Path | None = None,
    documents: bool = True,
) -> list[str]:
    """The inputs with their globs (`data/*.parquet`, quoted from the shell) expanded, in name
    order, and each dataset directory (see `tables.dataset_files`) as its files: one named
    like a table, and without `base_url` any directory, which is a tree of documents only with
    one (where `documents` says the set takes documents: a groups feed's does not). A glob
    that matches nothing, or a directory that is neither, is an error, not an empty input; so
    is a sync's `state` inside a directory read, where it would be read as a
    document (changed at every sync) or a stray file, and go with a dataset written again."""
    names = []
    for name in inputs:
        if name == "-" or os.path.lexists(name) or not glob.has_magic(name):
            found = [name]
        else:
            found = sorted(glob.glob(name))
            if not found:
                raise FastfeedError(f"{name} matches no file")
        for path in found:
            inside = state and state.resolve().is_relative_to(Path(path).resolve())
            if inside and os.path.isdir(path):
                raise SettingsError(
                    f"the state {state} is inside the directory {path} being synced: keep it "
                    "outside"
                )
            if not os.path.isdir(path) or (base_url and not tables.is_table(path)):
                names.append(path)
                continue
            dataset = tables.dataset_files(path, documents)
            if dataset is None and not documents:
                raise FastfeedError(
                    f"{path} is a directory but no dataset of Parquet or Arrow files: give "
                    f"JSON Lines files by name or as a glob ('{os.path.join(path, '*.jsonl')}')"
                )
            if dataset is None:
                raise FastfeedError(
                    f"{path} is a directory: give --base-url to map its files to URLs "
                    "(e.g. --base-url http://docs.example.com/share/)"
                )
            names.extend(dataset)
    return names


def check_out_dir(out: Path) -> None:
    """A build goes into a new or empty directory, so that the files of two builds never mix."""
    if out.is_dir() and any(out.iterdir()):
        raise FastfeedError(
            f"{out} is not empty: build into a new or empty directory, so that the files of two "
            "builds never mix"
        )


def write_set(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    make_writer: Callable[[Callable[[FeedWarning], None]], SetWriter],
    base_url: str | None,
    on_error: OnError,
    on_warning: Callable[[str], None] | None,
    progress: Progress | None,
    documents: bool = True,
    stop: Callable[[], None] | None = None,
) -> BuildSummary:
    """Feeds `inputs` to the writer `make_writer` returns (given the warning handler it must
    use), and saves the refused records; the part of a build that does not depend on what the
    set holds (`documents`: whether it takes trees of documents, see `expand`). `stop` raises
    to stop the build without a manifest, as an error would: it is called after each chunk of
    input and before the manifest is written."""
    started = time.monotonic()
    out = Path(out_dir)
    warned = 0
    check_out_dir(out)
    inputs = expand(inputs, base_url, documents=documents)
    total = input_bytes(inputs)
    # Input bytes when their total is known, else records, which show how far it went.
    with stage(progress, "build", total, unit="records" if total is None else "bytes") as line:
        builder = _Builder(on_error, line, out, stop or _nothing)

        def warn(warning: FeedWarning) -> None:
            nonlocal warned
            warned += 1
            (on_warning or print_warning)(f"{builder.where(warning.index)}: {warning}")

        writer = make_writer(warn)
        builder.start(writer)
        try:
            _feed(builder, inputs, base_url, os.fspath(out))
        finally:
            # Kept whatever stopped the build: the refused records are the ones to fix.
            rejected_file = builder.rejected.close()
        builder.show(writer.manifest)
    return BuildSummary(
        out_dir=str(out),
        manifest=writer.manifest,
        records=sum(e.records for e in writer.manifest),
        rejected=builder.rejected.count,
        warnings=warned,
        bytes=sum(e.bytes for e in writer.manifest),
        seconds=time.monotonic() - started,
        rejected_file=rejected_file,
    )


def _feed(builder: _Builder, inputs: Sequence[str], base_url: str | None, out: str) -> None:
    """Gives every input to the builder's writer, then closes it (which writes the manifest),
    or aborts it if anything went wrong."""
    with builder.writer:
        for name in inputs:
            path = Path(name)
            if name == "-":
                builder.jsonl(stream_chunks(sys.stdin.buffer, "<stdin>", builder.stop), "<stdin>")
            elif tables.is_table(name):
                builder.table(name)
            elif path.is_dir():
                builder.directory(path, base_url or "", out)
            else:
                try:
                    stream = path.open("rb")
                except OSError as exc:
                    raise FastfeedError(f"cannot read {name}: {exc.strerror}") from None
                with stream:
                    if not mappable(stream):
                        builder.jsonl(stream_chunks(stream, name, builder.stop), name)
                        continue
                    mapped = MappedInput(stream, name)
                    try:
                        builder.jsonl(
                            mapped.chunks(), name, changed=mapped.changed, resize=mapped.resize
                        )
                    except BaseException:
                        # The chunk started ahead may still be encoding: aborting waits for it,
                        # and it reads the mapping, which must stay guarded until then.
                        builder.writer.abort()
                        raise
                    finally:
                        mapped.close()
        builder.stop()  # before the manifest: what ends the input may be what stops the build
        # On disk before the writer's close writes the manifest that counts them.
        builder.rejected.close()


class Rejected:
    """Refused records, written to `rejected.jsonl` (byte for byte) and `rejected.log` (where and
    why) as they are refused: a build that refuses millions of records stays flat in memory."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.count = 0
        self._files: tuple[BinaryIO, TextIO] | None = None

    def add(self, location: str, raw: bytes | memoryview, reason: str) -> None:
        if self._files is None:
            # Opened at the first refusal, into the directory the writer made.
            self._files = self._open()
        lines, log = self._files
        file: BinaryIO | TextIO = lines
        # No context manager a line: 1,000,000 refused lines took a second more.
        try:
            # Apart: `raw + b"\n"` would copy a line of 200 MB.
            lines.write(raw)
            if raw[-1:] != b"\n":
                lines.write(b"\n")
            file = log
            log.write(f"{location}: {reason}\n")
        except OSError as exc:
            raise _cannot_write(file.name, exc) from None
        self.count += 1

    def _open(self) -> tuple[BinaryIO, TextIO]:
        path = self.out / REJECTED
        try:
            lines = path.open("wb")
            path = self.out / REJECTED_LOG
            try:
                return lines, path.open("w", encoding="utf-8")
            except BaseException:
                lines.close()
                raise
        except OSError as exc:
            raise _cannot_write(path, exc) from None

    def close(self) -> str | None:
        """Closes the files, on disk for good: the manifest written after them counts these
        records, and a crash must not leave it naming refusals that are gone. Returns the path of
        `rejected.jsonl`, if any record was refused; closing again changes nothing. Both files
        are closed, even if the first fails; then the first failure is raised."""
        failed: FastfeedError | None = None
        if self._files is not None:
            files, self._files = self._files, None
            for file in files:
                try:
                    with file:
                        file.flush()
                        os.fsync(file.fileno())
                except OSError as exc:
                    failed = failed or _cannot_write(file.name, exc)
        if failed is not None:
            raise failed
        return str(self.out / REJECTED) if self.count else None


def _cannot_write(path: str | os.PathLike[str], exc: OSError) -> FastfeedError:
    """The error of a file of refused records that cannot be written: its path, and what to do
    when the disk is full or the file too large."""
    hint = _WRITE_HINTS.get(exc.errno or 0, "")
    return FastfeedError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}{hint}")


_WRITE_HINTS = {
    errno.ENOSPC: " (the disk is full: free some space, or build into a directory on another disk)",
    errno.EDQUOT: " (the disk quota is used up: free some space, or build elsewhere)",
    errno.EFBIG: (
        " (larger than its file system, or the file size limit `ulimit -f`, allows: build onto "
        "another file system, or raise the limit)"
    ),
}
