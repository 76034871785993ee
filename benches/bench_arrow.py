"""Arrow benchmarks: `add_arrow` against `add_batch`, and a Parquet build against the JSON
Lines build of the same records, side by side in one run, rounds alternating (this VM's speed
moves by 10% within minutes).

Run: `pytest benches/bench_arrow.py -o python_files='bench_*.py' -s` (FASTFEED_BENCH_MB sets
the corpus size, default 200). Each test prints the ratio it measured.

Targets (issue 13): `add_arrow` 7x `add_batch` for 1 KB text records (2 million records/s on
two cores); a Parquet build within 1.3x the JSON Lines build's time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from bench_build import CORPUS_MB, _kb_records, make_corpus
from fastfeed import FeedWriter, read_manifest
from fastfeed.gsa.build import build

ROUNDS = 5


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def test_add_arrow_against_add_batch(tmp_path: Path) -> None:
    """The same 1 KB text records, as a pyarrow Table (made once: Arrow data is what a
    pipeline already holds) and as dicts in batches of 10,000 (new ones each round: CPython
    caches a str's UTF-8 form, and a pipeline hands over new strings every time)."""
    n = 200_000
    table = pa.Table.from_pylist(_kb_records(n, seed=1))
    runs = iter(range(1000))
    arrow, dicts = [], []

    def write(add: Callable[[FeedWriter], None]) -> float:
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
    ratio = min(dicts) / min(arrow)
    print(
        f"\nadd_arrow {n / min(arrow):,.0f} records/s, add_batch {n / min(dicts):,.0f} "
        f"records/s -> {ratio:.1f}x"
    )
    # The 7x target is not met: both calls are bound by the same encoding and hashing (see
    # PERFORMANCE.md); this guards what add_arrow saves, reading rows without Python.
    assert ratio >= 2


def test_parquet_build_against_json_lines(tmp_path: Path) -> None:
    """The mixed corpus of bench_build (half text, half binary in base64, by bytes) as JSON
    Lines and as Parquet (snappy, row groups of about 16 MB), built by `fastfeed build`."""
    src = tmp_path / "mixed.jsonl"
    make_corpus(src, CORPUS_MB * 1_000_000)
    rows = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    # Every field in every row: pyarrow makes the columns of the first row's fields only.
    fields = sorted({k for r in rows for k in r})
    table = pa.Table.from_pylist([{k: r.get(k) for k in fields} for r in rows])
    per_row = max(1, table.nbytes // table.num_rows)
    pq.write_table(table, tmp_path / "mixed.parquet", row_group_size=16_000_000 // per_row)
    del rows, table
    runs = iter(range(1000))

    sha256: dict[str, set[tuple[str, ...]]] = {"jsonl": set(), "parquet": set()}

    def fastfeed(path: Path) -> float:
        out = tmp_path / f"o{next(runs)}"
        seconds = timed(lambda: build([str(path)], out, "bench", "incremental"))
        sha256[path.suffix[1:]].add(tuple(e.sha256 for e in read_manifest(out)))
        return seconds

    jsonl, parquet = [], []
    for _ in range(ROUNDS):
        jsonl.append(fastfeed(src))
        parquet.append(fastfeed(tmp_path / "mixed.parquet"))
    assert sha256["parquet"] == sha256["jsonl"]  # the same feed files
    ratio = min(parquet) / min(jsonl)
    size = (tmp_path / "mixed.parquet").stat().st_size / 1e6
    print(
        f"\nmixed {CORPUS_MB} MB: JSON Lines {min(jsonl):.2f} s, Parquet ({size:.0f} MB) "
        f"{min(parquet):.2f} s -> {ratio:.2f}x"
    )
    assert ratio <= 1.3
