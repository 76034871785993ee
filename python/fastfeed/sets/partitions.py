"""Sets built in parts, one per partition of a distributed collection (Dask, Spark), on the
workers, then merged into one set that is pushed like any other.

Each attempt at a partition writes into a directory of its own under OUT/.fastfeed-partitions
and publishes it by renaming it when its files and manifest are complete: an attempt killed
half-way leaves only an unpublished directory, and a partition written twice (a worker lost
after writing it, so the scheduler ran it again) leaves two complete copies, of which the merge
takes the one the scheduler reported and deletes the others, so every record is pushed once.
The merge renames the partitions' files, in partition order, into OUT under the names a
single build would give them and writes OUT/manifest.jsonl last: until then OUT is not a
finished set, so nothing half-built can be pushed.

A `full` set's first file is full and the rest incremental, as in a single build. Every
partition is written as `full`, so that its records are checked by a full feed's rules; then
the first file of each partition but the first is made incremental (`Retype`). The first file
of the set is the first of the first partition that holds records: when earlier partitions
are empty (a filter emptied them), it is made full again at the merge.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from fastfeed.errors import EmptyFullFeed, FastfeedError, InputError, RecordError
from fastfeed.sets import tables
from fastfeed.sets.build import (
    REJECTED,
    REJECTED_LOG,
    BuildSummary,
    OnError,
    Rejected,
    check_out_dir,
)
from fastfeed.sets.manifest import MANIFEST, ManifestEntry, read_manifest
from fastfeed.sets.records import Record
from fastfeed.sets.writer import ArrowData, FeedWarning, RecordWriter

#: Where the partitions are written, inside the output directory (the same file system, so
#: that the merge renames rather than copies).
STAGING = ".fastfeed-partitions"
#: Records given to the writer at a time: enough to keep its threads busy, few enough to keep
#: a partition's memory small.
BATCH = 2000

#: Opens a partition's writer in a directory, reporting warnings to the function given.
OpenWriter = Callable[[Path, Callable[[FeedWarning], None]], RecordWriter]
#: Rewrites file `entry` of the set in a directory to the feed type given; returns its new
#: manifest entry.
Retype = Callable[[Path, ManifestEntry, str], ManifestEntry]


@dataclass(frozen=True)
class Partition:
    """What one partition's writing left, as the merge needs it: where (a directory under
    OUT/.fastfeed-partitions), its files, and what it refused or warned of."""

    index: int
    directory: str
    manifest: list[ManifestEntry]
    rejected: int = 0
    warnings: list[str] = field(default_factory=list)


def write_partition(
    records: Iterable[Record | ArrowData],
    out_dir: str | os.PathLike[str],
    index: int,
    feedtype: str,
    open_writer: OpenWriter,
    retype: Retype,
    *,
    on_error: OnError = "stop",
) -> Partition:
    """Writes partition `index` of a set into its own directory under `out_dir`, publishes it
    and returns what it holds. `records` are record dicts, or Arrow data (tables of records,
    read in place by `add_arrow`), in any mix."""
    staging = Path(out_dir) / STAGING
    name = f"{index:06d}-{uuid.uuid4().hex}"
    work = staging / f"{name}.tmp"
    try:
        # Never `parents`: an attempt still running when its job failed and was cleaned up
        # must not bring the staging directory back.
        work.mkdir()
    except FileNotFoundError:
        raise FastfeedError(
            f"{staging} does not exist: the build of {out_dir} was not started "
            "(PartitionedBuild.start, or its with block) or has ended"
        ) from None
    warned: list[str] = []
    rejected = Rejected(work)
    # Where, among the partition's records, the batch being written starts, and what the
    # writer was last given (after a refused record): to name a record.
    start = done = 0

    def warn(warning: FeedWarning) -> None:
        warned.append(f"partition {index}, record {done + warning.index}: {warning}")

    def refuse(record: int, raw: bytes, reason: str) -> None:
        """Refuses record `record` of the batch being written; the rest of it follows."""
        nonlocal done
        location = f"partition {index}, record {start + record}"
        if on_error == "stop":
            raise InputError(location, reason, skippable=True)
        rejected.add(location, raw, reason)
        done = start + record + 1

    try:
        writer = open_writer(work, warn)
        with writer:
            for batch in _batches(records):
                if isinstance(batch, list):
                    _add(writer, batch, refuse)
                    start += len(batch)
                else:
                    start += tables.add_rows(writer, batch, refuse)
                done = start
        entries = writer.manifest
        if feedtype == "full" and index > 0 and entries[0].records:
            entries = [retype(work, entries[0], "incremental"), *entries[1:]]
            _write_manifest(work, entries)
        rejected.close()
        os.rename(work, staging / name)
    except BaseException:
        rejected.close()
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Partition(index, name, entries, rejected.count, warned)


def _batches(records: Iterable[Record | ArrowData]) -> Iterator[list[Record] | ArrowData]:
    """Record dicts in lists of BATCH, and Arrow rows as they come."""
    batch: list[Record] = []
    for item in records:
        if isinstance(item, dict) or not tables.is_arrow(item):
            batch.append(item)  # type: ignore[arg-type]
            if len(batch) == BATCH:
                yield batch
                batch = []
            continue
        if batch:
            yield batch
            batch = []
        yield item
    if batch:
        yield batch


def _add(writer: RecordWriter, batch: list[Record], refuse: tables.Refuse) -> None:
    """Gives a batch of records to the writer; a refused record goes to `refuse`, as
    `tables.add_rows` does, and the rest of the batch follows."""
    done = 0
    while batch:
        try:
            writer.add_batch(batch)
            return
        except RecordError as exc:
            error = exc  # refused outside the handler: what `refuse` raises is no aftermath
        reason = f"{error.field}: {error.reason}" if error.field else error.reason
        writer.add_batch(batch[: error.index])
        refuse(done + error.index, _raw(batch[error.index]), reason)
        batch = batch[error.index + 1 :]
        done += error.index + 1


def _raw(record: object) -> bytes:
    """A refused record as a line of JSON Lines, to be fixed and fed again."""
    return orjson.dumps(record, default=str, option=orjson.OPT_SERIALIZE_NUMPY)


def _write_manifest(directory: Path, entries: Sequence[ManifestEntry]) -> None:
    """Writes `directory`'s manifest whole or not at all: it is what makes a set pushable."""
    tmp = directory / f"{MANIFEST}.tmp"
    with tmp.open("wb") as f:
        f.writelines(orjson.dumps(e.to_dict()) + b"\n" for e in entries)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, directory / MANIFEST)


def merge_partitions(
    out_dir: str | os.PathLike[str],
    partitions: Iterable[Partition],
    feedtype: str,
    retype: Retype,
    *,
    started: float,
    refuse_empty: str | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> BuildSummary:
    """Merges the partitions written into `out_dir` (every index from 0, each once) into one
    set there, and removes what is left of the partitions. A `full` set with no records raises
    `EmptyFullFeed` with `refuse_empty` when it is given, and nothing is merged."""
    out = Path(out_dir)
    staging = out / STAGING
    parts = sorted(partitions, key=lambda p: p.index)
    indexes = [p.index for p in parts]
    if indexes != list(range(len(parts))):
        raise FastfeedError(
            f"partitions {indexes} are not every partition once (0 to {len(parts) - 1}): merge "
            "what `write` returned for each partition of the collection, once each"
        )
    # The manifest on disk, not the one reported: it is the one that matches the files.
    found = [(p, read_manifest(staging / p.directory)) for p in parts]
    files = [(p, e) for p, entries in found for e in entries if e.records]
    if not files and feedtype == "full":
        if refuse_empty is not None:
            discard_partitions(out)
            raise EmptyFullFeed(refuse_empty)
        # The one empty full file of partition 0: pushing it empties the datasource, as asked.
        files = [(found[0][0], found[0][1][0])]
    if files and feedtype == "full" and files[0][1].feedtype != "full":
        first, entry = files[0]
        files[0] = (first, retype(staging / first.directory, entry, "full"))
    warnings = [w for p in parts for w in p.warnings]
    # Told before anything moves into OUT: a callback that raises leaves nothing to take back.
    for warning in warnings:
        if on_warning is None:
            print(f"warning: {warning}", file=sys.stderr)
        else:
            on_warning(warning)
    manifest = []
    # What the merge puts into OUT, removed if it fails (the partitions go with the job): OUT
    # as it was, not files without a manifest that a rerun would refuse as not empty.
    moved = [out / REJECTED, out / REJECTED_LOG, out / f"{MANIFEST}.tmp"]
    try:
        for seq, (part, entry) in enumerate(files, 1):
            name = _numbered(entry.file, seq)
            moved.append(out / name)
            os.rename(staging / part.directory / entry.file, out / name)
            manifest.append(ManifestEntry(**{**entry.to_dict(), "file": name}))  # type: ignore[arg-type]
        rejected_file = _merge_rejected(out, [staging / p.directory for p in parts])
        _write_manifest(out, manifest)
    except BaseException:
        for path in moved:
            path.unlink(missing_ok=True)
        raise
    discard_partitions(out)
    return BuildSummary(
        out_dir=str(out),
        manifest=manifest,
        records=sum(e.records for e in manifest),
        rejected=sum(p.rejected for p in parts),
        warnings=len(warnings),
        bytes=sum(e.bytes for e in manifest),
        seconds=time.monotonic() - started,
        rejected_file=rejected_file,
    )


def _numbered(file: str, seq: int) -> str:
    """The name of a partition's file as file `seq` of the merged set: the number a single
    build would give it (`docs-000003.xml`)."""
    renamed, found = re.subn(r"-\d{6,}\.xml$", f"-{seq:06}.xml", file)
    if not found:
        raise FastfeedError(f"{file} is not the name of a file fastfeed wrote")
    return renamed


def _merge_rejected(out: Path, directories: list[Path]) -> str | None:
    """Gathers the partitions' refused records, in partition order, into OUT/rejected.jsonl
    (the reasons into rejected.log); returns its path, or None when none was refused."""
    parts = [d for d in directories if (d / REJECTED).exists()]
    if not parts:
        return None
    for name in (REJECTED, REJECTED_LOG):
        with (out / name).open("wb") as merged:
            for directory in parts:
                with (directory / name).open("rb") as part:
                    shutil.copyfileobj(part, merged)
    return str(out / REJECTED)


def start_partitions(out_dir: str | os.PathLike[str]) -> str | None:
    """Readies `out_dir`, which must be new or empty, for partitions to be written into;
    returns the outermost directory it made for it (`out_dir` or a parent), None if none."""
    out = Path(out_dir).absolute()
    check_out_dir(out)
    made = next((d for d in reversed([out, *out.parents]) if not d.exists()), None)
    (out / STAGING).mkdir(parents=True)
    return None if made is None else str(made)


def discard_partitions(
    out_dir: str | os.PathLike[str], made: str | os.PathLike[str] | None = None
) -> None:
    """Removes what partitions wrote into `out_dir` and were not merged (a failed job), and
    the directories `start_partitions` made (`made` and those under it, down to `out_dir`)
    while they are empty.

    Attempts of a failed job may still be running. The staging directory is first renamed
    away: what they create by its name then fails (and `write_partition` never creates it),
    so that removing it is not a race with them, and nothing of the job comes back."""
    out = Path(out_dir).absolute()
    staging = out / STAGING
    trash = staging.with_name(f"{STAGING}-discarded-{uuid.uuid4().hex}")
    try:
        os.rename(staging, trash)
    except FileNotFoundError:
        pass
    else:
        shutil.rmtree(trash)
    if made is None:
        return
    for directory in [out, *out.parents]:
        try:
            directory.rmdir()
        except OSError:
            return  # something else is in it: a merged set, or what another put there
        if directory == Path(made):
            return
