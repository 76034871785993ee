"""Feed sets built on Spark (`fastfeed.spark.build`, and `PartitionedBuild` driven by a Spark
job), on a real local Spark session (a JVM, Python workers), merged and pushed to the emulator
over HTTPS."""

from __future__ import annotations

import inspect
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow
import pytest
from fastfeed import FastfeedError, PartitionedBuild, read_manifest
from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator
from fastfeed.errors import EmptyFullFeed, PushError
from fastfeed.gsa.push import push
from fastfeed.sets.partitions import STAGING
from fastfeed.spark import build
from pyspark import TaskContext, cloudpickle
from pyspark.errors import PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

Settings = Callable[..., PushSettings]

# The workers import fastfeed, but not this module: its functions travel whole.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
# PySpark 4.3 warns of pandas 3 wherever it could use pandas; mapInArrow does not.
pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")

SCHEMA = "url string, content string"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as env:
        # Spark binds to the address the host name resolves to unless told.
        env.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        # The workers run `python3` unless told: this interpreter has fastfeed.
        env.setenv("PYSPARK_PYTHON", sys.executable)
        session = (
            SparkSession.builder.master("local[2,2]")  # two threads; a failed task runs again
            .appName("fastfeed-tests")
            .config("spark.driver.memory", "512m")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            # Small Arrow batches: a partition reaches the writer in several.
            .config("spark.sql.execution.arrow.maxRecordsPerBatch", "8")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def frame(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    """Records 0 to n-1, in order, in `partitions` partitions of consecutive records."""
    ids = spark.range(n, numPartitions=partitions)
    return ids.select(
        F.concat(F.lit("http://docs.example.com/"), ids.id.cast("string")).alias("url"),
        F.concat(F.lit("document "), ids.id.cast("string"), F.lit(" \u00e9")).alias("content"),
    )


def expected(n: int, start: int = 0) -> dict[str, bytes | None]:
    return {
        f"http://docs.example.com/{i}": f"document {i} \u00e9".encode()
        for i in range(start, start + n)
    }


def index_of(emulator: Emulator) -> dict[str, bytes | None]:
    emulator.wait_idle()
    return {url: doc.content for url, doc in emulator.documents("docs").items()}


def assert_pushed_once(out: Path, settings: PushSettings, emulator: Emulator) -> None:
    """The set in `out` holds records 0 to 119 once each, and pushing it indexes them."""
    assert sum(e.records for e in read_manifest(out)) == 120
    assert not (out / STAGING).exists()
    result = push(out, settings)
    assert result.ok and result.records_sent == 120
    assert index_of(emulator) == expected(120)


def test_a_data_frame_builds_a_full_set_whose_push_makes_the_index_equal_the_input(
    spark: SparkSession, emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    settings = push_settings(emulator)
    # A document the source no longer has: the full set must remove it.
    stale = spark.createDataFrame([("http://docs.example.com/999", "gone")], SCHEMA)
    push(build(stale, tmp_path / "stale", "docs", "full").out_dir, settings)
    # Spark's own types, as Arrow gives them: a map of metadata, a timestamp, bytes, a null.
    typed = frame(spark, 120, 4).select(
        "url",
        F.encode("content", "UTF-8").alias("content"),
        F.create_map(F.lit("n"), F.col("url")).alias("metadata"),
        F.lit("2024-01-02 03:04:05").cast("timestamp").alias("last_modified"),
        F.lit(None).cast("string").alias("displayurl"),
    )

    summary = build(typed, tmp_path / "feeds", "docs", "full", max_records=10)

    manifest = read_manifest(tmp_path / "feeds")
    assert summary.records == 120 and summary.manifest == manifest
    assert [e.file for e in manifest] == [f"docs-{i:06}.xml" for i in range(1, 13)]
    assert [e.feedtype for e in manifest] == ["full"] + ["incremental"] * 11
    assert sorted(os.listdir(tmp_path / "feeds")) == [e.file for e in manifest] + ["manifest.jsonl"]
    assert push(tmp_path / "feeds", settings).ok
    assert index_of(emulator) == expected(120)
    documents = emulator.documents("docs")
    first = documents["http://docs.example.com/0"]
    assert first.metadata == [("n", "http://docs.example.com/0")]
    assert first.displayurl is None and first.last_modified == "Tue, 02 Jan 2024 03:04:05 GMT"
    # Partition 0 holds records 0 to 29: its files come first, in order.
    assert (
        documents["http://docs.example.com/29"].push_id
        < documents["http://docs.example.com/30"].push_id
    )


def test_an_rdd_of_records_builds_the_same_set(spark: SparkSession, tmp_path: Path) -> None:
    rows = frame(spark, 50, 3)
    records = rows.rdd.map(lambda row: row.asDict())

    from_rdd = build(records, tmp_path / "rdd", "docs", "full", max_records=10)
    from_frame = build(rows, tmp_path / "frame", "docs", "full", max_records=10)

    assert [e.digest for e in from_rdd.manifest] == [e.digest for e in from_frame.manifest]
    assert [e.records for e in from_rdd.manifest] == [10, 6, 10, 7, 10, 7]


def test_a_task_failing_while_it_writes_runs_again_and_its_records_are_pushed_once(
    spark: SparkSession, emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    attempts = tmp_path / "attempts"

    def fail_once(batches: Iterator[Any]) -> Iterator[Any]:
        context = TaskContext.get()
        assert context is not None
        with attempts.open("a") as f:
            f.write(f"{context.partitionId()} {context.attemptNumber()}\n")
        for seen, batch in enumerate(batches):
            # Partition 1's first attempt dies with part of its records written.
            if seen == 2 and context.partitionId() == 1 and context.attemptNumber() == 0:
                raise RuntimeError("executor lost")
            yield batch

    flaky = frame(spark, 120, 3).mapInArrow(fail_once, SCHEMA)

    summary = build(flaky, tmp_path / "feeds", "docs", "full", max_records=7)

    assert sorted(attempts.read_text().splitlines()) == ["0 0", "1 0", "1 1", "2 0"]
    assert summary.records == 120
    assert_pushed_once(tmp_path / "feeds", push_settings(emulator), emulator)


def test_a_partition_written_by_a_task_that_then_failed_is_pushed_once(
    spark: SparkSession, emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    # PartitionedBuild driven by a Spark job of one's own: the first attempt at partition 1
    # publishes its part, then fails (its executor lost before Spark had its result).
    with PartitionedBuild(tmp_path / "feeds", "docs", "full", max_records=7) as job:

        def write(batches: Iterator[Any]) -> Iterator[Any]:
            context = TaskContext.get()
            assert context is not None
            written = job.write(batches, context.partitionId())
            if context.partitionId() == 1 and context.attemptNumber() == 0:
                raise RuntimeError("executor lost")
            yield pyarrow.record_batch([pyarrow.array([pickle.dumps(written)])], names=["part"])

        rows = frame(spark, 120, 3).mapInArrow(write, "part binary").collect()
        summary = job.merge([pickle.loads(row.part) for row in rows])

    assert summary.records == 120
    assert_pushed_once(tmp_path / "feeds", push_settings(emulator), emulator)


def test_a_refused_record_fails_the_job_and_leaves_nothing_to_push(
    spark: SparkSession, emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    bad = frame(spark, 40, 4).select(
        F.when(F.col("url").endswith("/25"), "http://unqualified/25")
        .otherwise(F.col("url"))
        .alias("url"),
        "content",
    )

    # Spark reports the worker's error, the refused record named.
    with pytest.raises(PythonException, match=r"partition 2, record 5: url: host 'unqualified'"):
        build(bad, tmp_path / "feeds", "docs", "full")

    assert not (tmp_path / "feeds").exists()
    with pytest.raises(PushError, match="feeds does not exist"):
        push(tmp_path / "feeds", push_settings(emulator))
    assert emulator.pushes() == []
    # Skipped instead, it is saved, and the rest is built.
    summary = build(bad, tmp_path / "skipped", "docs", "full", on_error="skip")
    assert (summary.records, summary.rejected) == (39, 1)
    assert "partition 2, record 5" in (tmp_path / "skipped" / "rejected.log").read_text()


def test_a_set_whose_first_partitions_are_empty_starts_with_its_first_record_as_full(
    spark: SparkSession, emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    rows = frame(spark, 60, 6)
    kept = rows.where(F.regexp_extract("url", r"/(\d+)$", 1).cast("int") >= 20)

    summary = build(kept, tmp_path / "feeds", "docs", "full", max_records=5)

    assert [e.feedtype for e in summary.manifest] == ["full"] + ["incremental"] * 7
    assert push(tmp_path / "feeds", push_settings(emulator)).ok
    assert index_of(emulator) == expected(40, 20)


def test_an_empty_full_set_is_refused_unless_allowed(spark: SparkSession, tmp_path: Path) -> None:
    empty = frame(spark, 10, 2).where("false")
    with pytest.raises(EmptyFullFeed, match="every document of 'docs'"):
        build(empty, tmp_path / "refused", "docs", "full")
    assert not (tmp_path / "refused").exists()

    summary = build(empty, tmp_path / "allowed", "docs", "full", allow_empty_full=True)
    assert [(e.feedtype, e.records) for e in summary.manifest] == [("full", 0)]
    none = spark.createDataFrame(spark.sparkContext.emptyRDD(), SCHEMA)  # no partitions at all
    assert none.rdd.getNumPartitions() == 0
    with pytest.raises(EmptyFullFeed):
        build(none, tmp_path / "none", "docs", "full")
    assert build(none, tmp_path / "nothing", "docs").manifest == []


def test_what_is_not_a_spark_collection_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    with pytest.raises(FastfeedError, match="a Spark DataFrame or RDD of records, not list"):
        build([{"url": "http://docs.example.com/"}], tmp_path / "feeds", "docs")
    assert not (tmp_path / "feeds").exists()


def test_help_shows_each_option_as_the_dask_build_does() -> None:
    from fastfeed import dask

    shown = inspect.signature(build)
    assert str(shown).split("*, ")[1] == str(inspect.signature(dask.build)).split("*, ")[1]
    assert "allow_empty_full: bool = False" in str(shown)
    assert build.__doc__ is not None and "    allow_empty_full: write a full set" in build.__doc__
