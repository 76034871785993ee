"""What the servers fastfeed runs for synchronous callers (the emulator, the seedlist server:
tests and the command line) share: an event loop in a thread of their own (`LoopThread`), and
a listener whose port 0 resolves to a port they can report (`listen`)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running in a daemon thread named `name`, from its creation until
    `stop`; `call` runs a coroutine on it from another thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()
            # Ends the executor threads, and with them the SQLite connections they hold, so
            # that a stopped server holds no files.
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the loop and returns its result, waiting at most `timeout` seconds."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, cleanup: Callable[[], Coroutine[Any, Any, object]], timeout: float) -> None:
        """Runs `cleanup()` on the loop (if it still runs), stops it and joins its thread,
        waiting at most `timeout` seconds for each."""
        if self.loop.is_running():
            try:
                self.call(cleanup(), timeout)
            finally:  # a cleanup that failed or ran out of time still stops the loop
                self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)


async def listen(
    runner: web.AppRunner, host: str, port: int, context: ssl.SSLContext | None
) -> int:
    """Serves `runner`'s app on `host`:`port`, over TLS with `context`, and returns the port: on
    a socket of its own, so that port 0 resolves to the port the system picked."""
    sock = socket.create_server((host, port), reuse_port=False)
    await web.SockSite(runner, sock, ssl_context=context).start()
    bound: int = sock.getsockname()[1]
    return bound
