"""Peak memory of a command run as a child process, for the memory benchmarks."""

from __future__ import annotations

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
