"""Arrow benchmarks: `add_arrow` against `add_batch`, and a Parquet build against the JSON
Lines build of the same records, side by side in one run, rounds alternating (this VM's speed
moves by 10% within minutes).

Run: `pytest benches/bench_arrow.py -o python_files='bench_*.py' -s` (FASTFEED_BENCH_MB sets
the corpus size, default 200). Each test prints the ratio it measured.

Targets (issue 13): `add_arrow` 7x `add_batch` for 1 KB text records (2 million records/s on
two cores), and no slower per byte than JSON Lines for large records; a Parquet build within
1.3x the JSON Lines build's time, at most 128 MB peak RSS (issue 14); an Arrow IPC build the
same. The first is not met: its
assert guards what is (see PERFORMANCE.md for the figures and what limits them).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
from bench_build import CORPUS_MB, _kb_records, _text, make_corpus
from fastfeed import FeedWriter, read_manifest
from fastfeed.gsa.build import build
from peak import run_measuring_peak

ROUNDS = 5


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Seconds taken, and CPU seconds of every thread of the process: other engineers' work on
    the shared machine moves the first, much less the second."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def ratios(slow: list[tuple[float, float]], fast: list[tuple[float, float]]) -> tuple[float, float]:
    """How many times `fast` beats `slow`, by their best rounds: in time, and in CPU time."""
    return min(s[0] for s in slow) / min(f[0] for f in fast), min(s[1] for s in slow) / min(
        f[1] for f in fast
    )


#: The records of make_corpus as a table.
SCHEMA = pa.schema(
    [
        ("url", pa.string()),
        ("metadata", pa.struct([("author", pa.string()), ("tags", pa.list_(pa.string()))])),
        ("content", pa.string()),
        ("content_base64", pa.string()),
        ("mimetype", pa.string()),
    ]
)


def to_table(src: Path, dest: Path, group_bytes: int = 16_000_000) -> None:
    """JSON Lines to Parquet (snappy, pyarrow's defaults) or to an Arrow IPC file
    (uncompressed, as Polars writes it), by `dest`'s suffix: a row group or record batch of
    about 16 MB at a time."""
    opened = pq.ParquetWriter if dest.suffix == ".parquet" else pa.ipc.new_file
    with opened(dest, SCHEMA) as writer, src.open("rb") as lines:
        rows: list[dict[str, object]] = []
        size = 0
        for line in lines:
            rows.append(orjson.loads(line))
            size += len(line)
            if size >= group_bytes:
                writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
                rows, size = [], 0
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))


def test_add_arrow_against_add_batch(tmp_path: Path) -> None:
    """The same 1 KB text records, as a pyarrow Table (made once: Arrow data is what a
    pipeline already holds) and as dicts in batches of 10,000 (new ones each round: CPython
    caches a str's UTF-8 form, and a pipeline hands over new strings every time)."""
    n = 200_000
    table = pa.Table.from_pylist(_kb_records(n, seed=1))
    runs = iter(range(1000))
    arrow, dicts = [], []

    def write(add: Callable[[FeedWriter], None]) -> tuple[float, float]:
        with FeedWriter(tmp_path / f"r{next(runs)}", "api") as w:
            return timed(lambda: add(w))

    for seed in range(ROUNDS):
        arrow.append(write(lambda w: w.add_arrow(table)))
        records = _kb_records(n, seed=seed + 2)
        batches = [records[i : i + 10_000] for i in range(0, n, 10_000)]

        def add_batches(w: FeedWriter, batches: list[list[dict[str, object]]] = batches) -> None:
            for batch in batches:
                w.add_batch(batch)  # type: ignore[arg-type]

        dicts.append(write(add_batches))
    ratio, cpu = ratios(dicts, arrow)
    best = min(a[0] for a in arrow)
    print(
        f"\nadd_arrow {n / best:,.0f} records/s, add_batch {n / min(d[0] for d in dicts):,.0f} "
        f"records/s -> {ratio:.1f}x ({cpu:.1f}x in CPU time); CPU a record "
        f"{min(a[1] for a in arrow) / n * 1e6:.2f} µs and {min(d[1] for d in dicts) / n * 1e6:.2f}"
    )
    # The 7x target is not met: add_arrow is bound by the disk's writes and the encoding both
    # calls share (see PERFORMANCE.md); this guards what add_arrow saves, reading rows without
    # Python (2.7x measured in session 23; 2.2x to 2.4x since text dense with markup goes in
    # CDATA sections, which made the encoding both calls share cheaper; 2.9x to 3.0x with XXH3
    # digests, 2.3x to 2.8x for the build before in alternating runs). In CPU time, which the
    # other work on the shared machine moves far less than the time.
    assert cpu >= 2.1


def one_row_batches_against_one(open_writer: Callable[[Path], Any], table: pa.Table) -> float:
    """`table` to `add_arrow` in batches of one row (a table grown by appends, a DuckDB result
    in small vectors) and in one batch, best of ROUNDS alternating rounds; prints both and
    returns how many times the one batch beats the 1-row batches in CPU time."""
    small = pa.Table.from_batches(table.to_batches(max_chunksize=1))
    runs = iter(range(1000))
    one, rows = [], []

    def write(t: pa.Table) -> tuple[float, float]:
        with open_writer(Path(f"r{next(runs)}")) as w:
            return timed(lambda: w.add_arrow(t))

    for _ in range(ROUNDS):
        one.append(write(table))
        rows.append(write(small))
    wall, cpu = ratios(rows, one)
    n = table.num_rows
    print(
        f"\n{n:,} rows: one batch {min(o[1] for o in one):.3f} s CPU, 1-row batches "
        f"{min(r[1] for r in rows):.3f} s CPU -> {cpu:.1f}x in CPU time ({wall:.1f}x in time)"
    )
    return cpu


def test_records_in_one_row_batches_against_one_batch(tmp_path: Path) -> None:
    """100,000 records of 200 bytes of text. Small batches are gathered into one: what is left
    is Arrow's export and import of each batch through the C stream interface (1.5 µs each
    here, 0.15 s of CPU for the 100,000: 4x the one batch's whole write by itself), then their
    checks and copy into one. The ~2x of one batch hoped for is out of reach through the C
    stream, whose export and import alone cost more."""
    table = pa.Table.from_pylist(
        [{"url": f"http://docs.example.com/{i}", "content": "x" * 200} for i in range(100_000)]
    )
    cpu = one_row_batches_against_one(lambda p: FeedWriter(tmp_path / p, "api"), table)
    # 5.9x to 7.9x measured (14x before small batches were gathered).
    assert cpu <= 11


def test_add_arrow_against_json_lines_for_large_records(tmp_path: Path) -> None:
    """Text records of 16 to 256 KB (markup-dense, so deflated: the encoding is the same work
    either way), as a pyarrow Table written by `add_arrow` and as the JSON Lines file
    `fastfeed build` reads: per byte, reading Arrow must cost no more than parsing JSON."""
    rng = random.Random(5)
    records = []
    size = 0
    while size < CORPUS_MB * 1_000_000:
        content = _text(rng, rng.randint(16_000, 256_000))
        records.append({"url": f"http://docs.example.com/{len(records)}", "content": content})
        size += len(content)
    src = tmp_path / "large.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    table = pa.Table.from_pylist(records)
    del records
    runs = iter(range(1000))
    digests: dict[str, set[tuple[str, ...]]] = {"jsonl": set(), "arrow": set()}

    def write(kind: str, fill: Callable[[Path], object]) -> tuple[float, float]:
        out = tmp_path / f"o{next(runs)}"
        seconds = timed(lambda: fill(out))
        digests[kind].add(tuple(e.digest for e in read_manifest(out)))
        return seconds

    def arrow(out: Path) -> None:
        with FeedWriter(out, "bench", "incremental") as w:
            w.add_arrow(table)

    jsonl, arrows = [], []
    for _ in range(ROUNDS):
        jsonl.append(write("jsonl", lambda out: build([str(src)], out, "bench", "incremental")))
        arrows.append(write("arrow", arrow))
    assert digests["arrow"] == digests["jsonl"]  # the same feed files
    ratio, cpu = ratios(jsonl, arrows)
    print(
        f"\nlarge records, {size / 1e6:.0f} MB of text: JSON Lines "
        f"{size / min(j[0] for j in jsonl) / 1e6:.0f} MB/s, add_arrow "
        f"{size / min(a[0] for a in arrows) / 1e6:.0f} MB/s -> {ratio:.2f}x "
        f"({cpu:.2f}x in CPU time)"
    )
    # In CPU time, which the other work on the shared machine moves far less than the time.
    assert cpu >= 1.0


@pytest.mark.parametrize("suffix", ["parquet", "arrow"])
def test_table_build_against_json_lines(tmp_path: Path, suffix: str) -> None:
    """The mixed corpus of bench_build (half text, half binary in base64, by bytes) as JSON
    Lines and as Parquet or an Arrow IPC file, built by `fastfeed build`."""
    src = tmp_path / "mixed.jsonl"
    make_corpus(src, CORPUS_MB * 1_000_000)
    table = tmp_path / f"mixed.{suffix}"
    to_table(src, table)
    runs = iter(range(1000))

    digests: dict[str, set[tuple[str, ...]]] = {"jsonl": set(), suffix: set()}

    def fastfeed(path: Path) -> tuple[float, float]:
        out = tmp_path / f"o{next(runs)}"
        seconds = timed(lambda: build([str(path)], out, "bench", "incremental"))
        digests[path.suffix[1:]].add(tuple(e.digest for e in read_manifest(out)))
        return seconds

    jsonl, tables = [], []
    for _ in range(ROUNDS):
        jsonl.append(fastfeed(src))
        tables.append(fastfeed(table))
    assert digests[suffix] == digests["jsonl"]  # the same feed files
    ratio, cpu = ratios(tables, jsonl)
    size = table.stat().st_size / 1e6
    print(
        f"\nmixed {CORPUS_MB} MB: JSON Lines {min(j[0] for j in jsonl):.2f} s, {suffix} "
        f"({size:.0f} MB) {min(p[0] for p in tables):.2f} s -> {ratio:.2f}x "
        f"({cpu:.2f}x in CPU time)"
    )
    # Parquet's decoding (snappy, and faulting in the memory it decompresses into) is CPU the
    # JSON Lines build does not spend, on cores the encoding already fills: on an idle machine
    # the time goes as the CPU time, which the other work on the shared machine moves far less.
    assert cpu <= 1.3


@pytest.mark.parametrize("suffix", ["parquet", "arrow"])
def test_memory_flat_on_a_large_table_file(tmp_path: Path, suffix: str) -> None:
    """Peak RSS building a Parquet or Arrow IPC file of FASTFEED_BENCH_MEMORY_MB (default 1000)
    against building a quarter of it, and the JSON Lines of the same records: what grows with
    the file is a leak; the rest is the pages of the row group or batch being read (mapped or
    decompressed, pointed into by the batches in flight) on top of what a JSON Lines build
    holds."""
    total = int(os.environ.get("FASTFEED_BENCH_MEMORY_MB", "1000")) * 1_000_000
    peaks = {}
    for size in (total // 4, total):
        src = tmp_path / f"{size}.jsonl"
        make_corpus(src, size, seed=11)
        to_table(src, tmp_path / f"{size}.{suffix}")
        for path in (src, tmp_path / f"{size}.{suffix}"):
            command = [sys.executable, "-m", "fastfeed", "build", str(path)]
            command += ["--datasource", "big", "--out", str(tmp_path / f"o{path.name}")]
            peaks[path.name] = run_measuring_peak(command) / 1e6
        src.unlink()
    quarter, whole = peaks[f"{total // 4}.{suffix}"], peaks[f"{total}.{suffix}"]
    print(
        f"\nbuilding {total / 4e9:.2f} GB as {suffix}: peak RSS {quarter:.0f} MB; "
        f"{total / 1e9:.1f} GB: {whole:.0f} MB (JSON Lines: {peaks[f'{total}.jsonl']:.0f} MB)"
    )
    assert whole < 1.25 * quarter
    assert whole <= 128  # issue 14: every build under 128 MB
