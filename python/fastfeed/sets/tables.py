"""Parquet and Arrow IPC (Feather) files as build inputs, read a batch of rows at a time so
that memory stays flat whatever the file's size; the rows go to `RecordWriter.add_arrow`.
Reading them takes pyarrow, the `parquet` extra; `add_arrow` itself does not."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from fastfeed.errors import FastfeedError, InputError, RecordError
from fastfeed.sets.writer import RecordWriter

#: The inputs read as tables, by the end of their name; a directory is a tree of documents.
SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")

#: Rows of a Parquet file are read in batches of about this many bytes (uncompressed), and at
#: most MAX_ROWS rows: pyarrow's reading takes several times a batch's size in memory (0.7 GB
#: of Parquet built at 380 MB peak RSS with 16 MB batches, 300 MB with 4 MB).
BATCH_BYTES = 4 * 1024 * 1024
MAX_ROWS = 65_536


def is_table(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise FastfeedError(
            "reading Parquet and Arrow files needs pyarrow: pip install 'fastfeed[parquet]'"
        ) from None
    return pyarrow


def batches(name: str) -> Iterator[Any]:
    """The record batches of the Parquet or Arrow IPC file `name`. Whatever stops the reading
    (a truncated or corrupt file) raises `InputError` naming the file: a file read in part
    would make a feed of part of it."""
    pa = _pyarrow()
    if os.path.isdir(name):
        raise InputError(
            name,
            "is a directory (a dataset of several files?): give its files, as "
            f"'{os.path.join(name, '*' + os.path.splitext(name)[1])}'",
        )
    try:
        if name.lower().endswith(".parquet"):
            yield from _parquet(pa, name)
        else:
            yield from _ipc(pa, name)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(name, f"cannot be read whole: {exc}") from None


def _parquet(pa: Any, name: str) -> Iterator[Any]:
    # Checksums are verified where the writer put them. Pre-buffering would read every row
    # group's columns at once (1 GB peak RSS for 0.7 GB of Parquet); pyarrow's threads add
    # memory and take the cores from the encoding for no gain.
    parquet = pa.parquet.ParquetFile(name, page_checksum_verification=True, pre_buffer=False)
    meta = parquet.metadata
    row_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    size = max(1, min(MAX_ROWS, BATCH_BYTES * max(meta.num_rows, 1) // max(row_bytes, 1)))
    yield from parquet.iter_batches(batch_size=size, use_threads=False)


def _ipc(pa: Any, name: str) -> Iterator[Any]:
    # Read, not mapped: a mapped file that shrinks while it is read kills the process.
    with pa.OSFile(name) as source:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid:
            # Not the file format: the stream format, which has no footer.
            source.seek(0)
            yield from pa.ipc.open_stream(source)
            _check_stream_end(name, source)
            return
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


#: What ends an Arrow IPC stream: a continuation marker and a message of length 0.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _check_stream_end(name: str, source: Any) -> None:
    """The stream format has no footer: a producer stopped between two batches leaves a file
    that reads as a whole stream of fewer batches. Only its end-of-stream marker, last in the
    file, says that nothing is missing."""
    size = os.path.getsize(name)
    whole = source.tell() == size and size >= len(END_OF_STREAM)
    if whole:
        source.seek(size - len(END_OF_STREAM))
        whole = source.read(len(END_OF_STREAM)) == END_OF_STREAM
    if not whole:
        raise InputError(
            name,
            "cannot be read whole: the Arrow stream ends without its end-of-stream marker "
            "(cut short while it was written?)",
        )


def is_arrow(data: object) -> bool:
    """Whether `data` is Arrow data `add_arrow` takes (see `ArrowData`)."""
    return hasattr(data, "__arrow_c_stream__") or hasattr(data, "__arrow_c_array__")


#: Refuses row `row` of what was given to be added (its record as JSON Lines, the reason).
Refuse = Callable[[int, bytes, str], None]


def add_rows(writer: RecordWriter, rows: Any, refuse: Refuse) -> int:
    """Gives the rows of Arrow data to `writer.add_arrow` and returns how many there were. A
    refused row goes to `refuse(row, line, reason)`, `row` its place among `rows` and `line`
    its record as JSON Lines: `refuse` raises to stop, or returns, and the rows after it are
    given next (those before it are written; the writer's warnings about them count from
    `row + 1`). A pyarrow Table or RecordBatch is read as it is; a stream (a RecordBatchReader,
    a DuckDB result, a Polars DataFrame) a batch at a time, so that it is never held whole;
    other Arrow data is made a table first, in place, to be sliced there."""
    pa = _pyarrow()
    if not isinstance(rows, pa.Table | pa.RecordBatch) and hasattr(rows, "__arrow_c_stream__"):
        taken = 0

        def refuse_in_stream(row: int, line: bytes, reason: str) -> None:
            refuse(taken + row, line, reason)

        for batch in pa.RecordBatchReader.from_stream(rows):
            taken += add_rows(writer, batch, refuse_in_stream)
        return taken
    if not isinstance(rows, pa.Table | pa.RecordBatch):
        rows = pa.table(rows)
    count: int = rows.num_rows
    done = 0
    while True:
        try:
            writer.add_arrow(rows)
            return count
        except RecordError as exc:
            error = exc  # refused outside the handler: what `refuse` raises is no aftermath
        reason = f"{error.field}: {error.reason}" if error.field else error.reason
        refuse(done + error.index, row_json(rows, error.index), reason)
        done += error.index + 1
        rows = rows.slice(error.index + 1)


def row_json(batch: Any, index: int) -> bytes:
    """A refused row as a JSON Lines record, for `rejected.jsonl`: null fields left out,
    binary content as `content_base64`, a map's pairs as an object (unless a name repeats)."""
    return _json(batch.slice(index, 1).to_pylist()[0])


def rows_json(batch: Any) -> Iterator[bytes]:
    """Every row of a batch as `row_json` makes it: what a sync's snapshot reads of a table."""
    for row in batch.to_pylist():
        yield _json(row)


def _json(given: dict[str, Any]) -> bytes:
    row = {k: v for k, v in given.items() if v is not None}
    if isinstance(row.get("content"), bytes):
        row["content_base64"] = base64.b64encode(row.pop("content")).decode()
    pairs = row.get("metadata")
    if isinstance(pairs, list) and len({k for k, _ in pairs}) == len(pairs):
        row["metadata"] = dict(pairs)
    return orjson.dumps(row, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"
