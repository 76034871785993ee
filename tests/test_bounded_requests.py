"""Appliances that misbehave on the way back: an answer of hundreds of MB, an answer that drips
a byte at a time. A push reads a few KB of an answer and gives a request a total deadline, so
neither holds it (or its memory) for ever. The appliance here is a raw HTTP server on loopback,
since the emulator answers properly."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from fastfeed import Outcome, PushSettings, push

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]


class RawAppliance:
    """Answers /getbacklogcount with 404 (no backlog polling) and any POST with `handler`,
    after reading the request's body; counts what it managed to send."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.sent = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        start = asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._server = self._loop.run_until_complete(start)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        self._server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = next(
                    (int(v) for k, _, v in (h.partition(": ") for h in lines[1:])
                     if k.lower() == "content-length"),
                    0,
                )  # fmt: skip
                await reader.readexactly(length)
                if lines[0].startswith("GET /getbacklogcount"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                await self.handler(writer)
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def __enter__(self) -> RawAppliance:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


@pytest.fixture
def appliance() -> Iterator[Callable[[Handler], RawAppliance]]:
    started: list[RawAppliance] = []

    def start(handler: Handler) -> RawAppliance:
        started.append(RawAppliance(handler).__enter__())
        return started[-1]

    yield start
    for one in started:
        one.__exit__()


def settings(port: int, **overrides: float) -> PushSettings:
    values = {"retries": 0, "timeout": 1.0, "deadline": 30.0, "backlog_interval": 0.05}
    return PushSettings(host="127.0.0.1", port=port, https=False, **{**values, **overrides})


def test_an_answer_of_hundreds_of_mb_is_read_no_further_than_a_few_kb(
    appliance: Callable[[Handler], RawAppliance], make_feed_set: Callable[..., Path]
) -> None:
    size = 400_000_000

    async def huge(writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\nSuccess".encode())
        block = b"x" * (1 << 20)
        while server.sent < size:
            writer.write(block)
            await writer.drain()
            server.sent += len(block)

    server = appliance(huge)
    summary = push(make_feed_set("docs", files=1), settings(server.port))

    [result] = summary.results
    assert result.outcome is Outcome.FAILED and result.message.startswith("Successxxx")
    assert len(result.message) <= 500
    # The client stopped reading and closed: the server could not push the rest into it.
    assert server.sent < 50_000_000


def test_an_answer_that_drips_is_cut_at_the_deadline(
    appliance: Callable[[Handler], RawAppliance], make_feed_set: Callable[..., Path]
) -> None:
    async def drip(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(300):  # a byte every 0.1 s: far inside the 1 s idle timeout
            writer.write(b"S")
            await writer.drain()
            server.sent += 1
            await asyncio.sleep(0.1)

    server = appliance(drip)
    started = time.monotonic()
    summary = push(make_feed_set("docs", files=1), settings(server.port, deadline=1.5))

    [result] = summary.results
    assert result.outcome is Outcome.FAILED
    assert "no complete answer within the deadline of 1.5 s" in result.message
    assert time.monotonic() - started < 10


def test_an_empty_answer_and_a_handshake_that_never_ends_say_what_happened(
    appliance: Callable[[Handler], RawAppliance], make_feed_set: Callable[..., Path]
) -> None:
    async def empty(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    server = appliance(empty)
    feeds = make_feed_set("docs", files=1)
    [result] = push(feeds, settings(server.port)).results
    assert result.message == "the appliance answered HTTP 200 with an empty body, not Success"

    # HTTPS to a server that never answers the TLS handshake (it waits for an HTTP request).
    silent = PushSettings(
        host="127.0.0.1", port=server.port, retries=0, connect_timeout=0.5, insecure=True
    )
    [result] = push(feeds, silent).results
    assert result.message.startswith(
        "ConnectTimeout: no connection within --connect-timeout (the TLS handshake included)"
    ), result.message
