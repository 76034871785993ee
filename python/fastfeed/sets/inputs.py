"""Reading a build's inputs: JSON Lines files through a guarded memory mapping, streams in
newline-aligned chunks, directories of documents as batches of records. The build pipeline
(`build`) and a sync's snapshot (`snapshot`) read through here.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import select
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fastfeed import _core
from fastfeed.errors import InputError
from fastfeed.sets.writer import HARD_MAX_BYTES

#: JSON Lines go to the core in chunks of about this size.
CHUNK_BYTES = 4 * 1024 * 1024
#: A mapped input's chunks shrink down to this when their records encode to much more than
#: their lines (see `MappedInput.resize`), and start no bigger than FILES_CHUNK_BYTES where
#: their first FILES_PROBE bytes name files by content_path.
MIN_CHUNK_BYTES = 64 * 1024
FILES_CHUNK_BYTES = 256 * 1024
FILES_PROBE = 64 * 1024
#: How many chunks of a mapped input the builder starts before it takes the first (see
#: `Builder._ahead`).
AHEAD = 2

#: A directory's files go to the core in batches of at most DIR_BATCH files or DIR_BATCH_BYTES
#: of them: each batch is a chunk, whose end the encoding threads may wait at (the next one's
#: opens), so fewer are better; twice CHUNK_BYTES, since a file's record is mostly smaller than
#: the file (deflated). 1,024 files or 4 MB left both encoding threads idle twice as long.
DIR_BATCH = 4096
DIR_BATCH_BYTES = 2 * CHUNK_BYTES

#: A line of a stream longer than this is refused: it is held in memory until its end, and no
#: record that long can fit under the hard ceiling on a feed file.
MAX_STREAMED_LINE = HARD_MAX_BYTES
#: How long a read of a stream waits for input before it checks whether the build is to stop:
#: what a Ctrl-C of `fastfeed run` may wait on its builder.
STOP_WAIT_MS = 100


class MappedInput:
    """A regular file read through a memory mapping, in newline-aligned views of about
    CHUNK_BYTES (a longer line makes a longer chunk). Mapping spares copying every input byte
    out of the page cache, which `read` does: reading instead made builds 40% slower.

    A file that shrinks while it is read (truncated, rewritten in place) would make the kernel
    kill the process at the first read past its new end (SIGBUS). The mapping is guarded:
    such a read finds zeros, and `changed()` says the file is no longer what was read. One
    cut short in the middle of a record (`name` in errors) is refused before any chunk is
    taken (see `cut_short`)."""

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self._stream = stream
        self._name = name
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
        if mapped[size - 1] != ord("\n"):
            last = mapped.rfind(b"\n", 0, size) + 1
            with memoryview(mapped)[last:] as line:
                if _core.cut_short(line):
                    where = f"{self._name}:{_newlines(mapped, last) + 1}"
                    raise InputError(where, cut_short(size))
        start = released = 0
        # The starts of the chunks yielded and perhaps still encoding (see below).
        recent: collections.deque[int] = collections.deque(maxlen=AHEAD)
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
            # The chunks before the last AHEAD ones are written (the builder starts chunks
            # ahead, so those may still be encoding): unmap their pages, or they would count
            # in this process's memory up to the file's size (they stay in the page cache, and
            # come back if read again).
            last = recent[0] if len(recent) == AHEAD else 0
            upto = last - last % mmap.PAGESIZE
            if upto > released:
                mapped.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto
            yield memoryview(mapped)[start:end]
            recent.append(start)
            start = end


def stream_chunks(
    stream: IO[bytes], name: str, stop: Callable[[], None] = lambda: None
) -> Iterator[bytes | memoryview]:
    """Newline-aligned chunks of about CHUNK_BYTES read from a stream that cannot be mapped
    (standard input, a pipe, a device); a longer line makes a longer chunk, up to
    MAX_STREAMED_LINE. A line longer than a block is gathered in an unnamed temporary file,
    then mapped: gathered in memory, then joined, it was held twice (400 MB for a line of 200).

    The stream is read at its descriptor, from where it stands (nothing may have been read
    through its buffer), and `stop`, which raises to stop the build, is called at least every
    STOP_WAIT_MS while the input is awaited (see `_read`). A read of the input's end is
    its end: at a terminal, one Ctrl-D on an empty line ends it."""
    fd = stream.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    block = bytearray(CHUNK_BYTES)
    view = memoryview(block)
    filled = 0  # bytes of `block` read: the start of a line not ended yet, then what follows
    spool: IO[bytes] | None = None  # or the start of that line in this file, once longer
    held = lines = taken = 0  # held: the bytes of the line in `spool`; taken: all chunks'
    ended = False
    while not ended:
        while filled < len(block):
            read = _read(fd, poller, view[filled:], stop)
            if not read:
                ended = True
                break
            filled += read
        where = f"{name}:{lines + 1}"  # the line that ends in this block, or past it
        # At the input's end, its last line ends too, newline or not.
        cut = filled if ended else block.rfind(b"\n", 0, filled) + 1
        if cut == 0 and not ended:
            spool = _spooled(spool, [view[:filled]], where)
            held += filled
            filled = 0
            if held > MAX_STREAMED_LINE:
                spool.close()
                raise InputError(
                    where,
                    f"the line is longer than {MAX_STREAMED_LINE // 1_000_000} MB (no record that "
                    "long fits in a feed file); give large content by content_path",
                )
            continue
        lines += block.count(b"\n", 0, cut)
        if spool is not None:
            spool = _spooled(spool, [view[:cut]], where)
            chunk: bytes | memoryview = _mapped(spool, where)
            spool, held = None, 0
        else:
            # Bytes, not a view of the block: the core reads them in place while the next
            # block is read (a view of a bytearray it would copy, with the GIL held).
            chunk = bytes(view[:cut])
        taken += len(chunk)
        if ended and chunk and chunk[-1] != ord("\n"):
            # The last line: after the block's last newline, or all of the chunk (its start
            # perhaps in the temporary file).
            newline = block.rfind(b"\n", 0, cut)
            last = 0 if newline < 0 else len(chunk) - (cut - newline - 1)
            if _core.cut_short(memoryview(chunk)[last:]):
                raise InputError(f"{name}:{lines + 1}", cut_short(taken))
        block[: filled - cut] = block[cut:filled]
        filled -= cut
        if chunk:
            yield chunk


def cut_short(size: int) -> str:
    """Why an input of `size` bytes whose last line, without a newline, is no whole JSON (see
    `_core.cut_short`) is refused: it may have been cut short, and what followed the cut is
    lost. An input error, never a record to skip: a feed short of the records after the cut,
    pushed as a full feed, deletes them."""
    return (
        f"the input ends in a line that is no whole record, at byte {size} with no newline: was "
        "it cut short (a copy or download that stopped, a full disk)? Give the whole input (a "
        "last line that is whole JSON needs no newline)"
    )


def _newlines(mapped: mmap.mmap, end: int) -> int:
    """The newlines in the first `end` bytes of `mapped`, counted a chunk at a time."""
    return sum(
        mapped[at : min(at + CHUNK_BYTES, end)].count(b"\n") for at in range(0, end, CHUNK_BYTES)
    )


def _read(fd: int, poller: select.poll, into: memoryview, stop: Callable[[], None]) -> int:
    """Reads what is there of the input `fd` into `into`, once some is: 0 at its end. Until
    then `stop` is called every STOP_WAIT_MS: a read that blocked until input came kept a
    builder thread waiting at a terminal, or on a pipe whose writer outlived the Ctrl-C that
    stopped its run, and the process with it. A descriptor that cannot be waited on (a
    regular file, a device) is always ready."""
    while True:
        stop()
        if poller.poll(STOP_WAIT_MS):
            try:
                return os.readv(fd, [into])
            except BlockingIOError:  # a descriptor left non-blocking, read by another too
                continue


def _spooled(spool: IO[bytes] | None, parts: Iterable[bytes | memoryview], where: str) -> IO[bytes]:
    """`spool`, or a new unnamed temporary file, with `parts` of the line at `where` written."""
    try:
        if spool is None:
            spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed once mapped, or too long
        spool.writelines(parts)
    except OSError as exc:
        if spool is not None:
            with contextlib.suppress(OSError):  # what it buffers cannot be written either
                spool.close()
        raise _unspooled(where, exc) from exc
    return spool


def _mapped(spool: IO[bytes], where: str) -> memoryview:
    """The bytes written to `spool`, mapped for reading; the file is closed, and gone once the
    mapping is."""
    try:
        with spool:
            spool.flush()
            return memoryview(mmap.mmap(spool.fileno(), 0, access=mmap.ACCESS_READ))
    except OSError as exc:
        raise _unspooled(where, exc) from exc


def _unspooled(where: str, exc: OSError) -> OSError:
    """The line at `where`, too long to read in one block, could not wait in a temporary file.
    An OSError, not a refused record: the disk failed, not the line, so `--on-error skip` must
    not pass over it."""
    return OSError(
        exc.errno,
        f"{where}: cannot hold the line in a temporary file in {tempfile.gettempdir()} "
        f"({exc.strerror}); set TMPDIR to a directory on a file system with room for it",
    )


def mappable(stream: IO[bytes]) -> bool:
    """Whether the input is a regular file with bytes in it. Anything else (a pipe, a FIFO,
    /dev/stdin, a device, a /proc file that says it is empty) is read as a stream: its size
    says nothing of what it holds, and reading it as empty would build an empty feed, which as
    a full feed removes every document of its datasource."""
    status = os.fstat(stream.fileno())
    return stat.S_ISREG(status.st_mode) and status.st_size > 0


@dataclass(frozen=True)
class DirBatch:
    """Files of a directory as records: `lines` (JSON Lines, one record a file), `paths` (each
    line's file), and the items that are no record, each with why (`refused`)."""

    lines: bytes
    paths: list[str]
    refused: list[tuple[str, str]]


#: Why a directory's item is no record, by the core's name for it (`_core.DirectoryWalk`).
_REFUSALS = {
    "directory": "cannot read the directory: {}",
    "file": "cannot read the file: {}",
    "name": "the file name is not valid UTF-8: rename the file",
    # A FIFO would block the build forever, a device never end.
    "not_regular": "not a regular file (a FIFO, socket or device)",
}


def directory_batches(root: Path, base_url: str, skip: str) -> Iterator[DirBatch]:
    """The files under `root` as records, in batches of at most DIR_BATCH files or
    DIR_BATCH_BYTES of them; `skip` is a directory not to enter (the output, when it lies
    inside the input). What cannot be read is refused with its reason, never left out in
    silence: a full feed missing a subtree removes it from the index. The core walks the tree
    on a thread of its own (`readdir` and `stat` without the GIL), a few batches ahead: in
    Python, on one thread under the GIL, the walk of a tree of small files took as long as
    encoding them on one core."""
    walk = _core.DirectoryWalk(
        os.fspath(root), base_url, _identity(skip), DIR_BATCH, DIR_BATCH_BYTES
    )
    for lines, paths, refused in walk:
        yield DirBatch(
            lines,
            paths,
            [(path, _REFUSALS[why].format(os.strerror(errno))) for path, why, errno in refused],
        )


def _identity(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino
