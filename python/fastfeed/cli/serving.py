"""What the server commands (`emulator`, `seedlist serve`) share: the extra they need, and
serving in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from types import FrameType

from fastfeed.errors import FastfeedError

#: The modules of the `server` extra (pyproject.toml) that these commands import.
SERVER_EXTRA = ("aiohttp", "trustme")


def require_server_extra(command: str) -> None:
    """The emulator, the demo and the seedlist server run on aiohttp and make certificates with
    trustme: the `server` extra, which a pipeline that only builds and pushes does without."""
    for module in SERVER_EXTRA:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            # Named here: an ImportError need not name its module (a broken install's does not).
            raise FastfeedError(
                f"`fastfeed {command}` needs {module}, of the server extra: pip install "
                f"'fastfeed[server]' ({module} cannot be imported: {exc})"
            ) from None


def serve_until_stopped(banner: Callable[[], None]) -> None:
    """Prints the banner, then waits for Ctrl-C or SIGTERM (the caller stops its server)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        banner()
        stop.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
