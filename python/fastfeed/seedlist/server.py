"""The seedlist HTTP(S) server (aiohttp): pages at /seedlist/myserver, content at
/seedlist/content/{id}.

A crawler starts without parameters (a full crawl) or with the `Timestamp` of its last crawl
(the changes since), then follows `rel="next"` links, which carry `Range`, `Start` and an
opaque `State`, until a page without one; that page's `wplc:timestamp` starts the next crawl.
Anything wrong in those parameters is answered 400 (malformed) or 410 (stale: from another
store, or older than purged deletions: crawl again in full), with a message, never a 500.

SQLite is read on executor threads, one connection each, so a slow page does not stall the loop.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware
from yarl import URL

from fastfeed.errors import FastfeedError
from fastfeed.seedlist import tokens
from fastfeed.seedlist.atom import CONTENT_TYPE, Page, render
from fastfeed.seedlist.store import SeedlistStore
from fastfeed.servers import LoopThread, listen

PAGES = "/seedlist/myserver"
CONTENT = "/seedlist/content/{id}"
DEFAULT_RANGE = 100
MAX_RANGE = 1000
#: Text content up to this size goes inline in the page; longer text and binary by `src`.
INLINE_LIMIT = 64 * 1024
STARTUP_TIMEOUT = 30.0
_REALM = 'Basic realm="fastfeed seedlist", charset="UTF-8"'


class Refused(FastfeedError):
    """A request the server answers with a 4xx status and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Query:
    range: int
    start: int | None
    state: tokens.State | None
    timestamp: tokens.Timestamp | None


class _Stores(threading.local):
    """One store connection per executor thread."""

    store: SeedlistStore | None = None


@dataclass
class ServerState:
    path: Path
    stores: _Stores
    #: Signs the State and Timestamp values given out, and checks those that come back.
    signer: tokens.Signer

    def store(self) -> SeedlistStore:
        if self.stores.store is None:
            self.stores.store = SeedlistStore(self.path)
        return self.stores.store


STATE = web.AppKey("state", ServerState)


def _number(text: str) -> bool:
    """A whole number SQLite can hold (str.isdigit alone takes "²", which int() refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def parse_query(query: dict[str, str], signer: tokens.Signer) -> Query:
    """The paging parameters, checked for form; raises Refused(400)."""
    action = query.get("Action", "GetDocuments")
    if action != "GetDocuments":
        raise Refused(400, f"Action={action} is not supported; this seedlist has GetDocuments")
    text = query.get("Range", str(DEFAULT_RANGE))
    if not _number(text) or not 1 <= int(text) <= MAX_RANGE:
        raise Refused(400, f"Range={text} is not a whole number from 1 to {MAX_RANGE}")
    start_text = query.get("Start")
    if start_text is not None and not _number(start_text):
        raise Refused(400, f"Start={start_text} is not a whole number")
    try:
        state = signer.decode_state(query["State"]) if "State" in query else None
        stamp = signer.decode_timestamp(query["Timestamp"]) if "Timestamp" in query else None
    except tokens.TokenError as exc:
        raise Refused(400, f"{exc}; use the values of this server's pages as given") from None
    start = None if start_text is None else int(start_text)
    if state is None and start:
        raise Refused(
            400,
            f"Start={start} without State: a page after the first is asked for with the "
            'rel="next" link of the page before it, which carries both',
        )
    if state is not None:
        if start is not None and start != state.start:
            raise Refused(400, f"Start={start} does not match State, which is at {state.start}")
        if stamp is not None and stamp.change != state.since:
            raise Refused(400, 'Timestamp does not match State: follow rel="next" links as given')
    return Query(int(text), start, state, stamp)


def _stale(what: str, reason: str) -> Refused:
    return Refused(410, f"{what} is stale: {reason}; crawl again in full (without Timestamp)")


def page(store: SeedlistStore, query: Query, url: URL, signer: tokens.Signer) -> bytes:
    """Renders the page `query` asks for; raises Refused for stale or inconsistent values."""
    position = store.position()
    if query.state is not None:
        state = query.state
        if state.store != position.store:
            raise _stale("State", "it is from another seedlist store (this one was recreated)")
        if state.upto > position.change:
            raise Refused(400, "State is not a value this server gave")
        if 0 < state.since < position.horizon:
            raise _stale("State", "deletions it would report have been purged meanwhile")
        if state.upto < position.history:
            raise _stale("State", "the crawl began too long ago: what it reads was replaced")
        since, upto, after, start = state.since, state.upto, state.after, state.start
    else:
        since = 0
        if query.timestamp is not None:
            stamp = query.timestamp
            if stamp.store != position.store:
                raise _stale("Timestamp", "it is from another seedlist store (recreated since)")
            if stamp.change > position.change:
                raise _stale("Timestamp", "it is newer than this store (restored from a backup?)")
            if 0 < stamp.change < position.horizon:
                raise _stale("Timestamp", "deletions made since have been purged")
            since = stamp.change
        upto, after, start = position.change, since, 0
    # A crawler that saw nothing (no Timestamp, or one from an empty store) needs no deletions.
    rows = store.changes(
        after, upto, query.range + 1, deletions=since > 0, inline_limit=INLINE_LIMIT
    )
    more = len(rows) > query.range
    rows = rows[: query.range]
    next_href = timestamp = None
    if more:
        state = tokens.State(position.store, since, upto, rows[-1].changed, start + len(rows))
        next_href = str(
            url.update_query(
                Range=str(query.range),
                Start=str(state.start),
                State=signer.encode_state(state),
            )
        )
    else:
        timestamp = signer.encode_timestamp(tokens.Timestamp(position.store, upto))
    return render(
        Page(
            feed_id=str(url),
            entries=rows,
            incremental=since > 0,
            since=since,
            next_href=next_href,
            timestamp=timestamp,
            fields=store.fields(),
            content_href=str(url.origin()) + CONTENT,
        )
    )


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", content_type="text/plain")


async def pages(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        query = parse_query(dict(request.query), state.signer)
        body = await asyncio.get_running_loop().run_in_executor(
            None, lambda: page(state.store(), query, request.url, state.signer)
        )
    except Refused as exc:
        return _text(exc.status, exc.message)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def content(request: web.Request) -> web.Response:
    state = request.app[STATE]
    text = request.match_info["id"]
    doc_id, _, version = text.partition(".")
    found = None
    if _number(doc_id) and (not version or _number(version)):
        found = await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: state.store().content(int(doc_id), int(version) if version else None),
        )
    if found is None:
        return _text(404, f"no content {text}: the document was deleted or has none")
    mimetype, data = found
    return web.Response(body=data, headers={"Content-Type": mimetype})


def _credentials(header: str) -> tuple[bytes, bytes]:
    """(user, password) of an `Authorization: Basic` header; empty if it is none."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return b"", b""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except ValueError:
        return b"", b""
    login, _, password = decoded.partition(b":")
    return login, password


def basic_auth(user: str, password: str) -> Middleware:
    """Middleware refusing requests without these credentials (compared in constant time)."""
    expected = (user.encode(), password.encode())

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        login, password = _credentials(request.headers.get(hdrs.AUTHORIZATION, ""))
        # Both compared, always: how long a refusal takes must not tell which one was wrong.
        login_ok = hmac.compare_digest(login, expected[0])
        password_ok = hmac.compare_digest(password, expected[1])
        if login_ok and password_ok:
            return await handler(request)
        response = _text(401, "this seedlist needs a user and password (HTTP basic)")
        response.headers["WWW-Authenticate"] = _REALM
        return response

    return check


def make_app(path: Path, credentials: tuple[str, str] | None = None) -> web.Application:
    middlewares = [basic_auth(*credentials)] if credentials else []
    app = web.Application(middlewares=middlewares)
    store = SeedlistStore(path)
    try:
        signer = tokens.Signer(store.position().store, store.signing_key())
    finally:
        store.close()
    app[STATE] = ServerState(path, _Stores(), signer)
    app.add_routes([web.get(PAGES, pages), web.get(CONTENT, content)])
    return app


class SeedlistServer:
    """The seedlist server in a background thread (its own asyncio loop), for the CLI and tests.

    `tls` is a (certificate file, key file) pair; `credentials` a (user, password) pair for
    HTTP basic authentication; `port=0` picks a free port.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.host = host
        self.port = port
        self._tls = tls
        self._credentials = credentials
        self._thread: LoopThread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The first page's URL, e.g. https://127.0.0.1:54321/seedlist/myserver."""
        scheme = "https" if self._tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}{PAGES}"

    def start(self) -> SeedlistServer:
        if not self.path.is_file():
            raise FastfeedError(
                f"{self.path} is not a seedlist state file: load records into it first "
                "(fastfeed seedlist load INPUT --db PATH)"
            )
        self._thread = LoopThread("fastfeed-seedlist")
        try:
            self._thread.call(self._start(), STARTUP_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        return self

    async def _start(self) -> None:
        context = None
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            try:
                context.load_cert_chain(*self._tls)
            except (OSError, ssl.SSLError) as exc:
                raise FastfeedError(
                    f"cannot use the certificate and key {self._tls}: {exc}"
                ) from exc
        self._runner = web.AppRunner(make_app(self.path, self._credentials), access_log=None)
        await self._runner.setup()
        self.port = await listen(self._runner, self.host, self.port, context)

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop(self._stop, STARTUP_TIMEOUT)
            self._thread = self._runner = None

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def __enter__(self) -> SeedlistServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
