"""One-line progress display for long jobs: live on a terminal, silent otherwise.

Scripts and CI logs get no carriage-return noise; the final summary is the caller's job.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Redraws a single status line at most every `interval` seconds."""

    def __init__(
        self, stream: TextIO | None = None, *, interval: float = 0.2, enabled: bool | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = self._stream.isatty() if enabled is None else enabled
        self._interval = interval
        self._last = 0.0
        self._width = 0
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, text: str, *, force: bool = False) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        pad = max(0, self._width - len(text))
        self._stream.write("\r" + text + " " * pad)
        self._stream.flush()
        self._width = len(text)

    def close(self) -> None:
        """Ends the status line so that what follows starts on a fresh line."""
        if self._enabled and self._width:
            self._stream.write("\n")
            self._stream.flush()
            self._width = 0


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 file`, `2 files`, `1,000 records`, `1 retry`: the numbers a summary shows (`nouns`
    for a plural not made with s)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {nouns or noun + 's'}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
