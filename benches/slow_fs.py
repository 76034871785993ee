"""Builds from files behind a slow file system: a passthrough FUSE mount (fusepy) that waits on
every open and every read request, as a network file system's round trips do (issue 14).

Not a pytest benchmark, and not run by CI: it needs root (FUSE, dropping the page cache) and
fusepy (`pip install fusepy`, Debian's `fuse` package for `fusermount`). Run:

    python benches/slow_fs.py [--source /usr/share/doc] [--latency-ms 1] [--rounds 2] \
        [--variant NAME=PYTHONPATH ...]

The files of `--source` (Debian's documentation by default: gzipped changelogs and copyright
texts) are named by `content_path` under the mount in JSON Lines. Each round reads them all with
`cat`, then builds them with each variant (a directory whose `fastfeed` package is imported,
this checkout's by default), each in a process of its own, from a cold page cache and then a
warm one. It prints the wall time, the build's CPU time and the CPU time the file system's own
process spent serving it, with the load average.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def serve(source: str, mountpoint: str, latency: float) -> None:
    """Mounts `source` at `mountpoint`, read-only, waiting `latency` seconds on every open and
    read request; returns when unmounted."""
    from fuse import FUSE, FuseOSError, Operations  # type: ignore[import-untyped]

    class Slow(Operations):  # type: ignore[misc]
        def _full(self, path: str) -> str:
            return os.path.join(source, path.lstrip("/"))

        def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
            try:
                st = os.lstat(self._full(path))
            except OSError as exc:
                raise FuseOSError(exc.errno) from None
            keys = ("st_mode", "st_size", "st_uid", "st_gid", "st_nlink", "st_mtime", "st_atime")
            return {k: int(getattr(st, k)) for k in (*keys, "st_ctime")}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._full(path))]

        def readlink(self, path: str) -> str:
            return os.readlink(self._full(path))

        def open(self, path: str, flags: int) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EROFS)
            time.sleep(latency)
            return os.open(self._full(path), os.O_RDONLY)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            time.sleep(latency)
            return os.pread(fh, size, offset)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

    FUSE(Slow(), mountpoint, foreground=True, ro=True, nothreads=False)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


BUILD = """
import resource, sys, time
from fastfeed.gsa.build import build
start = time.perf_counter()
build([sys.argv[1]], sys.argv[2], "slow")
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(wall, usage.ru_utime + usage.ru_stime)
"""


def timed(server: int, run: list[str], env: dict[str, str] | None = None) -> tuple[float, ...]:
    """Runs `run`; returns its wall seconds (its own count if it prints one, with its CPU), and
    the file system's CPU seconds meanwhile."""
    before = cpu_seconds(server)
    start = time.perf_counter()
    done = subprocess.run(run, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    served = cpu_seconds(server) - before
    printed = [float(x) for x in done.stdout.split()]
    return (*printed, served) if printed else (wall, float("nan"), served)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="/usr/share/doc")
    parser.add_argument("--latency-ms", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=PYTHONPATH of a fastfeed to build with (repeatable; default: this checkout)",
    )
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve, args.latency_ms / 1000)
        return
    variants = dict(v.split("=", 1) for v in args.variant) or {"this": str(HERE.parent / "python")}
    work = Path(tempfile.mkdtemp(prefix="slowfs-"))
    mount = work / "mnt"
    mount.mkdir()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", args.source, str(mount)]
        + ["--latency-ms", str(args.latency_ms)]
    )
    try:
        for _ in range(100):
            if os.path.ismount(mount):
                break
            time.sleep(0.05)
        files = [
            os.path.join(d, n)
            for d, _, names in os.walk(mount)
            for n in sorted(names)
            if os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n))
        ]
        size = sum(os.path.getsize(f) for f in files)
        jsonl = work / "slow.jsonl"
        with jsonl.open("w") as out:
            for n, f in enumerate(files):
                record = {"url": f"http://slow.example.com/{n}", "content_path": f}
                out.write(json.dumps(record) + "\n")
        listing = work / "files.txt"
        listing.write_text("\0".join(files))
        print(
            f"{len(files):,} files, {size / 1e6:.0f} MB, through FUSE waiting "
            f"{args.latency_ms:g} ms on each open and read"
        )
        cat = ["sh", "-c", f"xargs -0 cat < {listing} > /dev/null"]
        for round_ in range(args.rounds):
            drop_caches()
            wall, _, served = timed(server.pid, cat)
            print(
                f"round {round_ + 1}: cat, cold: {wall:.2f} s, the file system {served:.2f} s CPU"
            )
            for name, path in variants.items():
                env = {**os.environ, "PYTHONPATH": path}
                for cache in ("cold", "warm"):
                    if cache == "cold":
                        drop_caches()
                    out = work / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    command = [sys.executable, "-c", BUILD, str(jsonl), str(out)]
                    wall, cpu, served = timed(server.pid, command, env)
                    print(
                        f"round {round_ + 1}: {name}, {cache}: {wall:.2f} s ({cpu:.2f} s CPU), "
                        f"the file system {served:.2f} s CPU; load average "
                        + " ".join(f"{x:.1f}" for x in os.getloadavg())
                    )
    finally:
        subprocess.run(["fusermount", "-u", str(mount)], check=False)
        server.wait(timeout=30)
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
