"""The scaling curve of issue 14: `fastfeed build` of 1, 4 and 16 GB of JSON Lines and of 1 and
4 GB of files named by `content_path`, time per GB and peak RSS of each, as a Markdown table
for PERFORMANCE.md. Run by hand, never on CI (the corpora take tens of GB):

    python benches/scaling.py [--jsonl-gb 1,4,16] [--path-gb 1,4] [--rounds 3] [--dir /tmp]

On a shared machine, make the corpora first and keep them, then time one size at a time, so that
the timed runs are short and do not include making the corpora:

    python benches/scaling.py --keep /tmp/scaling --make-only
    python benches/scaling.py --keep /tmp/scaling --jsonl-gb 16 --path-gb ''

The JSON Lines are the mixed corpus of `bench_build.py` (half text with markup, a quarter
incompressible and a quarter compressible binary, by bytes): a 1 GB corpus is made once and the
larger sizes repeat it. The by-path lines are `bench_files.py`'s (a copy of this machine's own
files, 92% of the bytes named by path), repeated until they name the size asked: the repeats
read the same files again, from the page cache. Each input is read once before its builds, so
that every size starts from a warm cache as far as memory allows, and the corpus just written
is synced to the disk first, so that no build pays for writing it back. Each size is built
`--rounds` times, the sizes given together in alternating rounds (give the largest alone where
they do not fit in memory together), each build in a process of its own (its output deleted
before the next), and the table gives the fastest round's wall and CPU time: what other work on
the machine does only adds to a build's time, so the fastest round is the build's own (builds
of 1 GB by path, about 2 s, varied by up to 15% between rounds at a load of 2 to 6). Beside it,
the build's own time (the `seconds` it reports) and what its process's start and exit took
besides (the Python interpreter and the imports): a fixed cost of every build, which weighs
more on a short one. The builds run as an installed fastfeed does, from compiled bytecode (pip
compiles the modules when it installs them; PYTHONDONTWRITEBYTECODE, if set, would have every
build compile them again). Targets: time linear within 10%, memory flat (and under 128 MB).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_build import make_corpus  # noqa: E402
from bench_files import copy_tree, write_jsonl  # noqa: E402
from peak import high_water_mark  # noqa: E402

GB = 1_000_000_000


def repeat(source: Path, dest: Path, times: int) -> None:
    """`dest` is `source` `times` times over, copied in the kernel."""
    size = source.stat().st_size
    with source.open("rb") as src, dest.open("wb") as out:
        for _ in range(times):
            copied = 0
            while copied < size:
                copied += os.copy_file_range(src.fileno(), out.fileno(), size - copied, copied)


def made(path: Path, make: Callable[[Path], object]) -> Path:
    """`path`, made by `make` unless an earlier run kept it; under a temporary name until it is
    whole, so that an interrupted run leaves no half-made corpus to be taken for one."""
    if not path.exists():
        part = path.with_name(path.name + ".part")
        make(part)
        part.rename(path)
    return path


def read_once(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(1 << 24):
            pass


def best_of(
    rounds: int, sources: list[Path], out: Path, env: dict[str, str]
) -> list[tuple[float, float, float, int]]:
    """For each of `sources`, the least wall, CPU and own seconds of `rounds` builds (see
    `timed_build`) and their highest peak RSS. Each round builds every source once, so that
    what changes on the machine meanwhile (other work, memory pressure) falls on all alike."""
    os.sync()
    runs = [[timed_build(source, out, env) for source in sources] for _ in range(rounds)]
    best = []
    for i in range(len(sources)):
        walls, cpus, owns, peaks = zip(*(run[i] for run in runs), strict=True)
        best.append((min(walls), min(cpus), min(owns), max(peaks)))
    return best


def timed_build(source: Path, out: Path, env: dict[str, str]) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, the build's own seconds (what it reports: its process's start
    and exit left out) and peak RSS of `fastfeed build source` in a process of its own."""
    command = [sys.executable, "-m", "fastfeed", "build", str(source), "--json"]
    command += ["--datasource", "scaling", "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = 0
    ended = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not ended.wait(0.02):
            peak = max(peak, high_water_mark(child.pid))

    # Sampled beside the wait, not between polls, which added up to the sampling period to
    # every wall time.
    watcher = threading.Thread(target=watch)
    watcher.start()
    stdout, stderr = child.communicate()
    wall = time.perf_counter() - started
    ended.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise SystemExit(f"the build of {source} failed: {stderr.decode()}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    shutil.rmtree(out)
    return wall, cpu, json.loads(stdout)["seconds"], peak


def row(label: str, gb: float, wall: float, cpu: float, own: float, peak: int) -> str:
    load = os.getloadavg()[0]
    return (
        f"| {label}, {gb:.2f} GB | {wall / gb:.2f} s; {cpu / gb:.2f} s | {own / gb:.2f} s | "
        f"{wall - own:.2f} s | {peak / 1e6:.0f} MB | {load:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jsonl-gb", default="1,4,16", help="sizes of JSON Lines, in GB")
    parser.add_argument("--path-gb", default="1,4", help="sizes of files named by path, in GB")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where corpora are made")
    parser.add_argument("--rounds", type=int, default=3, help="builds of each size")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="make the corpora in DIR and keep them there (an earlier run's are used again) "
        "instead of in a temporary directory deleted after",
    )
    parser.add_argument(
        "--make-only", action="store_true", help="make the corpora (with --keep) and time nothing"
    )
    args = parser.parse_args()
    if args.make_only and not args.keep:
        parser.error("--make-only needs --keep DIR, where the corpora stay for the timed runs")
    rows = [
        "| input | time per GB (wall; CPU) | the build's own, per GB | start and exit | peak RSS "
        "| load |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    with contextlib.ExitStack() as stack:
        if args.keep:
            root = Path(args.keep)
            root.mkdir(parents=True, exist_ok=True)
        else:
            tmp = tempfile.TemporaryDirectory(dir=args.dir, prefix="fastfeed-scaling-")
            root = Path(stack.enter_context(tmp))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        # The bytecode of what a build imports, compiled before the first timed build.
        subprocess.run(
            [sys.executable, "-m", "fastfeed", "build", "--help"],
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        jsonl_sizes = [int(s) for s in args.jsonl_gb.split(",") if s]
        path_sizes = [int(s) for s in args.path_gb.split(",") if s]
        base = root / "base.jsonl"
        if jsonl_sizes:  # each corpus is made only when asked for: it takes tens of seconds
            made(base, lambda part: make_corpus(part, GB, seed=5))
        jsonl = [
            made(root / f"mixed-{size}.jsonl", functools.partial(repeat, base, times=size))
            for size in jsonl_sizes
        ]
        if jsonl and not args.make_only:
            # The sizes given together alternate, as the by-path ones do: give them one at a
            # time where they do not fit in memory together.
            for source in jsonl:
                read_once(source)
            for source, best in zip(
                jsonl, best_of(args.rounds, jsonl, root / "out", env), strict=True
            ):
                rows.append(row("JSON Lines, mixed corpus", source.stat().st_size / GB, *best))
                print(rows[-1], flush=True)
        if not args.keep:
            for source in jsonl:
                source.unlink()
            base.unlink(missing_ok=True)
        tree = root / "tree"
        lines = root / "tree.jsonl"
        if path_sizes:
            made(tree, lambda part: copy_tree(part, 360_000_000))
            _, share = write_jsonl(tree, lines)
            named = share * sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
        # The by-path sizes fit in memory together: their rounds alternate.
        sources, labels = [], []
        for size in path_sizes:
            times = max(1, round(size * GB / named))
            sources.append(root / f"path-{size}.jsonl")
            repeat(lines, sources[-1], times)
            labels.append((f"by path (the tree {times} times)", named * times / GB))
        if path_sizes and not args.make_only:
            for path in sorted(tree.rglob("*")):
                if path.is_file():
                    read_once(path)
            for (label, gb), best in zip(
                labels, best_of(args.rounds, sources, root / "out", env), strict=True
            ):
                rows.append(row(label, gb, *best))
                print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
