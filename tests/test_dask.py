"""Feed sets built on Dask (`fastfeed.dask.build`), on a real two-process cluster, merged and
pushed to the emulator over HTTPS; the partition writer and merge behind it."""

from __future__ import annotations

import errno
import glob
import inspect
import json
import os
import pydoc
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import dask
import dask.bag
import dask.dataframe
import distributed
import fastfeed.sets.partitions
import pandas
import polars
import pyarrow
import pytest
from fastfeed import (
    EmptyFullFeed,
    FastfeedError,
    FeedWriter,
    InputError,
    PartitionedBuild,
    read_manifest,
    validate_file,
)
from fastfeed.dask import build
from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator
from fastfeed.errors import PushError
from fastfeed.gsa.partitions import PartitionedOptions
from fastfeed.gsa.push import push
from fastfeed.sets.manifest import MANIFEST
from fastfeed.sets.partitions import BATCH, STAGING
from fastfeed.sets.writer import DEFAULT_MAX_BYTES
from feeds import decode_set

Settings = Callable[..., PushSettings]

# The workers import fastfeed from PYTHONPATH, but not this module: its functions travel whole.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def records(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"url": f"http://docs.example.com/{i}", "content": f"document {i} \u00e9"}
        for i in range(start, start + n)
    ]


def index_of(emulator: Emulator) -> dict[str, bytes | None]:
    emulator.wait_idle()
    return {url: doc.content for url, doc in emulator.documents("docs").items()}


def expected(rows: list[dict[str, Any]]) -> dict[str, bytes | None]:
    return {r["url"]: r["content"].encode() for r in rows}


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            scheduler_kwargs={"dashboard": False},
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture
def sync_scheduler() -> Iterator[None]:
    with dask.config.set(scheduler="sync"):
        yield


def test_a_cluster_builds_a_full_set_whose_push_makes_the_index_equal_the_input(
    client: distributed.Client,
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
) -> None:
    settings = push_settings(emulator)
    # A document the source no longer has: the full set must remove it.
    stale = tmp_path / "stale"
    with dask.config.set(scheduler="sync"):
        build(dask.bag.from_sequence(records(1, 999), npartitions=1), stale, "docs", "full")
    push(stale, settings)
    rows = records(120)
    frame = dask.dataframe.from_pandas(pandas.DataFrame(rows), npartitions=4)

    summary = build(frame, tmp_path / "feeds", "docs", "full", max_records=10)

    manifest = read_manifest(tmp_path / "feeds")
    assert summary.records == 120 and summary.manifest == manifest
    assert [e.file for e in manifest] == [f"docs-{i:06}.xml" for i in range(1, 13)]
    assert [e.feedtype for e in manifest] == ["full"] + ["incremental"] * 11
    assert summary.bytes == sum((tmp_path / "feeds" / e.file).stat().st_size for e in manifest)
    assert sorted(os.listdir(tmp_path / "feeds")) == [e.file for e in manifest] + ["manifest.jsonl"]
    assert push(tmp_path / "feeds", settings).ok
    assert index_of(emulator) == expected(rows)


def test_each_partition_of_a_frame_is_made_and_written_in_one_task(
    client: distributed.Client, tmp_path: Path
) -> None:
    # A worker that made a partition in a task of its own held it until another task wrote
    # it, and made the next meanwhile: two or three partitions in its memory at once.
    def made(i: int) -> pandas.DataFrame:
        return pandas.DataFrame(records(10, 10 * i))

    frame = dask.dataframe.from_map(made, range(4), meta=pandas.DataFrame(records(0)))
    with distributed.get_task_stream(client) as tasks:
        summary = build(frame, tmp_path / "feeds", "docs")

    assert summary.records == 40
    keys = [str(task["key"]) for task in tasks.data]
    # A task per partition, and the one that gathers what they wrote.
    assert len(keys) == 5 and sum("fastfeed" in key for key in keys) == 4, keys


def test_a_partition_run_again_after_its_worker_is_killed_is_pushed_once(
    client: distributed.Client,
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "killed"
    attempts = tmp_path / "attempts"

    def die_once(partition: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with attempts.open("a") as f:
            f.write(partition[0]["url"] + "\n")
        # The first worker to hold a written partition dies at its next one, losing both:
        # Dask runs them again on the other worker.
        written = [k for k in distributed.get_worker().data if "fastfeed-partition" in str(k)]
        if written and not marker.exists():
            marker.touch()
            os._exit(1)
        return partition

    rows = records(120)
    collection = dask.bag.from_sequence(rows, npartitions=6).map_partitions(die_once)

    summary = build(collection, tmp_path / "feeds", "docs", "full", max_records=7)

    runs = attempts.read_text().splitlines()
    assert marker.exists() and len(runs) >= 8  # the partition killed, and one written before
    manifest = read_manifest(tmp_path / "feeds")
    assert summary.records == sum(e.records for e in manifest) == 120
    assert not (tmp_path / "feeds" / STAGING).exists()
    result = push(tmp_path / "feeds", push_settings(emulator))
    assert result.ok and result.records_sent == 120
    assert index_of(emulator) == expected(rows)


def test_a_worker_killed_while_it_writes_a_partition_leaves_none_of_its_files_in_the_set(
    client: distributed.Client,
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
) -> None:
    """SIGKILL from outside, once the partition's first files are written and the writer is
    still at it: Dask runs the partition again, and the merged set holds each record once."""
    out, started, killed = tmp_path / "feeds", tmp_path / "started", tmp_path / "killed"
    heavy = 3

    def rows_of(partition: int) -> list[dict[str, Any]]:
        return records(5 * BATCH if partition == heavy else 20, 10 * BATCH * partition)

    def made(numbers: list[int]) -> Iterator[dict[str, Any]]:
        (partition,) = numbers
        with started.open("a") as f:
            f.write(f"{partition} {os.getpid()}\n")
        # The first attempt at the heavy partition takes its time after its first batch,
        # written meanwhile: it is killed then (or, never killed, ends after about 4 s).
        slow = partition == heavy and not killed.exists()
        for n, row in enumerate(rows_of(partition)):
            if slow and n >= BATCH and n % 100 == 0:
                time.sleep(0.05)
            yield row  # given to the writer as made: the task is fused

    written: list[int] = []  # the killed attempt's files
    built = threading.Event()

    def kill_once_written() -> None:
        while not built.is_set():
            files = glob.glob(f"{out / STAGING}/{heavy:06d}-*.tmp/docs-*.xml")
            if files:
                written.append(len(os.listdir(Path(files[0]).parent)))
                pids = [line.split()[1] for line in started.read_text().splitlines()
                        if line.startswith(f"{heavy} ")]  # fmt: skip
                killed.touch()
                os.kill(int(pids[-1]), signal.SIGKILL)
                return
            time.sleep(0.005)

    collection = dask.bag.from_sequence(range(6), npartitions=6).map_partitions(made)
    killer = threading.Thread(target=kill_once_written)
    killer.start()
    try:
        summary = build(collection, out, "docs", "full", max_records=500)
    finally:
        built.set()
        killer.join()

    # Killed with part of its files written (a whole partition makes 20), one of them perhaps
    # half-written.
    assert written and 0 < written[0] < 5 * BATCH // 500, written
    runs = started.read_text().split()[::2]
    assert runs.count(str(heavy)) >= 2  # killed, then run again
    rows = [row for partition in range(6) for row in rows_of(partition)]
    assert summary.records == sum(e.records for e in read_manifest(out)) == len(rows)
    assert [r.url for r in decode_set(out)] == [r["url"] for r in rows]
    assert not (out / STAGING).exists()  # the killed attempt's files with it
    result = push(out, push_settings(emulator))
    assert result.ok and result.records_sent == len(rows)
    assert index_of(emulator) == expected(rows)


def test_a_failing_partition_fails_the_job_and_leaves_nothing_to_push(
    client: distributed.Client,
    emulator: Emulator,
    push_settings: Settings,
    tmp_path: Path,
) -> None:
    rows = records(40)
    rows[25]["url"] = "http://unqualified/25"

    with pytest.raises(InputError, match=r"partition 2, record 5: url: host 'unqualified'"):
        build(dask.bag.from_sequence(rows, npartitions=4), tmp_path / "feeds", "docs", "full")

    assert not (tmp_path / "feeds").exists()
    with pytest.raises(PushError, match="feeds does not exist"):
        push(tmp_path / "feeds", push_settings(emulator))
    assert emulator.pushes() == []


def test_a_set_whose_first_partitions_are_empty_starts_with_its_first_record_as_full(
    sync_scheduler: None, emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    rows = records(60)
    frame = dask.dataframe.from_pandas(pandas.DataFrame(rows), npartitions=6)
    # A filter empties the first two partitions.
    kept = frame[frame.url.str.extract(r"/(\d+)$", expand=False).astype(int) >= 20]

    summary = build(kept, tmp_path / "feeds", "docs", "full", max_records=5)

    assert [e.feedtype for e in summary.manifest] == ["full"] + ["incremental"] * 7
    assert push(tmp_path / "feeds", push_settings(emulator)).ok
    assert index_of(emulator) == expected(rows[20:])


def test_an_empty_full_set_is_refused_unless_allowed(sync_scheduler: None, tmp_path: Path) -> None:
    empty = dask.bag.from_sequence([], npartitions=1).filter(bool)

    with pytest.raises(EmptyFullFeed, match="every document of 'docs'"):
        build(empty, tmp_path / "refused", "docs", "full")
    assert not (tmp_path / "refused").exists()

    summary = build(empty, tmp_path / "allowed", "docs", "full", allow_empty_full=True)
    assert [(e.feedtype, e.records) for e in summary.manifest] == [("full", 0)]
    none = dask.bag.from_delayed([])  # no partitions at all
    with pytest.raises(EmptyFullFeed):
        build(none, tmp_path / "none", "docs", "full")
    assert build(none, tmp_path / "nothing", "docs").manifest == []


def test_records_refused_in_any_partition_are_saved_in_partition_order(
    sync_scheduler: None, tmp_path: Path
) -> None:
    rows = records(30)
    rows[3]["url"] = "not a url"
    rows[27]["pagerank"] = 7
    # A missing value in a column is an absent field, not a refused one.
    frame = pandas.DataFrame(rows)
    frame.loc[frame.index % 2 == 0, "displayurl"] = "http://shown.example.com/"

    summary = build(
        dask.dataframe.from_pandas(frame, npartitions=3),
        tmp_path / "feeds",
        "docs",
        on_error="skip",
    )

    assert (summary.records, summary.rejected) == (28, 2)
    assert summary.rejected_file == str(tmp_path / "feeds" / "rejected.jsonl")
    lines = (tmp_path / "feeds" / "rejected.jsonl").read_text().splitlines()
    assert ['"url":"not a url"' in lines[0], '"pagerank":7' in lines[1]] == [True, True]
    log = (tmp_path / "feeds" / "rejected.log").read_text().splitlines()
    assert log[0].startswith("partition 0, record 3: url:")
    assert log[1].startswith("partition 2, record 7: pagerank:")


NUMBERS = ("pagerank", "last_modified")


def test_missing_values_in_a_frame_are_absent_fields_as_in_the_same_dicts(
    sync_scheduler: None, tmp_path: Path
) -> None:
    """A frame goes to the writer as Arrow tables: what pandas calls missing (NaN, None, NaT)
    must still be an absent field, whatever column type pandas made of it."""
    nan = float("nan")
    rows: list[dict[str, Any]] = [
        {
            "url": f"http://docs.example.com/{i}",
            "content": f"document {i}",
            "displayurl": f"http://shown.example.com/{i}" if i % 3 else nan,
            "pagerank": 70 + i % 20 if i % 2 else nan,  # floats, for pandas
            "lock": True if i % 4 == 1 else None,
            "last_modified": pandas.Timestamp(2024, 5, 1 + i % 28) if i % 5 else pandas.NaT,
            "metadata": {"team": "search", "tags": ["a", "b"]} if i % 2 else nan,
            "mimetype": nan,  # missing from every row: a column of floats
            "authmethod": None,  # and a column of nothing
        }
        for i in range(300)
    ]
    frame = pandas.DataFrame(rows)
    assert frame.pagerank.dtype == "float64" and frame.mimetype.dtype == "float64"
    # Whole floats as integers, moments as seconds (which dicts take): what they mean.
    dicts = [
        {
            k: int(v.timestamp() if k == "last_modified" else v) if k in NUMBERS else v
            for k, v in r.items()
            if not pandas.isna(v)
        }
        for r in rows
    ]
    # The same slice of records where pyarrow cannot make a column of them (metadata values
    # both text and lists; content both text and bytes): they go as records.
    mixed = [
        {"url": "http://docs.example.com/m1", "metadata": {"a": "x"}, "content": b"\x00\xff"},
        {"url": "http://docs.example.com/m2", "metadata": {"a": ["y", "z"]}, "content": "text"},
    ]

    for name, given, same in [("frame", frame, dicts), ("mixed", pandas.DataFrame(mixed), mixed)]:
        # Dask would make text of columns of Python objects (True, dicts): keep them.
        with dask.config.set({"dataframe.convert-string": False}):
            collection = dask.dataframe.from_pandas(given, npartitions=1)
        build(collection, tmp_path / name, "docs")
        with FeedWriter(tmp_path / f"{name}-dicts", "docs") as writer:
            writer.add_batch(same)
        built = (tmp_path / name / "docs-000001.xml").read_bytes()
        assert built == (tmp_path / f"{name}-dicts" / "docs-000001.xml").read_bytes()
    fed = decode_set(tmp_path / "frame")
    assert (fed[0].attrs.get("displayurl"), fed[1].attrs["displayurl"]) == (
        None,
        "http://shown.example.com/1",
    )
    assert (fed[0].attrs.get("pagerank"), fed[1].attrs["pagerank"]) == (None, "71")
    assert fed[0].metadata == [] and sorted(fed[1].metadata) == [
        (b"tags", b"a"),
        (b"tags", b"b"),
        (b"team", b"search"),
    ]


def test_a_partition_of_arrow_tables_and_dicts_names_refused_records_across_them(
    tmp_path: Path,
) -> None:
    rows = records(12)
    rows[2]["pagerank"] = 7
    rows[4]["url"] = "not a url"
    rows[9]["pagerank"] = 7
    schema = pyarrow.schema(
        {"url": pyarrow.string(), "content": pyarrow.string(), "pagerank": pyarrow.int64()}
    )
    first, last = (pyarrow.Table.from_pylist(part, schema) for part in (rows[:6], rows[8:]))

    with PartitionedBuild(tmp_path / "feeds", "docs", on_error="skip") as job:
        # Arrow tables (a Polars frame, pyarrow's) among dicts, read in place.
        part = job.write([polars.DataFrame(first), *rows[6:8], last], 0)
        summary = job.merge([part])

    assert (summary.records, summary.rejected) == (9, 3)
    log = (tmp_path / "feeds" / "rejected.log").read_text().splitlines()
    assert [line.split(":")[0] for line in log] == [
        "partition 0, record 2",
        "partition 0, record 4",
        "partition 0, record 9",
    ]
    saved = (tmp_path / "feeds" / "rejected.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in saved] == [rows[2], rows[4], rows[9]]
    kept = [r for i, r in enumerate(rows) if i not in (2, 4, 9)]
    assert {f.url: f.content for f in decode_set(tmp_path / "feeds")} == expected(kept)


def test_the_merge_takes_every_partition_once_and_only_the_copy_reported(
    tmp_path: Path,
) -> None:
    out = tmp_path / "feeds"
    with PartitionedBuild(out, "docs", "full", max_records=4) as job:
        first = job.write(records(6), 0)
        lost = job.write(records(6, 6), 1)  # a copy whose worker was lost
        second = job.write(records(6, 6), 1)

        with pytest.raises(FastfeedError, match=r"partitions \[0, 1, 1\] are not every"):
            job.merge([first, lost, second])
        with pytest.raises(FastfeedError, match=r"partitions \[1\] are not every partition"):
            job.merge([second])
        summary = job.merge([second, first])

    assert lost.directory != second.directory
    assert summary.records == 12
    assert [(e.file, e.feedtype, e.records) for e in summary.manifest] == [
        ("docs-000001.xml", "full", 4),
        ("docs-000002.xml", "incremental", 2),
        ("docs-000003.xml", "incremental", 4),
        ("docs-000004.xml", "incremental", 2),
    ]
    header = (out / "docs-000003.xml").read_bytes()[:300]
    assert b"<feedtype>incremental</feedtype>" in header
    assert [validate_file(out / e.file) for e in summary.manifest] == [[]] * 4
    assert sorted(os.listdir(out)) == [e.file for e in summary.manifest] + ["manifest.jsonl"]


def test_an_attempt_left_running_by_a_failed_job_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "feeds"
    with pytest.raises(RuntimeError), PartitionedBuild(out, "docs") as job:
        raise RuntimeError("a partition failed")

    with pytest.raises(FastfeedError, match="was not started .* or has ended"):
        job.write(records(3), 2)
    assert not out.exists()


def test_a_frame_whose_graph_cannot_be_made_leaves_the_output_directory_as_it_was(
    sync_scheduler: None, tmp_path: Path
) -> None:
    frame = dask.dataframe.from_pandas(pandas.DataFrame(records(4)), npartitions=2)
    # Dask checks the column only when it makes the graph.
    unsorted = frame.sort_values("title")
    absent = tmp_path / "new" / "feeds"
    empty = tmp_path / "empty"
    empty.mkdir()

    for out in (absent, empty):
        with pytest.raises(KeyError, match="title"):
            build(unsorted, out, "docs", "full")
    assert not (tmp_path / "new").exists()
    assert os.listdir(empty) == []
    # A failed task leaves no trace either, even in a directory it made.
    with pytest.raises(InputError):
        build(frame.assign(url="not a url"), absent, "docs")
    assert not (tmp_path / "new").exists()


def test_a_merge_that_fails_leaves_the_output_directory_as_it_was(
    sync_scheduler: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = records(6)
    rows[1]["content"] = os.urandom(20_000).hex()  # over the cap: a warning
    rows[4]["url"] = "not a url"  # refused: OUT/rejected.jsonl
    bag = dask.bag.from_sequence(rows, npartitions=2)
    absent, empty = tmp_path / "new" / "feeds", tmp_path / "empty"
    empty.mkdir()

    def refuse(warning: str) -> None:
        raise RuntimeError(f"stop on {warning[:20]}")

    def disk_full(directory: Path, entries: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    for out in (absent, empty):
        with pytest.raises(RuntimeError, match="stop on"):
            build(bag, out, "docs", max_bytes=10_000, on_error="skip", on_warning=refuse)
        with monkeypatch.context() as patch:
            patch.setattr(fastfeed.sets.partitions, "_write_manifest", disk_full)
            with pytest.raises(OSError, match="No space left"):
                build(bag, out, "docs", max_bytes=10_000, on_error="skip", on_warning=print)
    assert not (tmp_path / "new").exists()
    assert os.listdir(empty) == []
    # So the same build runs again into it.
    for out in (absent, empty):
        summary = build(bag, out, "docs", max_bytes=10_000, on_error="skip", on_warning=print)
        assert (summary.records, summary.rejected, summary.warnings) == (5, 1, 1)
        assert sorted(os.listdir(out)) == sorted(
            [MANIFEST, "rejected.jsonl", "rejected.log", *(e.file for e in summary.manifest)]
        )


def test_help_shows_each_option_with_what_it_does() -> None:
    signature = inspect.signature(build)
    options = [p for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY]

    assert [p.name for p in options] == list(PartitionedOptions.__annotations__)
    assert not [p for p in signature.parameters.values() if p.kind == p.VAR_KEYWORD]
    assert signature.parameters["max_records"].annotation is int
    assert build.__doc__ is not None
    assert "    on_error: 'stop' (default): the first refused record fails the job" in build.__doc__
    assert "    max_bytes: cap on each file, in bytes" in build.__doc__


def test_help_shows_the_default_each_option_left_out_takes(
    sync_scheduler: None, tmp_path: Path
) -> None:
    signature = inspect.signature(build)
    call = signature.bind(dask.bag.from_sequence(records(3)), tmp_path / "feeds", "docs", "full")
    call.apply_defaults()  # as a wrapper forwarding every parameter does
    assert call.kwargs["workers"] == 1  # each partition's writer: the workers are the parallelism

    assert build(*call.args, **call.kwargs).records == 3
    help_text = pydoc.render_doc(build, renderer=pydoc.plaintext)
    assert "allow_empty_full: bool = False" in help_text
    assert f"max_bytes: int = {DEFAULT_MAX_BYTES}" in help_text
    assert "on_error: Literal['stop', 'skip'] = 'stop'" in help_text


def test_settings_are_checked_before_any_partition_is_sent(
    sync_scheduler: None, tmp_path: Path
) -> None:
    with pytest.raises(FastfeedError, match="web feed, which is always incremental"):
        build(dask.bag.from_sequence(records(2)), tmp_path / "feeds", "web", "full")
    assert not (tmp_path / "feeds").exists()


def test_fastfeed_works_without_dask_and_says_how_to_install_it() -> None:
    script = (
        "import sys; sys.modules['dask'] = None\n"
        "import fastfeed, fastfeed.dask\n"
        "try:\n"
        "    fastfeed.dask.build([], 'out', 'docs')\n"
        "except fastfeed.FastfeedError as exc:\n"
        "    print(exc)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'fastfeed[dask]'" in shown
