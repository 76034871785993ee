"""Sync benchmarks: finding what changed in a large snapshot, against the plain-Python way.

Run: `pytest benches/bench_sync.py -o python_files='bench_*.py' -s`. FASTFEED_BENCH_SYNC_RECORDS
sets the snapshot's records (default 1,000,000 of about 1 KB), FASTFEED_BENCH_SYNC_STATE the
URLs of the large state for the memory test (default 10,000,000 small records).

The peer is what a user writes: every line parsed with json, made canonical with sorted keys,
hashed with hashlib, and looked up in a dict of the previous fingerprints loaded from SQLite.

Targets (issue 12): an unchanged 1 M-record snapshot found to have nothing to send in at most
3 s; with 1% changed, only that 1% built and pushed; peak RSS of a sync over a 10 M-URL state at
most 300 MB, and the state's size per URL reported; fingerprinting at most 10% of a plain
build's time (the writer fingerprints as it encodes: a build with fingerprints against the same
build without, rounds alternating); a Parquet snapshot compared against its JSON Lines (side by
side, rounds alternating); and the first sync of the snapshot (one pass) against a
plain build and push of it, the appliance emulated in a process of its own (`bench_push.py`);
and the disk a first sync's state takes at its peak against what it keeps.
The machine may be shared: each comparison alternates its rounds, reports min and median and
the load, and asserts ratios.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from bench_push import Appliance, _settings, appliance, workdir  # noqa: F401 (fixtures)
from fastfeed import FeedWriter, PushSettings, build, sync
from fastfeed.emulator import Emulator
from fastfeed.gsa.push import push
from fastfeed.sets.inputs import MappedInput
from fastfeed.sets.snapshot import Snapshot
from fastfeed.sets.state import SyncState
from peak import run_measuring_disk, run_measuring_peak

RECORDS = int(os.environ.get("FASTFEED_BENCH_SYNC_RECORDS", "1000000"))
STATE_URLS = int(os.environ.get("FASTFEED_BENCH_SYNC_STATE", "10000000"))
WORDS = [
    "the",
    "search",
    "appliance",
    "feeds",
    "content",
    "metadata",
    "crawler",
    "index",
    "of",
    "and",
]
TARGET = "bench:19902 datasource bench"


def make_snapshot(path: Path, records: int, size: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choices(WORDS, k=size // 6 + 1))
    with path.open("wb") as f:
        for i in range(records):
            body = text[i % 97 :][: size - 20] + str(i)
            record = {"url": f"http://docs.example.com/d/{i}", "content": body,
                      "metadata": {"team": "eng", "n": str(i)}}  # fmt: skip
            f.write(orjson.dumps(record) + b"\n")


def make_table(path: Path, records: int, size: int, seed: int = 1) -> None:
    """The records of `make_snapshot` as a Parquet file (snappy, pyarrow's defaults), written a
    row group of 20,000 at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    text = " ".join(rng.choices(WORDS, k=size // 6 + 1))
    team = pa.struct([("team", pa.string()), ("n", pa.string())])
    schema = pa.schema([("url", pa.string()), ("content", pa.string()), ("metadata", team)])
    with pq.ParquetWriter(path, schema) as writer:
        for first in range(0, records, 20_000):
            rows = range(first, min(first + 20_000, records))
            columns = {
                "url": [f"http://docs.example.com/d/{i}" for i in rows],
                "content": [text[i % 97 :][: size - 20] + str(i) for i in rows],
                "metadata": [{"team": "eng", "n": str(i)} for i in rows],
            }
            writer.write_table(pa.table(columns, schema=schema))


def accept_everything(snapshot: Path, state: Path, target: str = TARGET) -> None:
    """A state as if the appliance had accepted every record of `snapshot`."""
    with SyncState(state, target) as st, tempfile.TemporaryDirectory(dir=state.parent) as work:
        snap = Snapshot([str(snapshot)], None, Path(work), skip=work)
        try:
            snap.read(st)
            st._db.execute("COMMIT")
            st._db.execute("INSERT INTO documents SELECT url, fingerprint, 0 FROM temp.snapshot")
        finally:
            snap.close()
            st.end_snapshot()


def plain_python_diff(snapshot: Path, state: Path) -> tuple[int, int]:
    """The afternoon sync's comparison: (records to send, records unchanged)."""
    db = sqlite3.connect(state)
    held = dict(db.execute("SELECT url, fingerprint FROM documents"))
    db.close()
    send = same = 0
    with snapshot.open("rb") as f:
        for line in f:
            record = json.loads(line)
            canonical = json.dumps(record, sort_keys=True, ensure_ascii=False).encode()
            fp = hashlib.sha256(canonical).hexdigest()[:32]
            old = held.pop(record["url"], None)
            if old == fp:
                same += 1
            else:
                send += 1
    return send + len(held), same


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sync") / "snapshot.jsonl"
    make_snapshot(path, RECORDS, 1000)
    return path


def test_an_unchanged_snapshot_is_found_unchanged(
    snapshot: Path, tmp_path: Path, benchmark: Any
) -> None:
    state = tmp_path / "bench.state"
    accept_everything(snapshot, state)
    settings = PushSettings(host="bench")  # never reached: nothing is to be sent

    def ours() -> Any:
        return sync([str(snapshot)], state, "bench", settings, out_dir=tmp_path / "never")

    summary = benchmark.pedantic(ours, rounds=3, iterations=1)
    ours_s = benchmark.stats.stats.min
    assert summary.pushed is None and summary.diff.unchanged == RECORDS

    # The peer's fingerprints are not ours: give it a state of its own to compare with.
    peer_state = tmp_path / "peer.state"
    db = sqlite3.connect(peer_state)
    db.execute("CREATE TABLE documents (url TEXT PRIMARY KEY, fingerprint TEXT)")
    with snapshot.open("rb") as f:
        rows = []
        for line in f:
            r = json.loads(line)
            canonical = json.dumps(r, sort_keys=True, ensure_ascii=False).encode()
            rows.append((r["url"], hashlib.sha256(canonical).hexdigest()[:32]))
    db.executemany("INSERT INTO documents VALUES (?, ?)", rows)
    db.commit()
    db.close()
    del rows
    started = time.perf_counter()
    assert plain_python_diff(snapshot, peer_state) == (0, RECORDS)
    peer_s = time.perf_counter() - started
    size = snapshot.stat().st_size
    print(
        f"\nunchanged snapshot, {RECORDS:,} records ({size / 1e9:.2f} GB): fastfeed "
        f"{ours_s:.2f} s, plain Python {peer_s:.2f} s -> {peer_s / ours_s:.1f}x; state "
        f"{state.stat().st_size / RECORDS:.0f} bytes per URL"
    )
    benchmark.extra_info.update(seconds=ours_s, speedup=peer_s / ours_s)
    # The issue's 3 s were met at 4.8x the peer on the machine they were set on; a ratio
    # measured in this run holds on a slower machine of the same kind as well.
    assert peer_s / ours_s >= 4


def test_one_percent_changed_sends_only_that(
    snapshot: Path, tmp_path: Path, tls_files: tuple[Path, Path, Path]
) -> None:
    state = tmp_path / "bench.state"
    ca, cert, key = tls_files
    emulator = Emulator(data_dir=tmp_path / "emulator", tls=(cert, key)).start()
    try:
        settings = PushSettings(host="127.0.0.1", port=emulator.port, cacert=str(ca))
        accept_everything(snapshot, state, f"127.0.0.1:{emulator.port} datasource bench")
        changed = tmp_path / "changed.jsonl"
        every = 100
        with snapshot.open("rb") as src, changed.open("wb") as out:
            for i, line in enumerate(src):
                if i % every == 0:
                    record = orjson.loads(line)
                    record["content"] += " changed"
                    line = orjson.dumps(record) + b"\n"
                out.write(line)
        started = time.perf_counter()
        summary = sync([str(changed)], state, "bench", settings, out_dir=tmp_path / "sent")
        seconds = time.perf_counter() - started
        emulator.wait_idle(timeout=120)
        received = sum(p.records for p in emulator.pushes())
    finally:
        emulator.stop()
    assert summary.ok and summary.diff.changed == RECORDS // every
    assert received == RECORDS // every
    print(f"\n1% of {RECORDS:,} changed: {received:,} records built and pushed in {seconds:.2f} s")


def test_a_parquet_snapshot_is_compared_about_as_fast_as_its_json_lines(
    snapshot: Path, tmp_path: Path
) -> None:
    """The same records, unchanged, from Parquet and from JSON Lines (rounds alternating): the
    Parquet file's rows are made JSON in memory, a batch at a time, never copied to disk."""
    table = tmp_path / "snapshot.parquet"
    make_table(table, RECORDS, 1000)
    state = tmp_path / "bench.state"
    accept_everything(snapshot, state)
    settings = PushSettings(host="bench")  # never reached: nothing is to be sent

    def unchanged(source: Path) -> None:
        summary = sync([str(source)], state, "bench", settings, out_dir=tmp_path / "never")
        assert summary.pushed is None and summary.diff.unchanged == RECORDS

    load = os.getloadavg()[0]
    lines, parquet, lines_cpu, parquet_cpu = _alternate(
        5, lambda: unchanged(snapshot), lambda: unchanged(table)
    )
    best = min(parquet) / min(lines)
    print(
        f"\nunchanged snapshot of {RECORDS:,} records, JSON Lines "
        f"{snapshot.stat().st_size / 1e9:.2f} GB against Parquet "
        f"{table.stat().st_size / 1e6:.0f} MB, 5 rounds alternating, load {load:.1f} to "
        f"{os.getloadavg()[0]:.1f}: "
        f"{_describe('JSON Lines', lines, lines_cpu)}; {_describe('Parquet', parquet, parquet_cpu)}"
        f"; ratio {best:.2f}x (min), {statistics.median(parquet) / statistics.median(lines):.2f}x "
        f"(median), CPU {min(parquet_cpu) / min(lines_cpu):.2f}x"
    )
    # Measured 1.30x (PERFORMANCE.md); 1.71x when the rows were first copied to disk as JSON.
    assert best <= 1.5


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    paths = tuple(tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(paths[0]))
    server.cert_chain_pems[0].write_to_path(str(paths[1]))
    server.private_key_pem.write_to_path(str(paths[2]))
    return paths  # type: ignore[return-value]


def test_peak_memory_of_a_sync_over_a_large_state(tmp_path: Path) -> None:
    src = tmp_path / "large.jsonl"
    make_snapshot(src, STATE_URLS, 40, seed=3)
    state = tmp_path / "large.state"
    started = time.perf_counter()
    accept_everything(src, state)
    filled = time.perf_counter() - started
    command = [sys.executable, "-m", "fastfeed", "sync", str(src), "--datasource", "bench",
               "--state", str(state), "--host", "bench", "--port", "19902"]  # fmt: skip
    started = time.perf_counter()
    peak_mb = run_measuring_peak(command) / 1e6
    seconds = time.perf_counter() - started
    per_url = state.stat().st_size / STATE_URLS
    print(
        f"\nsync over a state of {STATE_URLS:,} URLs: peak RSS {peak_mb:.0f} MB, {seconds:.1f} s "
        f"(filling the state took {filled:.1f} s); state {per_url:.0f} bytes per URL"
    )
    assert peak_mb <= 300


def test_a_first_sync_keeps_each_url_on_disk_about_once_at_a_time(
    tmp_path: Path,
    appliance: Appliance,  # noqa: F811 (a fixture)
) -> None:
    src = tmp_path / "small.jsonl"
    make_snapshot(src, RECORDS, 40, seed=4)
    directory = tmp_path / "state"
    directory.mkdir()
    state = directory / "bench.state"
    command = [sys.executable, "-m", "fastfeed", "sync", str(src), "--datasource", "bench",
               "--state", str(state), "--host", "127.0.0.1", "--port", str(appliance.port),
               "--cacert", str(appliance.ca), "--backlog-high", "1000000",
               "--out", str(tmp_path / "sent")]  # fmt: skip
    started = time.perf_counter()
    peak = run_measuring_disk(command, directory)
    seconds = time.perf_counter() - started
    kept = state.stat().st_size
    print(
        f"\nfirst sync of {RECORDS:,} small records: the state's files, its work directory and "
        f"SQLite's temporary files peaked at {peak / 1e6:.0f} MB at once, {peak / kept:.2f}x "
        f"the {kept / 1e6:.0f} MB state left; {seconds:.1f} s, load {os.getloadavg()[0]:.1f}"
    )
    # Three copies of each URL at once were 3.1x (PERFORMANCE.md).
    assert peak <= 2 * kept


def _build(snapshot: Path, out: Path, fingerprints: bool) -> int:
    """Builds the snapshot as `fastfeed build` drives its writer (each chunk started before
    the last one is taken); with `fingerprints`, the writer fingerprints every record as it
    encodes it and the rows a sync stores are taken after each chunk. Returns how many."""
    taken = 0
    with FeedWriter(out, "bench", "incremental") as writer, snapshot.open("rb") as f:
        if fingerprints:
            writer.fingerprint_records()
        mapped = MappedInput(f, str(snapshot))
        for started, chunk in enumerate(mapped.chunks()):
            writer.start_jsonl(chunk)
            if started:
                writer.wait_jsonl()
                taken += writer.take_fingerprints()[3]
        writer.wait_jsonl()
        taken += writer.take_fingerprints()[3]
        mapped.close()
    return taken


def _alternate(
    rounds: int, a: Callable[[], object], b: Callable[[], object]
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Times `a` and `b` in alternating rounds (a b, b a, ...): on a shared machine, load
    varies more from minute to minute than the two differ. Returns the wall times of each,
    then the CPU times of this process (every thread) in each."""
    times: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])
    for n in range(rounds):
        for which in (0, 1) if n % 2 == 0 else (1, 0):
            started, cpu = time.perf_counter(), time.process_time()
            (a, b)[which]()
            times[which].append(time.perf_counter() - started)
            times[2 + which].append(time.process_time() - cpu)
    return times


def _describe(name: str, seconds: list[float], cpu: list[float]) -> str:
    return (
        f"{name} min {min(seconds):.2f} s, median {statistics.median(seconds):.2f} s "
        f"(CPU min {min(cpu):.2f} s)"
    )


def test_fingerprints_cost_at_most_a_tenth_of_a_build(snapshot: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"

    def run(fingerprints: bool) -> None:
        shutil.rmtree(out, ignore_errors=True)
        assert _build(snapshot, out, fingerprints) == (RECORDS if fingerprints else 0)

    load = os.getloadavg()[0]
    plain, fingerprinted, plain_cpu, fingerprinted_cpu = _alternate(
        7, lambda: run(False), lambda: run(True)
    )
    best = min(fingerprinted) / min(plain)
    typical = statistics.median(fingerprinted) / statistics.median(plain)
    cpu = min(fingerprinted_cpu) / min(plain_cpu)
    print(
        f"\nbuild of {RECORDS:,} records ({snapshot.stat().st_size / 1e9:.2f} GB), 7 rounds "
        f"alternating, load {load:.1f} to {os.getloadavg()[0]:.1f}: "
        f"{_describe('plain', plain, plain_cpu)}; "
        f"{_describe('with fingerprints', fingerprinted, fingerprinted_cpu)}; "
        f"ratio {best:.3f}x (min), {typical:.3f}x (median), CPU {cpu:.3f}x; target 1.10x"
    )
    assert best <= 1.10


def test_a_first_sync_costs_what_a_build_and_a_push_do(
    snapshot: Path,
    tmp_path: Path,
    appliance: Appliance,  # noqa: F811 (a fixture)
) -> None:
    settings = _settings(appliance)
    n = iter(range(1000))

    def build_and_push() -> None:
        out = tmp_path / f"built-{next(n)}"
        build([str(snapshot)], out, "bench", "incremental")
        assert push([out], settings).ok
        shutil.rmtree(out)

    def first_sync() -> None:
        out, state = tmp_path / f"sync-{next(n)}", tmp_path / f"{next(n)}.state"
        summary = sync([str(snapshot)], state, "bench", settings, out_dir=out)
        assert summary.ok and summary.diff.new == RECORDS
        shutil.rmtree(out)
        state.unlink()

    load = os.getloadavg()[0]
    plain, synced, plain_cpu, synced_cpu = _alternate(3, build_and_push, first_sync)
    best = min(synced) / min(plain)
    typical = statistics.median(synced) / statistics.median(plain)
    print(
        f"\nfirst sync of {RECORDS:,} records, 3 rounds alternating, load {load:.1f} to "
        f"{os.getloadavg()[0]:.1f}: {_describe('build + push', plain, plain_cpu)}; "
        f"{_describe('first sync', synced, synced_cpu)}; ratio {best:.3f}x (min), "
        f"{typical:.3f}x (median)"
    )
    # Over a build and a push, a first sync stores each URL and fingerprint in its state twice
    # (the snapshot's table, then what the appliance holds): a guard against regressions, at
    # what was measured (PERFORMANCE.md), not a target of the issue's.
    assert best <= 1.75
