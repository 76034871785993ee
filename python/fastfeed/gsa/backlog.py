"""The appliance's feed backlog (`GET /getbacklogcount`) and the gate it drives.

The count is the number of feed files the appliance has accepted but its feeder has not yet
processed (connectors' files included). The guide offers it "to regulate the feed submission
rate": a push that outruns the feeder only fills the appliance's disk until it answers
"insufficient disk space".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import httpx

from fastfeed.delivery.exchange import Answer, exchange
from fastfeed.delivery.retry import transport_problem
from fastfeed.delivery.settings import PushSettings
from fastfeed.errors import BacklogError, FastfeedError
from fastfeed.gsa import feedergate
from fastfeed.gsa.feedergate import TLS_HINT, UNAUTHORIZED_HELP

PATH = "/getbacklogcount"


def _parse(answer: Answer) -> int | None:
    """The count, or None when the appliance does not offer it (older software: 404)."""
    if answer.status == 404:
        return None
    if answer.status != 200:
        raise BacklogError(f"{PATH} answered HTTP {answer.status}")
    text = answer.text.strip()
    if feedergate.classify(text) is feedergate.Answer.UNAUTHORIZED:
        raise BacklogError(f"{PATH} answered {text!r}: {UNAUTHORIZED_HELP}")
    try:
        return int(text)
    except ValueError:
        raise BacklogError(f"{PATH} answered {text[:200]!r}, not a count") from None


async def fetch_backlog(client: httpx.AsyncClient, settings: PushSettings) -> int | None:
    try:
        answer = await exchange(
            client, "GET", settings.base_url + PATH, deadline=settings.deadline, limit=1024
        )
    except httpx.HTTPError as exc:
        # What no retry mends (TLS, nothing listening) raises PushError, as for a push.
        again = await transport_problem(exc, settings.base_url, TLS_HINT, first=True)
        raise BacklogError(f"cannot read {settings.base_url}{PATH}: {again.problem}") from None
    return _parse(answer)


class BacklogGate:
    """Open while the appliance keeps up; shut from above `high` until back down to `low`.

    A background task polls every `interval` seconds. Between polls each accepted file counts
    as one more in the backlog, so that a fast push cannot overshoot the high mark by a whole
    polling interval's worth of files.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        settings: PushSettings,
        on_open: Callable[[], None] = lambda: None,
    ) -> None:
        self._client = client
        self._settings = settings
        self._on_open = on_open
        self._open = asyncio.Event()
        self._open.set()
        self._polled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Last known count; None when the appliance does not support the backlog request.
        self.count: int | None = None
        self._failures = 0

    @property
    def paused(self) -> bool:
        """Shut, or not polled yet: a push must not start sending into a full backlog."""
        return not (self._polled.is_set() and self._open.is_set())

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def file_accepted(self) -> None:
        if self.count is not None:
            self._set(self.count + 1)

    def _set(self, count: int) -> None:
        self.count = count
        if count > self._settings.backlog_high:
            self._open.clear()
        elif count <= self._settings.backlog_low:
            self._reopen()

    def _reopen(self) -> None:
        if not self._open.is_set():
            self._open.set()
            self._on_open()

    async def _poll(self) -> None:
        try:
            while True:
                try:
                    count = await fetch_backlog(self._client, self._settings)
                except FastfeedError:  # BacklogError, or PushError for TLS or nothing listening
                    # The gate keeps its state and the next poll may succeed; but a gate held
                    # shut by a count that can no longer be read would stall the push forever.
                    self._failures += 1
                    if self._failures > self._settings.retries:
                        self._reopen()
                else:
                    self._failures = 0
                    if count is None:
                        self.count = None
                        self._reopen()
                        return
                    self._set(count)
                finally:
                    self._first_poll_done()
                await asyncio.sleep(self._settings.backlog_interval)
        finally:
            self._first_poll_done()

    def _first_poll_done(self) -> None:
        if not self._polled.is_set():
            self._polled.set()
            if self._open.is_set():
                self._on_open()  # the scheduler waits for news to start sending
