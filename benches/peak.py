"""Peak memory of a command run as a child process, for the memory benchmarks."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def high_water_mark(pid: int) -> int:
    """The child's peak RSS since its exec (VmHWM). Not getrusage's ru_maxrss: that one also
    counts the memory of the large benchmark process the child was forked from."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # it just ended
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_measuring_peak(command: list[str], status: int = 0) -> int:
    """Runs `command` to its end and returns its peak RSS in bytes; fails if the command does
    not end with `status`.

    VmHWM only grows, so sampling it until the child exits sees the peak."""
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while child.poll() is None:
        peak = max(peak, high_water_mark(child.pid))
        time.sleep(0.02)
    assert child.returncode == status, child.stderr.read() if child.stderr else ""
    return peak


def unlinked_bytes(pid: int) -> int:
    """What the files `pid` holds open without a name take (SQLite's temporary files)."""
    total = 0
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it just ended
        return 0
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                total += os.stat(f"/proc/{pid}/fd/{fd}").st_size
        except OSError:
            continue  # closed meanwhile
    return total


def _tree_bytes(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue  # removed meanwhile
    return total


def run_measuring_disk(command: list[str], directory: Path) -> int:
    """Runs `command` to its end and returns the most disk that `directory` (every file under
    it) and the command's unnamed temporary files took at once, sampled every 20 ms."""
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while child.poll() is None:
        peak = max(peak, _tree_bytes(directory) + unlinked_bytes(child.pid))
        time.sleep(0.02)
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""
    return peak
