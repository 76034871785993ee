"""Deflate implementations at level 1 on real files (issue 14): ISA-L's igzip, which the core
uses (compiled in through the isal-sys crate), against libdeflate, which it used before, and
zlib-ng, each through its Python binding (one call a file, as the core makes one stream a
content), on the same files as bench_files.py. Every output must inflate with plain zlib.

Run: `pip install '.[bench]'`, then
`pytest benches/bench_deflate.py -o python_files='bench_*.py' -s`. What was found and decided
is in PERFORMANCE.md.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

import deflate
import pytest
import zlib_ng.zlib_ng as zng
from bench_files import TREE_MB, copy_tree
from isal import isal_zlib

#: zlib streams, level 1, whole buffer in one call.
IMPLEMENTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "libdeflate": lambda data: deflate.zlib_compress(data, 1),
    "isa-l igzip": lambda data: isal_zlib.compress(data, 1),
    "zlib-ng": lambda data: zng.compress(data, 1),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    tree = tmp_path_factory.mktemp("deflate")
    copy_tree(tree, TREE_MB * 1_000_000)
    # What the core deflates: not what is already compressed (gzip, zip) or tiny.
    found = [p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()]
    return [d for d in found if len(d) >= 128 and d[:2] != b"\x1f\x8b" and d[:4] != b"PK\x03\x04"]


def test_level_1_implementations(files: list[bytes]) -> None:
    total = sum(map(len, files))
    results = {}
    for name, compress in IMPLEMENTATIONS.items():
        best, size = float("inf"), 0
        for _ in range(3):
            start = time.perf_counter()
            outs = [compress(d) for d in files]
            best = min(best, time.perf_counter() - start)
            size = sum(map(len, outs))
        assert all(zlib.decompress(o) == d for o, d in zip(outs, files, strict=True)), name
        results[name] = (total / best / 1e6, size / total)
    print(f"\n{len(files):,} files, {total / 1e6:.0f} MB, one core:")
    for name, (rate, ratio) in results.items():
        print(f"  {name}: {rate:.0f} MB/s, output {ratio:.1%} of the input")
    ours_rate, ours_ratio = results["isa-l igzip"]
    for name, (rate, ratio) in results.items():
        if name == "isa-l igzip":
            continue
        print(
            f"  isa-l igzip against {name}: {ours_rate / rate:.2f}x the speed, "
            f"{ours_ratio / ratio:.2f}x the size"
        )
    # Issue 14's rule for keeping ISA-L: more than 15% faster than libdeflate at a similar size.
    rate, ratio = results["libdeflate"]
    assert ours_rate > 1.15 * rate
    assert ours_ratio < 1.1 * ratio
    # The core's deflate must stay ahead of what the plain-Python peer could use.
    plain = time.perf_counter()
    for d in files:
        zlib.compress(d, 1)
    plain = total / (time.perf_counter() - plain) / 1e6
    print(f"  plain zlib: {plain:.0f} MB/s")
    assert ours_rate > plain
