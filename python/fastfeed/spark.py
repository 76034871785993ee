"""Feed sets built on Spark: `build(data, out_dir, datasource, feedtype)` writes one part of
the set per partition of a Spark DataFrame (or RDD of record dicts), on the executors, then
merges the parts into one set that `fastfeed push OUT` pushes like any other.

`out_dir` must be a directory the executors and the driver share (a local disk for
`local[N]`, a network file system for a cluster of machines). Needs the `spark` extra:
`pip install 'fastfeed[spark]'`.
"""

from __future__ import annotations

import functools
import os
import pickle
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
from fastfeed.sets.partitions import Partition
from fastfeed.sets.records import Record
from fastfeed.sets.writer import show_options

__all__ = ["build"]

#: The one column of what each partition's task returns: its `Partition`, pickled.
_RESULT = "partition"


@show_options(PartitionedOptions, build_partitioned, PARTITION_DEFAULTS)
def build(
    data: Any,
    out_dir: str | os.PathLike[str],
    datasource: str,
    feedtype: FeedType = "incremental",
    **options: Unpack[PartitionedOptions],
) -> BuildSummary:
    """Builds a feed set from a Spark DataFrame (a row per record, a column per field of the
    record schema; a null is an absent field), each partition's Arrow batches read in place by
    the Rust core, or from an RDD of record dicts, one part per partition on the executors,
    into `out_dir`, and returns what was written, counters summed.

    The options, the set and its guarantees (a failed job leaves `out_dir` as it was) are
    `fastfeed.dask.build`'s; a partition Spark runs again (a failed or speculative attempt) is
    pushed once. With `on_error="stop"` a refused record fails the job as any error of a task
    does: Spark raises its `PythonException`, which names the record.
    """
    dataframe, rdd = _import_pyspark()
    plan: Callable[[PartitionedBuild], Callable[[], list[Partition]]]
    if isinstance(data, dataframe):
        plan = functools.partial(_plan_frame, data)
    elif isinstance(data, rdd):
        plan = functools.partial(_plan_rdd, data)
    else:
        raise FastfeedError(
            f"fastfeed.spark.build takes a Spark DataFrame or RDD of records, not "
            f"{type(data).__name__}"
        )
    return build_partitioned(plan, out_dir, datasource, feedtype, **options)


def _plan_frame(frame: Any, job: PartitionedBuild) -> Callable[[], list[Partition]]:
    """Plans each partition of a DataFrame written in the task that makes it (Spark checks
    the plan now); running it brings the results, small, back to the driver."""
    written = frame.mapInArrow(functools.partial(_write_batches, job), f"{_RESULT} binary")
    return lambda: [pickle.loads(row[_RESULT]) for row in written.collect()]


def _write_batches(job: PartitionedBuild, batches: Iterator[Any]) -> Iterator[Any]:
    """Writes a partition of a DataFrame, given as pyarrow record batches; yields its
    `Partition` as a batch of one row."""
    import pyarrow
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None  # always set in a task
    written = job.write(batches, context.partitionId())
    yield pyarrow.record_batch([pyarrow.array([pickle.dumps(written)])], names=[_RESULT])


def _plan_rdd(records: Any, job: PartitionedBuild) -> Callable[[], list[Partition]]:
    written = records.mapPartitionsWithIndex(functools.partial(_write_records, job))
    return lambda: list(written.collect())


def _write_records(job: PartitionedBuild, index: int, records: Iterable[Record]) -> list[Partition]:
    return [job.write(records, index)]


def _import_pyspark() -> tuple[type[Any], type[Any]]:
    try:
        from pyspark import RDD
        from pyspark.sql import DataFrame
    except ImportError as exc:
        raise FastfeedError(
            f"building on Spark needs pyspark ({exc}): pip install 'fastfeed[spark]'"
        ) from None
    return DataFrame, RDD
