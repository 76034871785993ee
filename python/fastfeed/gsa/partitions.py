"""`PartitionedBuild`: a GSA feed set built in parts, one per partition of a distributed
collection, on the workers, then merged into one set; how the parts are kept apart and merged
is `fastfeed.sets.partitions`'s. `build_partitioned` drives it for `fastfeed.dask` and
`fastfeed.spark`; any scheduler that runs a function per partition can drive it itself."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Unpack

from fastfeed.errors import FastfeedError
from fastfeed.gsa.writer import FeedOptions, FeedType, FeedWriter
from fastfeed.sets import partitions
from fastfeed.sets.build import BuildSummary, OnError
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.partitions import Partition
from fastfeed.sets.records import Record
from fastfeed.sets.writer import ArrowData, FeedWarning, RecordWriter

#: A feed file's header (declaration, doctype, datasource, feed type) fits in this many bytes.
_HEAD = 64 * 1024
_BLOCK = 1 << 20


#: The options a partition's writer takes otherwise than a `FeedWriter`: it encodes on one
#: thread, the scheduler's workers being the parallelism.
PARTITION_DEFAULTS: FeedOptions = {"workers": 1}


class PartitionedOptions(FeedOptions, total=False):
    """`FeedOptions` and how a set built in partitions ends, taken by keyword by the builds
    on a scheduler (`fastfeed.dask.build`, `fastfeed.spark.build`); see `PartitionedBuild`."""

    allow_empty_full: Annotated[
        bool, "write a full set with no records (default False: refused with EmptyFullFeed)"
    ]
    on_error: Annotated[
        OnError,
        "'stop' (default): the first refused record fails the job; 'skip': refused records "
        "are saved to OUT/rejected.jsonl",
    ]
    on_warning: Annotated[
        Callable[[str], None] | None,
        "called with each warning of the partitions (default: printed on stderr)",
    ]


class PartitionedBuild:
    """A feed set built from the partitions of a collection, each written where it is (a
    worker), into `out_dir`, a directory the workers and this process share::

        with PartitionedBuild("/shared/feeds", "docs", "full") as job:   # on the driver
            parts = [job.write(records, i) for i, records in partitions]  # on the workers
            summary = job.merge(parts)                                    # on the driver

    `write` takes the records of partition `i` (from 0, in the collection's order) and returns
    a small `Partition` for `merge`; the object travels to the workers by pickle. A partition
    written twice (a retried task) is merged once, from the copy whose `Partition` `merge` is
    given. `merge` writes OUT/manifest.jsonl last; leaving the block without it (an error)
    removes every partition, so nothing half-built can be pushed.

    The settings are `FeedWriter`'s, with `workers` the encoding threads of each partition's
    writer, 1 unless given (the scheduler's workers are the parallelism). As in a single
    build, a `full` set's first file is full and the rest incremental, in partition order; a
    full set with no records is refused (`EmptyFullFeed`) unless `allow_empty_full`; with
    `on_error="skip"` refused records are gathered into OUT/rejected.jsonl, with `"stop"` the
    first one raises `InputError`.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        datasource: str,
        feedtype: FeedType = "incremental",
        *,
        allow_empty_full: bool = False,
        on_error: OnError = "stop",
        **options: Unpack[FeedOptions],
    ) -> None:
        # The workers may not share this process's working directory.
        self.out_dir = os.path.abspath(out_dir)
        self.datasource = datasource
        self.feedtype = feedtype
        self.allow_empty_full = allow_empty_full
        self.on_error = on_error
        self.options: FeedOptions = {**PARTITION_DEFAULTS, **options}
        #: The outermost directory `start` made for `out_dir`, to remove after a failed job.
        self._made: str | None = None

    def check(self) -> None:
        """Checks the settings (a writer opened and dropped elsewhere), `out_dir` untouched."""
        with tempfile.TemporaryDirectory() as directory:
            self._open(Path(directory), lambda _: None).abort()

    def start(self) -> None:
        """Checks the settings and readies `out_dir` (new or empty) on the driver, before any
        partition is sent to a worker."""
        self.check()
        self._made = partitions.start_partitions(self.out_dir)

    def write(self, records: Iterable[Record | ArrowData], index: int) -> Partition:
        """Writes the records of partition `index` into a directory of its own under `out_dir`
        and returns what `merge` needs of it. `records` are record dicts, or Arrow tables of
        them (pyarrow, Polars, DuckDB), in any mix."""
        return partitions.write_partition(
            records, self.out_dir, index, self.feedtype, self._open, retype, on_error=self.on_error
        )

    def merge(
        self,
        parts: Iterable[Partition],
        *,
        started: float | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> BuildSummary:
        """Merges the partitions (every index from 0, once) into one feed set in `out_dir`,
        which `fastfeed push OUT` pushes like any other, and returns what was written."""
        refuse = (
            f"a full feed with no records would remove every document of {self.datasource!r}; "
            "nothing was written. If that is what you want, build it with allow_empty_full=True"
        )
        return partitions.merge_partitions(
            self.out_dir,
            parts,
            self.feedtype,
            retype,
            refuse_empty=None if self.allow_empty_full else refuse,
            started=time.monotonic() if started is None else started,
            on_warning=on_warning,
        )

    def discard(self) -> None:
        """Removes what the partitions wrote and no merge took (after a failed job), and
        `out_dir` when `start` made it and nothing was merged into it: a failed job leaves
        `out_dir` as it found it."""
        partitions.discard_partitions(self.out_dir, self._made)

    def __enter__(self) -> PartitionedBuild:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()

    def _open(self, directory: Path, on_warning: Callable[[FeedWarning], None]) -> RecordWriter:
        # An empty partition is no empty feed: whether the whole set is empty is the merge's
        # to judge.
        return FeedWriter(
            directory,
            self.datasource,
            self.feedtype,
            allow_empty_full=True,
            on_warning=on_warning,
            **self.options,
        )


def build_partitioned(
    plan: Callable[[PartitionedBuild], Callable[[], Iterable[Partition]]],
    out_dir: str | os.PathLike[str],
    datasource: str,
    feedtype: FeedType = "incremental",
    *,
    allow_empty_full: bool = False,
    on_error: OnError = "stop",
    on_warning: Callable[[str], None] | None = None,
    **options: Unpack[FeedOptions],
) -> BuildSummary:
    """Builds a feed set in `out_dir` with a scheduler: `plan(job)` makes the scheduler's job
    (its graph), which calls `job.write` once per partition of the collection, and returns
    what runs it and returns the `Partition`s, in any order; then merges them and returns what
    was written, counters summed. A collection of no partitions (none returned) is an empty
    set, for the merge to judge.

    The settings are checked and the job made before `out_dir` is touched, and a failure
    after leaves `out_dir` as it was (absent if it was): a collection whose graph cannot be
    made, a failed task or a refused set never leaves an empty or half-ready directory."""
    job = PartitionedBuild(
        out_dir,
        datasource,
        feedtype,
        allow_empty_full=allow_empty_full,
        on_error=on_error,
        **options,
    )
    started = time.monotonic()
    job.check()
    run = plan(job)
    with job:
        parts = list(run()) or [job.write([], 0)]
        return job.merge(parts, started=started, on_warning=on_warning)


def retype(directory: Path, entry: ManifestEntry, feedtype: str) -> ManifestEntry:
    """Rewrites the feed file `entry` of `directory` with `feedtype` in its header (the
    records stay byte for byte); returns its new manifest entry. The writer leaves room for
    either header under the size cap."""
    path = directory / entry.file
    old = f"<feedtype>{entry.feedtype}</feedtype>".encode()
    new = f"<feedtype>{feedtype}</feedtype>".encode()
    tmp = path.with_name(f"{path.name}.retype")
    digest = entry.hasher()
    size = 0
    with path.open("rb") as source, tmp.open("wb") as target:
        head = source.read(_HEAD)
        end = head.find(b"</header>")
        if end < 0 or head.count(old, 0, end) != 1:
            tmp.unlink()
            raise FastfeedError(f"{path} is not a {entry.feedtype} feed file fastfeed wrote")
        block = head.replace(old, new, 1)
        while block:
            digest.update(block)
            target.write(block)
            size += len(block)
            block = source.read(_BLOCK)
        target.flush()
        os.fsync(target.fileno())
    os.replace(tmp, path)
    return dataclasses.replace(entry, feedtype=feedtype, bytes=size, digest=entry.digest_of(digest))
