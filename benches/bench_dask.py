"""Builds on Dask: two single-threaded workers against one, same corpus, same run.

Run: `pytest benches/bench_dask.py -o python_files='bench_*.py' -s` (FASTFEED_BENCH_DASK_RECORDS
sets the corpus, default 240,000 records of 1 to 6 KB of text in 16 partitions of 15,000;
FASTFEED_BENCH_DASK_ROUNDS the rounds, default 3).

Each worker process is pinned to a core of its own (a Dask worker per core, as deployed), runs
one task at a time, and its partition writer one encoding thread. The corpus is CPU-bound:
every partition's rows are made on the worker (nothing to transfer), turned into Arrow tables,
and encoded, text of 2 KB or more deflated. Rounds alternate between the two clusters, so that the
machine's slower moments fall on both sides. The same records through one `FeedWriter` in this
process, on one core, without Dask, show what Dask costs.

Peak RSS per worker is measured on the two workers building the corpus FLAT_SCALE times, then a
corpus of FLAT_SCALE times as many partitions of the same size: a worker holds one partition at a
time, so its peak must not grow with the corpus.

Targets (issue 13): two workers >= 1.7x one; peak RSS per worker flat (within 10%).
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import dask.dataframe
import distributed
import pandas
import pyarrow
import pytest
from fastfeed import FeedWriter
from fastfeed.dask import build

RECORDS = int(os.environ.get("FASTFEED_BENCH_DASK_RECORDS", "240000"))
PARTITIONS = 16
#: Records per partition.
ROWS = RECORDS // PARTITIONS
#: The corpus of the flatness test is this many times the first, in partitions of ROWS.
FLAT_SCALE = 4
ROUNDS = int(os.environ.get("FASTFEED_BENCH_DASK_ROUNDS", "3"))
# The workers do not import this module: its functions travel whole.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
#: Words of one to eight letters, some not ASCII.
WORDS = [("abcdéfgh" * 2)[i : i + n] for i in range(8) for n in range(1, 9)]
COLUMNS = ["url", "content", "displayurl"]


def partition(index: int) -> pandas.DataFrame:
    """Partition `index` of the corpus, the same wherever it is made."""
    rng = random.Random(index)
    text = " ".join(rng.choices(WORDS, k=2000))
    per = ROWS
    first = index * per
    return pandas.DataFrame(
        {
            "url": [f"http://docs.example.com/{i}" for i in range(first, first + per)],
            "content": [text[i % 500 :][: 1000 + (i * 37) % 5000] + str(i) for i in range(per)],
            "displayurl": [f"http://shown.example.com/{i}" for i in range(per)],
        }
    )


def corpus(partitions: int = PARTITIONS) -> dask.dataframe.DataFrame:
    # The columns given: else Dask makes a partition on a worker to learn them, every build.
    meta = pandas.DataFrame({name: pandas.Series(dtype="str") for name in COLUMNS})
    return dask.dataframe.from_map(partition, range(partitions), meta=meta)


def _pin(core: int) -> None:
    """Pins every thread of this process (an affinity is a thread's, and new threads take
    their creator's)."""
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), {core})


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak_rss() -> None:
    """Makes the peak RSS the current RSS (what the kernel offers for measuring a span)."""
    Path("/proc/self/clear_refs").write_text("5")


def cluster(workers: int) -> tuple[distributed.LocalCluster, distributed.Client]:
    local = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        scheduler_kwargs={"dashboard": False},
    )
    client = distributed.Client(local, set_as_default=False)
    for core, address in enumerate(sorted(client.scheduler_info()["workers"])):
        client.run(_pin, core, workers=[address])
    return local, client


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[int, distributed.Client]]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this benchmark needs two cores")
    one, two = cluster(1), cluster(2)
    yield {1: one[1], 2: two[1]}
    for local, client in (one, two):
        client.close()
        local.close()


def timed_build(
    client: distributed.Client, out: Path, partitions: int = PARTITIONS
) -> tuple[float, list[float]]:
    """The build's wall time, and the CPU time each worker spent on it."""
    with client.as_current():
        before = client.run(_cpu_seconds)
        started = time.perf_counter()
        summary = build(corpus(partitions), out, "bench", "full")
        seconds = time.perf_counter() - started
        after = client.run(_cpu_seconds)
    assert summary.records == ROWS * partitions
    shutil.rmtree(out)
    return seconds, [round(after[w] - before[w], 2) for w in sorted(after)]


def test_two_workers_against_one(clusters: dict[int, distributed.Client], tmp_path: Path) -> None:
    times: dict[int, list[float]] = {1: [], 2: []}
    cpu: dict[int, list[list[float]]] = {1: [], 2: []}
    for round in range(ROUNDS):
        for workers, client in clusters.items():
            seconds, used = timed_build(client, tmp_path / f"w{workers}-{round}")
            times[workers].append(seconds)
            cpu[workers].append(used)
    one, two = times[1], times[2]
    ratio = min(one) / min(two)
    peaks = {n: sorted(client.run(_peak_rss).values()) for n, client in clusters.items()}
    # The CPU each worker used says whether the work divided evenly, whatever else the
    # machine was running meanwhile (the wall-clock ratio is what the target is about).
    print(
        f"\n{RECORDS:,} records in {PARTITIONS} partitions: one worker {min(one):.2f} s, two "
        f"{min(two):.2f} s -> {ratio:.2f}x (medians {statistics.median(one):.2f} s, "
        f"{statistics.median(two):.2f} s -> {statistics.median(one) / statistics.median(two):.2f}x)"
        f"\nCPU seconds per worker and round: one {cpu[1]}, two {cpu[2]}"
        f"\npeak RSS per worker: one {[p // 2**20 for p in peaks[1]]} MB, "
        f"two {[p // 2**20 for p in peaks[2]]} MB"
    )
    no_dask = single_process(tmp_path / "plain")
    print(f"the same records through one FeedWriter, one core, no Dask: {no_dask:.2f} s")
    assert ratio >= 1.7


def test_peak_rss_per_worker_flat(clusters: dict[int, distributed.Client], tmp_path: Path) -> None:
    """Each worker's peak RSS over FLAT_SCALE builds of the corpus, then over one build of
    FLAT_SCALE times as many partitions: the same partitions written, by corpora of two sizes
    (a worker's peak has rare spikes from what else it runs; each side has as many chances)."""
    client = clusters[2]
    peaks = {}
    for builds, partitions in ((FLAT_SCALE, PARTITIONS), (1, PARTITIONS * FLAT_SCALE)):
        client.run(_reset_peak_rss)
        for n in range(builds):
            seconds, used = timed_build(client, tmp_path / f"flat-{partitions}-{n}", partitions)
        peaks[partitions] = sorted(client.run(_peak_rss).values())
        print(
            f"\n{builds} build(s) of {partitions} partitions of {ROWS:,} records, two workers "
            f"(the last {seconds:.2f} s, CPU {used} s): peak RSS per worker "
            f"{[p // 2**20 for p in peaks[partitions]]} MB"
        )
    small, large = (max(peaks[n]) for n in sorted(peaks))
    assert large <= small * 1.1, f"peak RSS per worker grew from {small >> 20} to {large >> 20} MB"


def single_process(out: Path) -> float:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        started = time.perf_counter()
        with FeedWriter(out, "bench", "full", workers=1) as writer:
            for frame in map(partition, range(PARTITIONS)):
                for start in range(0, len(frame), 2000):
                    rows = frame.iloc[start : start + 2000]
                    writer.add_arrow(pyarrow.Table.from_pandas(rows, preserve_index=False))
        return time.perf_counter() - started
    finally:
        os.sched_setaffinity(0, before)
