"""The build pipeline every set shares: inputs to a set of files on disk (`write_set`).

Inputs are JSON Lines files, standard input, directories of documents, or Parquet and Arrow
files (`tables`, read a batch of rows at a time into `add_arrow`). JSON Lines are read
here in newline-aligned chunks and parsed by the Rust core on its worker threads: parsing on
this thread, under the GIL, would bound the whole build to one core. Chunks and batches are
bounded in bytes, which keeps memory flat whatever the corpus size, and a refused record is
reported with its file and line.
"""

from __future__ import annotations

import functools
import glob
import json
import mmap
import os
import queue
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Literal, TextIO, TypeVar, cast
from urllib.parse import quote

import orjson

from fastfeed import _core
from fastfeed.errors import FastfeedError, FeedError, InputError, RecordError
from fastfeed.progress import Progress, Stage, human_bytes, plural, stage
from fastfeed.sets import tables
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.writer import HARD_MAX_BYTES, FeedWarning, RecordWriter, SetWriter

OnError = Literal["stop", "skip"]
T = TypeVar("T")
Chunk = bytes | memoryview

#: JSON Lines go to the core in chunks of about this size; directory files in batches of at
#: most this many bytes or DIR_BATCH files.
CHUNK_BYTES = 4 * 1024 * 1024
#: A mapped input's chunks shrink down to this when their records encode to much more than
#: their lines (see `MappedInput.resize`), and start no bigger than FILES_CHUNK_BYTES where
#: their first FILES_PROBE bytes name files by content_path.
MIN_CHUNK_BYTES = 64 * 1024
FILES_CHUNK_BYTES = 256 * 1024
FILES_PROBE = 64 * 1024
DIR_BATCH = 1024

#: A line of a stream longer than this is refused: it is held in memory until its end, and no
#: record that long can fit under the hard ceiling on a feed file.
MAX_STREAMED_LINE = HARD_MAX_BYTES

REJECTED = "rejected.jsonl"
REJECTED_LOG = "rejected.log"


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


class MappedInput:
    """A regular file read through a memory mapping, in newline-aligned views of about
    CHUNK_BYTES (a longer line makes a longer chunk). Mapping spares copying every input byte
    out of the page cache, which `read` does: reading instead made builds 40% slower.

    A file that shrinks while it is read (truncated, rewritten in place) would make the kernel
    kill the process at the first read past its new end (SIGBUS). The mapping is guarded:
    such a read finds zeros, and `changed()` says the file is no longer what was read."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.size = os.fstat(stream.fileno()).st_size
        # Closed when the last view of it is gone: a view still held (an error's traceback)
        # would make an explicit close fail.
        self._mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        self._guard = _core.MappingGuard(self._mapped)
        self._chunk_bytes = CHUNK_BYTES

    def resize(self, taken: int, encoded: int) -> None:
        """Sizes the next chunks by what the last one, of `taken` bytes, encoded to: about
        CHUNK_BYTES of records. A chunk is held encoded until all of it is, and a few are in
        flight: lines that name files by content_path encode to many times their size, and
        4 MB of them held 100 MB. A chunk whose start names files starts small (`chunks`): a
        tree's text given inline, then its files by path, would otherwise make one 4 MB chunk
        of the latter before the ratio is known."""
        if taken:
            ratio = max(encoded / taken, 1.0)
            self._chunk_bytes = max(MIN_CHUNK_BYTES, int(CHUNK_BYTES / ratio))

    def changed(self) -> bool:
        return self._guard.truncated or os.fstat(self._stream.fileno()).st_size < self.size

    def close(self) -> None:
        """Unguards the mapping, once every chunk of it was taken."""
        self._guard.close()

    def chunks(self) -> Iterator[memoryview]:
        mapped, size = self._mapped, self.size
        start = last = released = 0
        while start < size:
            length = self._chunk_bytes
            if length > FILES_CHUNK_BYTES and (
                mapped.find(b'"content_path"', start, start + FILES_PROBE) >= 0
            ):
                length = FILES_CHUNK_BYTES
            end = min(start + length, size)
            if end < size:
                cut = mapped.rfind(b"\n", start, end)
                if cut < 0:
                    cut = mapped.find(b"\n", end)
                end = size if cut < 0 else cut + 1
            # The chunks before the last one are written (the builder starts one chunk ahead,
            # so the last may still be encoding): unmap their pages, or they would count in
            # this process's memory up to the file's size (they stay in the page cache, and
            # come back if read again).
            upto = last - last % mmap.PAGESIZE
            if upto > released:
                mapped.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto
            yield memoryview(mapped)[start:end]
            last, start = start, end


def stream_chunks(stream: IO[bytes], name: str) -> Iterator[bytes]:
    """Newline-aligned chunks of about CHUNK_BYTES read from a stream that cannot be mapped
    (standard input, a pipe, a device); a longer line makes a longer chunk, up to
    MAX_STREAMED_LINE."""
    pending: list[bytes] = []  # the start of a line whose end has not been read yet
    held = lines = 0
    while block := stream.read(CHUNK_BYTES):
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            pending.append(block)
            held += len(block)
            if held > MAX_STREAMED_LINE:
                raise InputError(
                    f"{name}:{lines + 1}",
                    f"the line is longer than {MAX_STREAMED_LINE // 1_000_000} MB (no record that "
                    "long fits in a feed file); give large content by content_path",
                )
            continue
        chunk = b"".join((*pending, block[:cut])) if pending else block[:cut]
        pending = [block[cut:]] if cut < len(block) else []
        held = len(block) - cut
        lines += chunk.count(b"\n")
        yield chunk
    if pending:
        yield b"".join(pending)


def mappable(stream: IO[bytes]) -> bool:
    """Whether the input is a regular file with bytes in it. Anything else (a pipe, a FIFO,
    /dev/stdin, a device, a /proc file that says it is empty) is read as a stream: its size
    says nothing of what it holds, and reading it as empty would build an empty feed, which as
    a full feed removes every document of its datasource."""
    status = os.fstat(stream.fileno())
    return stat.S_ISREG(status.st_mode) and status.st_size > 0


#: A directory's file, as a record, or as why it cannot be one.
DirItem = tuple[str, "dict[str, object] | str"]


def directory_batches(root: Path, base_url: str, skip: str) -> Iterator[list[DirItem]]:
    """The files under `root` as records, in batches; `skip` is a directory not to enter (the
    output, when it lies inside the input). What cannot be read is an item with its reason,
    never left out in silence: a full feed missing a subtree removes it from the index."""
    # Plain strings, not pathlib: on a directory of 50,000 files, pathlib's parsing was most of
    # the walk's time, and the walk holds the GIL.
    base = base_url if base_url.endswith("/") else base_url + "/"
    top = os.fspath(root)
    batch: list[DirItem] = []
    size = 0
    skipped = _identity(skip)

    def unreadable(exc: OSError) -> None:
        batch.append((str(exc.filename), f"cannot read the directory: {exc.strerror}"))

    for dirpath, dirnames, filenames in os.walk(top, onerror=unreadable):
        if skipped is not None:
            dirnames[:] = [d for d in dirnames if _identity(os.path.join(dirpath, d)) != skipped]
        dirnames.sort()
        inside = os.path.relpath(dirpath, top)
        inside = "" if inside == os.curdir else inside
        url_dir = base + (quote(inside.replace(os.sep, "/"), safe="/") + "/" if inside else "")
        # Under the current directory, paths read as pathlib wrote them: "a/b", not "./a/b".
        here = inside if top == os.curdir else dirpath
        for filename in sorted(filenames):
            path = os.path.join(here, filename)
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                # The record schema is UTF-8 text: such a name has no URL nor record to go in.
                shown = os.fsencode(path).decode("utf-8", "backslashreplace")
                batch.append((shown, "the file name is not valid UTF-8: rename the file"))
                continue
            try:
                status = os.stat(path)
            except OSError as exc:
                batch.append((path, f"cannot read the file: {exc.strerror}"))
                continue
            if not stat.S_ISREG(status.st_mode):
                # A FIFO would block the build forever, a device never end.
                batch.append((path, "not a regular file (a FIFO, socket or device)"))
                continue
            record = {
                "url": url_dir + quote(filename, safe="/"),
                "content_path": path,
                "last_modified": int(status.st_mtime),
            }
            batch.append((path, record))
            size += status.st_size
            if len(batch) >= DIR_BATCH or size >= CHUNK_BYTES:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _identity(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


@dataclass(frozen=True)
class _Failed:
    """What stopped an iterator running ahead, to raise where it is consumed."""

    error: BaseException


_DONE = object()


def _ahead(items: Iterator[T]) -> Iterator[T]:
    """Runs `items` on a thread of its own, one item ahead: walking a directory (stat calls,
    names, URLs) then overlaps the encoding of the files already found, which runs without
    the GIL, instead of leaving the encoding threads idle."""
    handoff: queue.Queue[object] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # raised again in the consuming thread
            put(_Failed(exc))

    thread = threading.Thread(target=produce, name="fastfeed-walk", daemon=True)
    thread.start()
    try:
        while (item := handoff.get()) is not _DONE:
            if isinstance(item, _Failed):
                raise item.error
            yield cast(T, item)
    finally:
        stop.set()
        thread.join()


@dataclass(frozen=True)
class _LineOf:
    """Names line `i` of a chunk that starts at line `first` of file `name`."""

    name: str
    first: int

    def __call__(self, i: int) -> str:
        return f"{self.name}:{self.first + i}"


@dataclass(frozen=True)
class _RowOf(_LineOf):
    """Names row `i` of a batch that starts at row `first` (from 0) of file `name`."""

    def __call__(self, i: int) -> str:
        return f"{self.name}, row {self.first + i}"


def _nothing() -> None:
    pass


class _Builder:
    """Feeds inputs to a writer, keeping what a refused record needs: its place and its bytes."""

    def __init__(self, on_error: OnError, line: Stage, out: Path) -> None:
        self.on_error = on_error
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

    def refuse(self, location: str, raw: bytes, reason: str) -> None:
        if self.on_error == "stop":
            raise InputError(location, reason)
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
            for chunk, _ in self._one_ahead((chunk, None) for chunk in chunks):
                encoded = self.writer.bytes
                first += self._take(chunk, _LineOf(name, first))
                resize(len(chunk), self.writer.bytes - encoded)
                self._changed()
                self.taken += len(chunk)
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
        def chunks() -> Iterator[tuple[bytes, list[DirItem]]]:
            for batch in _ahead(directory_batches(root, base_url, skip)):
                records = b"".join(
                    orjson.dumps(item) + b"\n" for _, item in batch if not isinstance(item, str)
                )
                yield records, batch

        for chunk, batch in self._one_ahead(chunks()):
            for path, item in batch:
                if isinstance(item, str):
                    self.refuse(path, json.dumps({"content_path": path}).encode() + b"\n", item)
            paths = [path for path, item in batch if not isinstance(item, str)]
            self._take(chunk, paths.__getitem__)
            self.show()

    def table(self, name: str) -> None:
        """Takes the rows of a Parquet or Arrow file, a batch at a time, read one batch ahead on
        a thread of its own while the last one is encoded."""
        writer = self.writer
        if not isinstance(writer, RecordWriter):
            raise InputError(name, "Parquet and Arrow files hold document records: give JSON Lines")
        first = 0
        for batch in _ahead(tables.batches(name)):
            self._locate, self._done = _RowOf(name, first), 0
            first += batch.num_rows
            try:
                tables.add_rows(writer, batch, self._refuse_row)
            except FeedError as exc:  # a column that is no record field
                raise InputError(name, str(exc)) from None
            self.show()

    def _refuse_row(self, row: int, raw: bytes, reason: str) -> None:
        """Refuses row `row` of the batch being taken; the rest of it follows."""
        self.refuse(self._locate(row), raw, reason)
        self._done = row + 1

    def _one_ahead(self, chunks: Iterator[tuple[Chunk, T]]) -> Iterator[tuple[Chunk, T]]:
        """Starts each chunk on the writer's threads, then yields the one before it to be
        taken: the threads encode the next chunk while Python takes the last and reads on."""
        previous = None
        for item in chunks:
            self.writer.start_jsonl(item[0])
            if previous is not None:
                yield previous
            previous = item
        if previous is not None:
            yield previous

    def _take(self, chunk: Chunk, locate: Callable[[int], str]) -> int:
        """Takes the oldest chunk started, whose line `i` is named by `locate(i)`; returns how
        many lines it held."""
        self._locate, self._done = locate, 0
        take = self.writer.wait_jsonl
        while True:
            try:
                return self._done + take()
            except RecordError as exc:
                # A line read past the end of a file that shrank is no line of it.
                self._changed()
                # Nothing of the chunk was written, and the lines before the bad one are good:
                # write them, set the bad line aside, and go on after it, ahead of the chunk
                # already started. (A copy, to search it: refusals are rare.)
                chunk = bytes(chunk)
                start = 0
                for _ in range(exc.index):
                    start = chunk.index(b"\n", start) + 1
                end = chunk.find(b"\n", start)
                end = len(chunk) if end < 0 else end + 1
                reason = f"{exc.field}: {exc.reason}" if exc.field else exc.reason
                self.refuse(self.where(exc.index), chunk[start:end], reason)
                if start:
                    self.writer.add_jsonl(chunk[:start])
                chunk = chunk[end:]
                self._done += exc.index + 1
                if not chunk:
                    return self._done
                take = functools.partial(self.writer.add_jsonl, chunk)

    def show(self, built: list[ManifestEntry] | None = None) -> None:
        """Updates the line with the writer's counts, or those of the set `built` (the
        manifest: a closed writer counts no more)."""
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


def expand(inputs: Sequence[str]) -> list[str]:
    """The inputs with their globs (`data/*.parquet`, quoted from the shell) expanded, in name
    order; a glob that matches nothing is an error, not an empty input."""
    names = []
    for name in inputs:
        if name == "-" or os.path.lexists(name) or not glob.has_magic(name):
            names.append(name)
            continue
        found = sorted(glob.glob(name))
        if not found:
            raise FastfeedError(f"{name} matches no file")
        names.extend(found)
    return names


def check_directories(inputs: Sequence[str], base_url: str | None) -> None:
    for name in expand(inputs):
        if name != "-" and Path(name).is_dir() and not base_url and not tables.is_table(name):
            raise FastfeedError(
                f"{name} is a directory: give --base-url to map its files to URLs "
                "(e.g. --base-url http://docs.example.com/share/)"
            )


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
) -> BuildSummary:
    """Feeds `inputs` to the writer `make_writer` returns (given the warning handler it must
    use), and saves the refused records; the part of a build that does not depend on what the
    set holds."""
    started = time.monotonic()
    out = Path(out_dir)
    warned = 0
    check_out_dir(out)
    inputs = expand(inputs)
    total = input_bytes(inputs)
    # Input bytes when their total is known, else records, which show how far it went.
    with stage(progress, "build", total, unit="records" if total is None else "bytes") as line:
        builder = _Builder(on_error, line, out)

        def warn(warning: FeedWarning) -> None:
            nonlocal warned
            warned += 1
            message = f"{builder.where(warning.index)}: {warning}"
            if on_warning is None:
                print(f"warning: {message}", file=sys.stderr)
            else:
                on_warning(message)

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
                builder.jsonl(stream_chunks(sys.stdin.buffer, "<stdin>"), "<stdin>")
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
                        builder.jsonl(stream_chunks(stream, name), name)
                        continue
                    mapped = MappedInput(stream)
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


class Rejected:
    """Refused records, written to `rejected.jsonl` (byte for byte) and `rejected.log` (where and
    why) as they are refused: a build that refuses millions of records stays flat in memory."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.count = 0
        self._files: tuple[BinaryIO, TextIO] | None = None

    def add(self, location: str, raw: bytes, reason: str) -> None:
        if self._files is None:
            # Opened at the first refusal, into the directory the writer made.
            self._files = (
                (self.out / REJECTED).open("wb"),
                (self.out / REJECTED_LOG).open("w", encoding="utf-8"),
            )
        lines, log = self._files
        lines.write(raw if raw.endswith(b"\n") else raw + b"\n")
        log.write(f"{location}: {reason}\n")
        self.count += 1

    def close(self) -> str | None:
        """Closes the files; returns the path of `rejected.jsonl`, if any record was refused."""
        if self._files is None:
            return None
        for file in self._files:
            file.close()
        self._files = None
        return str(self.out / REJECTED)
