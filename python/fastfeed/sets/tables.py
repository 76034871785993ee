"""Parquet and Arrow IPC (Feather) files as build inputs, read by the Rust core
(`_core.TableFile`, no pyarrow) a batch of rows at a time so that memory stays flat whatever
the file's size; the rows go to `SetWriter.add_arrow`."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from typing import Any

from fastfeed import _core
from fastfeed.errors import FastfeedError, FeedError, InputError, RecordError
from fastfeed.sets.writer import SetWriter

#: The inputs read as tables, by the end of their name (a directory too: see `dataset_files`).
SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")


def _named_table(name: str) -> bool:
    # A directory named with a slash (as the shell completes it) is named like one without.
    return name.rstrip("/" + os.sep).lower().endswith(SUFFIXES)


def is_table(name: str) -> bool:
    """Whether `name` is read as a table: named like one, or a file without an extension that
    starts as Parquet or Arrow IPC files do (a part file of Hive or Spark, `000000_0`); never
    standard input (`-`)."""
    if _named_table(name):
        return True
    if name == "-" or not _extensionless(name):
        return False
    try:
        return _part_format(name, whole=False) is not None
    except OSError:
        return False  # read as JSON Lines, whose opening says what is wrong with it


def _extensionless(path: str) -> bool:
    return not os.path.splitext(os.path.basename(path))[1]


#: The magic numbers of the tables read without an extension, by format.
MAGIC = {"Parquet": b"PAR1", "Arrow IPC": b"ARROW1"}


def _part_format(path: str, whole: bool = True) -> str | None:
    """The format (a key of `MAGIC`) of the regular file `path` by its magic number at its
    start, and at its end too when `whole` (as a file written to its end has it); None for
    anything else. Never opens what is not a regular file: a pipe would be read, or block.
    Raises OSError when it cannot be read."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    with open(path, "rb") as f:
        head = f.read(8)
        size = f.seek(0, os.SEEK_END)
        f.seek(max(size - 8, 0))
        tail = f.read(8)
    for kind, magic in MAGIC.items():
        # At least two magic numbers and a footer's length: an empty table file is no less.
        if head.startswith(magic) and (
            not whole or (size >= 2 * len(magic) + 4 and tail.endswith(magic))
        ):
            return kind
    return None


#: Files only a dataset's writer leaves in a directory.
DATASET_MARKS = ("_SUCCESS", "_metadata", "_common_metadata")
#: Bookkeeping that says the directory's files are not all rows of the dataset, and why.
NOT_ALL_ROWS = {
    "_temporary": "it is still being written, or its job failed (Spark and Hadoop move the "
    "files out of _temporary when done): build from it once written",
    "_delta_log": "it is a Delta Lake table, whose log says which of its files hold its rows "
    "now (the others are older versions): export the table as plain Parquet files",
    ".hoodie": "it is an Apache Hudi table, whose timeline says which of its files hold its rows "
    "now: export the table as plain Parquet files",
    "_spark_metadata": "it is the output of a Spark streaming query, whose log says which of its "
    "files are committed (the others, a failed batch's): export it as plain Parquet files",
}
#: The starts of the names of Databricks' transactional commit markers, which say which of the
#: directory's files are committed.
COMMIT_MARKS = ("_started_", "_committed_")


def _not_all_rows(name: str) -> str | None:
    """Why a directory holding `name` has files that are not all rows of its dataset, if so."""
    if name.startswith(COMMIT_MARKS):
        return (
            "it was written by Databricks' transactional commit, whose markers say which of its "
            "files are committed (the others, a failed job's): export it as plain Parquet files"
        )
    return NOT_ALL_ROWS.get(name)


def _in_writer_order(path: str) -> tuple[str | int, ...]:
    """Sorts part files as their writer numbered them: Dask's `part.10.parquet` after
    `part.2.parquet` (Spark pads its numbers; names compare as they are there)."""
    return tuple(int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", path))


def dataset_files(directory: str, documents: bool = True) -> list[str] | None:
    """The table files of a dataset written as a directory (by Spark, Dask, pyarrow's
    `write_dataset`: `docs.parquet/part-00000-....snappy.parquet`), in the order their writer
    numbered them; None when `directory` is not named like a table and nothing in it looks
    like a dataset (a tree of documents, where `documents` says a build may take one). Bookkeeping
    left beside the files (names starting with `_` or `.`: `_SUCCESS`, `_metadata`,
    `.part-0.crc`) is no data and left out; anything else is refused, naming it, rather than
    left out in silence: a stray file, a subdirectory (a partition, `year=2024/`, whose value
    is in the directory's name, not in its files' rows), a dataset with no file, and one whose
    files are not all its rows (`NOT_ALL_ROWS`)."""
    found: list[str] = []
    other: list[str] = []
    subdirectories: list[str] = []
    marked = False  # a pipeline's marks of a dataset: its `_SUCCESS`, Parquet's summaries
    with os.scandir(directory) as entries:
        for entry in entries:
            if why := _not_all_rows(entry.name):
                raise FastfeedError(f"{directory} holds {entry.name}: {why}")
            if entry.name.startswith(("_", ".")):
                marked = marked or entry.name in DATASET_MARKS
                continue
            if entry.is_dir():
                subdirectories.append(entry.path)
            else:
                (found if _named_table(entry.name) else other).append(entry.path)
    unnamed = sorted(filter(_extensionless, other))
    if found:
        _no_unnamed_parts(directory, unnamed, min(found))
    elif unnamed and (parts := _part_files(directory, unnamed, marked)):
        found, other = parts, [path for path in other if path not in parts]
    partitioned = any("=" in os.path.basename(path) for path in subdirectories)
    if not (found or partitioned or marked or _named_table(directory)):
        return None
    if subdirectories:
        raise FastfeedError(
            f"{min(subdirectories)} is a subdirectory of the dataset {directory}: a "
            "partitioned dataset keeps each partition's value (year=2024) in the name of its "
            "directory, not in its files' rows, and would lose it; write the dataset without "
            "partitioning, or with the value in a column and give its files as a glob "
            f"('{os.path.join(directory, '*', '*.parquet')}')"
        )
    if other:
        # One with an extension first: beside part files without one, it is the stray one.
        stray = min(other, key=lambda path: (_extensionless(path), path))
        tree = (
            "; or, if it is a tree of documents, give --base-url"
            if documents and not _named_table(directory)
            else ""
        )
        files = (
            f"as a glob ('{os.path.join(directory, '*.parquet')}')"
            if not found or not _extensionless(found[0])
            else "by name"
        )
        raise FastfeedError(
            f"{stray} is not a Parquet or Arrow file ({', '.join(SUFFIXES)}) but is in "
            f"the dataset directory {directory}: move it out, or give the dataset's files "
            f"{files}{tree}"
        )
    if not found:
        raise FastfeedError(
            f"{directory} is an empty dataset (no Parquet or Arrow file in it): an empty export "
            "is likelier than an empty source, so it is refused, never read as one"
        )
    return sorted(found, key=_in_writer_order)


def _format_in(directory: str, path: str, whole: bool = True) -> str | None:
    """`_part_format` of the file `path` of the dataset directory `directory`, refusing one
    that cannot be read with its cause: a dataset read without it would be part of itself."""
    try:
        return _part_format(path, whole)
    except OSError as exc:
        link = f"; it is a symbolic link to {os.readlink(path)}" if os.path.islink(path) else ""
        raise FastfeedError(
            f"{path} cannot be read ({exc.strerror}{link}) but is in the dataset directory "
            f"{directory}: make it readable, or move it out if it is no part of the dataset"
        ) from None


def _no_unnamed_parts(directory: str, unnamed: list[str], named: str) -> None:
    """Refuses a table file without an extension beside one with an extension (`named`): one
    writer names all its part files alike, so which of them are the dataset is not known."""
    for path in unnamed:
        if kind := _format_in(directory, path, whole=False):
            raise FastfeedError(
                f"{path} is a {kind} file without an extension, beside {named} with one, in "
                f"the dataset directory {directory}: one writer names all its part files "
                "alike, so which are the dataset's is not known; give the dataset's files by "
                "name or as a glob"
            )


def _part_files(directory: str, files: list[str], marked: bool) -> list[str]:
    """The part files among `files` (those of `directory` without an extension): whole Parquet
    files, or whole Arrow IPC files, by their magic numbers (as Hive and Spark write them,
    `000000_0`); none when none is a table and nothing marks a dataset (a tree of documents).
    Anything between is refused, naming a file: a feed of part of the dataset could not be
    told from one of all of it."""
    unreadable: list[str] = []

    def format_of(path: str) -> str | None:
        try:
            return _part_format(path)
        except OSError:
            unreadable.append(path)  # refused if a dataset; a tree of documents may hold it
            return None

    formats = {path: format_of(path) for path in files}
    parts = [path for path in files if formats[path]]
    if not parts and not (marked or _named_table(directory)):
        return []
    for path in unreadable:
        formats[path] = _format_in(directory, path)  # raises, naming why it cannot be read
    if stray := [path for path in files if not formats[path]]:
        where = f"in the dataset directory {directory}" + (
            f" beside part files such as {parts[0]}" if parts else ""
        )
        if kind := _format_in(directory, stray[0], whole=False):
            raise FastfeedError(
                f"{stray[0]} is a {kind} file its writer did not finish (no magic number at its "
                f"end), {where}: write the dataset again"
            )
        files_of = os.path.join(directory, "[!_]*")
        raise FastfeedError(
            f"{stray[0]} has no extension and is no Parquet or Arrow IPC file (their magic "
            f"numbers, {' or '.join(m.decode() for m in MAGIC.values())}, at its start), {where}: "
            + (
                "move it out if it is no part of the dataset"
                if parts
                else "a directory is read as a dataset of Parquet or Arrow files; if its files "
                "are JSON Lines (as Spark's saveAsTextFile writes them), give them by name or as "
                f"a glob ('{files_of}')"
            )
        )
    if len(kinds := sorted({formats[path] for path in parts}, key=str)) > 1:
        first = {kind: next(p for p in parts if formats[p] == kind) for kind in kinds}
        raise FastfeedError(
            f"the dataset directory {directory} holds part files of two formats without "
            f"extensions ({', '.join(f'{k}: {p}' for k, p in first.items())}): one writer "
            "writes one format; give the files of the dataset meant as a glob"
        )
    return parts


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise FastfeedError(
            "Arrow data from a pipeline (not a file fastfeed reads itself) needs pyarrow here: "
            "pip install pyarrow"
        ) from None
    return pyarrow


def batches(name: str, kind: str = "feed") -> Iterator[Any]:
    """The record batches of the Parquet or Arrow IPC file `name`, each read while the one
    before it is taken. Whatever stops the reading (a truncated or corrupt file, a column that
    is no field of what a writer of `kind` takes: a record, or a membership) raises
    `InputError` naming the file: a file read in part would make a feed of part of it."""
    # Read and decoded one batch ahead without the GIL (Parquet page checksums verified where
    # the writer put them); the messages say where the reading stopped.
    try:
        yield from _core.TableFile(name, kind)
    except FeedError as exc:
        raise InputError(name, str(exc)) from None
    except OSError as exc:
        raise InputError(name, f"cannot be read: {exc.strerror}") from None


def is_arrow(data: object) -> bool:
    """Whether `data` is Arrow data `add_arrow` takes (see `ArrowData`)."""
    return hasattr(data, "__arrow_c_stream__") or hasattr(data, "__arrow_c_array__")


#: Refuses row `row` of what was given to be added (its record as JSON Lines, the reason).
Refuse = Callable[[int, bytes, str], None]


def add_rows(writer: SetWriter, rows: Any, refuse: Refuse) -> int:
    """Gives the rows of Arrow data to `writer.add_arrow` and returns how many there were. A
    refused row goes to `refuse(row, line, reason)`, `row` its place among `rows` and `line`
    its record as JSON Lines: `refuse` raises to stop, or returns, and the rows after it are
    given next (those before it are written; the writer's warnings about them count from
    `row + 1`). A pyarrow Table or RecordBatch is read as it is; a stream (a RecordBatchReader,
    a DuckDB result, a Polars DataFrame) a batch at a time, so that it is never held whole;
    other Arrow data is made a table first, in place, to be sliced there."""
    if isinstance(rows, _core.ArrowBatch):  # read by the core: no pyarrow
        return _add_sliced(writer, rows, refuse)
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
    return _add_sliced(writer, rows, refuse)


def _add_sliced(writer: SetWriter, rows: Any, refuse: Refuse) -> int:
    """`add_rows` of a table or batch that slices in place (`num_rows`, `slice(offset)`)."""
    count: int = rows.num_rows
    done = 0
    while True:
        try:
            writer.add_arrow(rows)
            return count
        except RecordError as exc:
            error = exc  # refused outside the handler: what `refuse` raises is no aftermath
        reason = f"{error.field}: {error.reason}" if error.field else error.reason
        refuse(done + error.index, row_json(rows, error.index, writer.kind), reason)
        done += error.index + 1
        rows = rows.slice(error.index + 1)


def row_json(batch: Any, index: int, kind: str = "feed") -> bytes:
    """A row as a JSON Lines line (a record; with `kind` groups, a membership): a refused one,
    for `rejected.jsonl`; one a sync sends (see `_core.rows_json`)."""
    return _core.rows_json(batch.slice(index, 1), kind)


def rows_json(batch: Any) -> bytes:
    """Every row of a batch as `row_json` makes it: what a sync's snapshot reads of a table."""
    return _core.rows_json(batch)
