"""`Emulator`: a local search appliance (feedergate + feeder) running in a background thread.

The server has its own asyncio loop in its own thread so that synchronous tests and the CLI can
drive it; the methods here are the thread-safe bridge into that loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from fastfeed.emulator import thunderstone
from fastfeed.emulator.faults import Fault
from fastfeed.emulator.feeder import Feeder
from fastfeed.emulator.index import Document, Index, Push
from fastfeed.emulator.security import Acl, Membership
from fastfeed.emulator.server import State, make_app
from fastfeed.emulator.status import snapshot
from fastfeed.emulator.thunderstone import ThunderstoneDocument, ThunderstoneRequest
from fastfeed.servers import LoopThread, listen

T = TypeVar("T")
STARTUP_TIMEOUT = 30.0

# The log (a line per request and per applied feed) is quiet unless the program configures
# logging, as a library's should be; `fastfeed emulator` shows it on stderr.
logging.getLogger("fastfeed.emulator").addHandler(logging.NullHandler())


class Emulator:
    """A GSA feedergate on loopback: POST /xmlfeed and /xmlgroups, GET /getbacklogcount,
    /status(.json).

    `tls` is a (certificate file, key file) pair: given, the server speaks HTTPS on `port`, and
    `http_port` (if given) adds a plain HTTP listener, as the appliance's 19902 and 19900.
    `port=0` picks a free port. `drain_per_second=None` applies feeds as soon as they arrive.
    It also receives Thunderstone data at /texis/dowalk/recvdata.xml: `thunderstone_profiles`
    lists the profiles that exist there (None: any name is accepted).

    It logs one line per request and per applied or failed feed to the logger
    "fastfeed.emulator" (INFO; failures WARNING; the self-refreshing status pages DEBUG): configure
    logging (e.g. `logging.basicConfig(level=logging.INFO)`) to see them.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        trusted_ips: Sequence[str] | None = None,
        drain_per_second: float | None = None,
        http_port: int | None = None,
        thunderstone_profiles: Sequence[str] | None = None,
    ) -> None:
        if drain_per_second is not None and drain_per_second <= 0:
            raise ValueError(f"drain_per_second must be positive or None, not {drain_per_second}")
        self.data_dir = Path(data_dir)
        self.host = host
        self.trusted_ips = None if trusted_ips is None else frozenset(trusted_ips)
        self.drain_per_second = drain_per_second
        self.thunderstone_profiles = thunderstone_profiles
        self._tls = tls
        self._requested = (port, http_port)
        self._thread: LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self._state: State | None = None
        self.port = 0
        self.http_port: int | None = None

    # Life cycle

    def start(self) -> Emulator:
        feeds_dir = self.data_dir / "feeds"
        feeds_dir.mkdir(parents=True, exist_ok=True)
        index = Index(self.data_dir / "index.sqlite3")
        self._thread = LoopThread("fastfeed-emulator")
        try:
            self._call(self._start(index, feeds_dir), STARTUP_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        return self

    async def _start(self, index: Index, feeds_dir: Path) -> None:
        feeder = Feeder(index, self.drain_per_second)
        self._state = State(index, feeder, feeds_dir, self.trusted_ips)
        feeder.start()
        # Feeds received by an earlier run on this data dir and not yet applied stay in the backlog.
        for push in await asyncio.get_running_loop().run_in_executor(None, index.pushes):
            if push.status() == "received" and push.path and Path(push.path).exists():
                feeder.enqueue(push)
        app = make_app(self._state)
        thunderstone.register(app, self.thunderstone_profiles)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port, http_port = self._requested
        self.port = await self._listen(port, self._ssl_context())
        if http_port is not None:
            self.http_port = await self._listen(http_port, None)

    async def _listen(self, port: int, context: ssl.SSLContext | None) -> int:
        assert self._runner is not None
        return await listen(self._runner, self.host, port, context)

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self._tls is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert, key = self._tls
        context.load_cert_chain(cert, key)
        return context

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop(self._stop, STARTUP_TIMEOUT)
            self._thread = None

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._state is not None:
            await self._state.feeder.stop()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._thread is None:
            coro.close()
            raise RuntimeError("the emulator is not running; use `with Emulator(...)` or start()")
        return self._thread.call(coro, timeout)

    @property
    def state(self) -> State:
        if self._state is None:
            raise RuntimeError("the emulator is not running; use `with Emulator(...)` or start()")
        return self._state

    # What tests use

    @property
    def url(self) -> str:
        """The base URL of the main listener, e.g. https://127.0.0.1:54321."""
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def http_url(self) -> str | None:
        """The plain-HTTP listener's base URL, when `http_port` was given."""
        return None if self.http_port is None else f"http://{self.host}:{self.http_port}"

    def add_fault(self, fault: Fault) -> None:
        self.state.faults.add(fault)

    def clear_faults(self) -> None:
        self.state.faults.clear()

    @property
    def backlog_unsupported(self) -> bool:
        return self.state.backlog_unsupported

    @backlog_unsupported.setter
    def backlog_unsupported(self, value: bool) -> None:
        self.state.backlog_unsupported = value

    def pause_feeder(self) -> None:
        """Holds the backlog: received feeds stay waiting until `resume_feeder()`."""
        feeder = self.state.feeder

        async def pause() -> None:
            feeder.pause()

        self._call(pause())

    def resume_feeder(self) -> None:
        feeder = self.state.feeder

        async def resume() -> None:
            feeder.resume()

        self._call(resume())

    @property
    def backlog(self) -> int:
        """Feed files received and not yet processed, as /getbacklogcount reports."""
        return self.state.feeder.backlog

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Waits until every received feed has been applied; raises TimeoutError otherwise."""
        if not self.state.feeder.wait_idle(timeout):
            paused = " (the feeder is paused)" if self.state.feeder.paused else ""
            raise TimeoutError(
                f"{self.backlog} feed file(s) still waiting after {timeout} s{paused}"
            )

    def documents(self, datasource: str) -> dict[str, Document]:
        """The datasource's documents by URL, as the index holds them now."""
        return self.state.index.documents(datasource)

    def acls(self, datasource: str) -> dict[str, Acl]:
        """The datasource's per-URL ACLs by URL: those of its documents, and those fed alone
        (`<acl url=...>`, `Acl.standalone`) for folders and shares, which are no documents."""
        return self.state.index.acls(datasource)

    def groups(self, groupsource: str | None = None) -> dict[tuple[str, str], Membership]:
        """The groups fed by groups feeds, by (namespace, group name): of one groupsource, or
        of all. A group is one entry whichever source fed it; the last feed wins."""
        return self.state.index.groups(groupsource)

    def pushes(self) -> list[Push]:
        """Every POST /xmlfeed and /xmlgroups received, in arrival order, with its outcome so
        far (`Push.kind` tells which)."""
        return self.state.index.pushes()

    def thunderstone_documents(self, profile: str) -> dict[str, ThunderstoneDocument]:
        """A Thunderstone profile's documents by URL, as recvdata.xml left them."""
        return thunderstone.documents(self.state.index, profile)

    def thunderstone_requests(self) -> list[ThunderstoneRequest]:
        """Every POST to recvdata.xml, in arrival order, with its items' statuses."""
        return thunderstone.requests(self.state.index)

    def status(self) -> dict[str, Any]:
        """The data of /status.json."""
        feeder = self.state.feeder
        return snapshot(self.state.index, feeder.backlog, feeder.paused, feeder.applying)
