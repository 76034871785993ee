"""Feed sets built on Dask: `build(collection, out_dir, datasource, feedtype)` writes one part
of the set per partition of a Dask DataFrame or bag of records, on the workers, then merges
the parts into one set that `fastfeed push OUT` pushes like any other.

`out_dir` must be a directory the workers and this process share (a local disk for a
`LocalCluster`, a network file system for a cluster of machines). Needs the `dask` extra:
`pip install 'fastfeed[dask]'`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Unpack

from fastfeed.errors import FastfeedError
from fastfeed.gsa.partitions import (
    PARTITION_DEFAULTS,
    PartitionedBuild,
    PartitionedOptions,
    build_partitioned,
)
from fastfeed.gsa.writer import FeedType
from fastfeed.sets.build import BuildSummary
from fastfeed.sets.partitions import BATCH, Partition
from fastfeed.sets.records import Record
from fastfeed.sets.writer import show_options

__all__ = ["build"]


@show_options(PartitionedOptions, build_partitioned, PARTITION_DEFAULTS)
def build(
    collection: Any,
    out_dir: str | os.PathLike[str],
    datasource: str,
    feedtype: FeedType = "incremental",
    **options: Unpack[PartitionedOptions],
) -> BuildSummary:
    """Builds a feed set from a Dask DataFrame (a row per record, a column per field of the
    record schema; a missing value is an absent field) or a Dask bag of record dicts, one part
    per partition on the Dask workers (the active `distributed.Client`, else Dask's default
    scheduler), into `out_dir`, and returns what was written, counters summed.

    As `fastfeed.build`: a `full` set's first file is full and the rest incremental, in
    partition order. A failed job leaves no manifest, so nothing half-built can be pushed, and
    `out_dir` as it was (absent if it was: the graph is made before `out_dir` is touched); a
    partition Dask runs again (a worker lost) is pushed once. Dask's workers are the
    parallelism: each partition's writer encodes on one thread unless `workers` is given.
    """
    dask, bag = _import_dask()
    tasks: Callable[[Any, PartitionedBuild, str], Any]
    if isinstance(collection, bag.Bag):
        tasks = _bag_tasks
    elif _is_dataframe(collection):
        tasks = _frame_tasks
    else:
        raise FastfeedError(
            f"fastfeed.dask.build takes a Dask DataFrame or bag of records, not "
            f"{type(collection).__name__}"
        )

    def plan(job: PartitionedBuild) -> Callable[[], list[Partition]]:
        # Each partition is written in the task that makes it (fused with it), where it is:
        # its records are never sent to another worker nor kept waiting in a worker's memory.
        # Named, to be told apart on the dashboard; unique, so that no earlier result is reused.
        token = f"fastfeed-partition-{uuid.uuid4().hex}"
        graph = tasks(collection, job, token)

        def run() -> list[Partition]:
            (parts,) = dask.compute(graph)
            return list(parts)

        return run

    return build_partitioned(plan, out_dir, datasource, feedtype, **options)


def _bag_tasks(records: Any, job: PartitionedBuild, token: str) -> Any:
    _, bag = _import_dask()
    count = records.npartitions
    if not count:
        return records  # no partitions (`from_delayed([])`): none to write
    indexes = bag.from_sequence(range(count), npartitions=count)
    return bag.map_partitions(_write_records, job, records, indexes, token=token)


def _frame_tasks(frame: Any, job: PartitionedBuild, token: str) -> Any:
    # `dask.compute` does not fuse a data frame's tasks (Dask 2026.8): unfused, a worker made
    # the next partition while the last waited to be written, and held two or three at once.
    return frame.map_partitions(
        _write_frame, job, meta=("partition", object), token=token, enforce_metadata=False
    ).optimize(fuse=True)


def _write_records(
    job: PartitionedBuild, records: Iterable[Record], index: Iterable[int]
) -> list[Partition]:
    """Writes a partition of a bag; `index` is the partition's number, as a partition."""
    (number,) = index
    return [job.write(records, number)]


def _write_frame(frame: Any, job: PartitionedBuild, partition_info: dict[str, Any]) -> Any:
    """Writes a partition of a data frame, as a series of one `Partition`."""
    import pandas

    written = job.write(_frame_rows(frame), partition_info["number"])
    return pandas.Series([written], dtype=object)


def _frame_rows(frame: Any) -> Iterator[Any]:
    """The rows of a partition as Arrow tables, for `add_arrow`, a slice at a time (a
    partition is never copied whole). A missing value (None, NaN, NaT, NA: what pandas calls
    missing) is a null, which is an absent field. A slice pyarrow cannot make a table of (a
    column of values of several kinds: metadata both text and lists) goes as records."""
    import pyarrow

    for start in range(0, len(frame), BATCH):
        part = frame.iloc[start : start + BATCH]
        try:
            table = _table(pyarrow, part)
        except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):
            table = None
        if table is None:
            yield from _records(part)
        else:
            yield table


def _table(pa: Any, part: Any) -> Any:
    """A slice of a partition as an Arrow table meaning what its records mean, or None where
    pyarrow would change what they mean."""
    import pandas

    table = pa.Table.from_pandas(part, preserve_index=False)
    for i, column in enumerate(table.columns):
        name = table.column_names[i]
        if column.null_count == len(column):
            # A column missing from every row is absent, whatever type pandas gave it (NaN
            # makes floats of a column of text).
            table = table.set_column(i, name, pa.nulls(len(column)))
        elif name == "pagerank" and pa.types.is_floating(column.type):
            # pandas makes floats of integers with a value missing. A fraction goes as a
            # record, to be refused as one.
            try:
                table = table.set_column(i, name, column.cast(pa.int64()))
            except pa.ArrowInvalid:
                return None
        elif (
            pa.types.is_binary(column.type)
            and part[name].dtype == object
            and pandas.api.types.infer_dtype(part[name], skipna=True) != "bytes"
        ):
            # pyarrow would encode text among bytes: text content is text, bytes are bytes.
            return None
    return table


def _records(part: Any) -> Iterator[Record]:
    """The rows of a slice as record dicts, a missing value left out."""
    rows = part.to_dict("records")
    missing = part.isna()
    gaps = list(part.columns[missing.any()])
    if gaps:
        for row, absent in zip(rows, missing[gaps].itertuples(index=False), strict=True):
            for name, gone in zip(gaps, absent, strict=True):
                if gone:
                    del row[name]
    yield from rows


def _is_dataframe(collection: object) -> bool:
    import dask.dataframe

    return isinstance(collection, dask.dataframe.DataFrame)


def _import_dask() -> tuple[Any, Any]:
    try:
        import dask
        import dask.bag
    except ImportError as exc:
        raise FastfeedError(
            f"building on Dask needs dask ({exc}): pip install 'fastfeed[dask]'"
        ) from None
    return dask, dask.bag
