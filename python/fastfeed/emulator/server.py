"""The aiohttp application: the feedergate's endpoints, the status pages and the test controls."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from fastfeed import _core
from fastfeed.emulator import adminapi, status
from fastfeed.emulator.faults import Fault, FaultQueue
from fastfeed.emulator.feeder import Feeder
from fastfeed.emulator.index import Index, Push
from fastfeed.emulator.upload import MAX_FEED_BYTES, DataFile, UploadError, receive, too_large

SUCCESS = "Success"
UNAUTHORIZED = "Error - Unauthorized Request"
FEEDTYPES = ("full", "incremental", "metadata-and-url")
#: Per kind of push: the form field that names its source, and the feed types it takes.
FORMS = {
    "feed": ("datasource", FEEDTYPES),
    "groups": ("groupsource", ("full", "incremental")),
}


@dataclass
class State:
    """Everything the handlers share; lives on the event loop's thread."""

    index: Index
    feeder: Feeder
    feeds_dir: Path
    trusted_ips: frozenset[str] | None
    faults: FaultQueue = field(default_factory=FaultQueue)
    backlog_unsupported: bool = False

    def trusts(self, request: web.Request) -> bool:
        """Whether the client is among the trusted IPs (`--trusted-ip`; by default all are)."""
        return self.trusted_ips is None or request.remote in self.trusted_ips

    def upload_path(self, prefix: str = "") -> Path:
        """A new file in the feeds directory, for an upload to be written to."""
        return self.feeds_dir / f"{prefix}{time.time_ns()}-{uuid.uuid4().hex[:8]}.xml"


STATE = web.AppKey("state", State)
#: The push a feedergate request made, for its line in the log.
PUSH = web.RequestKey("push", Push)
#: The status pages, which refresh themselves in the browser: logged at DEBUG, so that a page
#: left open does not fill the log.
POLLED = frozenset({"/", "/status", "/status.json"})

LOG = logging.getLogger(__name__)


@web.middleware
async def access_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One line per request, as any server logs: client, method, path, answer and time taken;
    for a feed, its push, datasource, feed type, file, size and what became of it."""
    started = time.perf_counter()
    answer = 500
    try:
        response = await handler(request)
        answer = response.status
        return response
    except web.HTTPException as exc:
        answer = exc.status
        raise
    finally:
        took = (time.perf_counter() - started) * 1000
        line = f"{request.remote} {request.method} {request.path_qs} {answer} in {took:.0f} ms"
        push = request.get(PUSH)
        if push is not None:
            line += f": {status.describe(push)} {status.outcome_line(push)}"
        level = logging.INFO
        if answer >= 400 or (push is not None and push.status() == "rejected"):
            level = logging.WARNING
        elif request.method == "GET" and request.path in POLLED:
            level = logging.DEBUG
        LOG.log(level, "%s", line)


@web.middleware
async def trusted_controls(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The emulator's controls (faults, settings) obey the trusted IPs as the feedergate does:
    an untrusted client must not script the appliance's failures."""
    if request.path.startswith("/_emulator/") and not request.app[STATE].trusts(request):
        return plain_text(f"{request.remote} is not a trusted IP", 403)
    return await handler(request)


def make_app(state: State) -> web.Application:
    # client_max_size bounds only bodies read whole (the JSON controls); uploads are streamed.
    app = web.Application(client_max_size=1 << 20, middlewares=[access_log, trusted_controls])
    app[STATE] = state
    app.add_routes(
        [
            web.post("/xmlfeed", functools.partial(receive_feed, kind="feed")),
            web.post("/xmlgroups", functools.partial(receive_feed, kind="groups")),
            web.get("/xmlfeed", functools.partial(probe, kind="feed")),
            web.get("/xmlgroups", functools.partial(probe, kind="groups")),
            web.get("/getbacklogcount", getbacklogcount),
            web.get("/getdtd", getdtd),
            web.get("/gsafeed.dtd", getdtd),
            web.get("/", to_status_page),
            web.get("/status", status_page),
            web.get("/status.json", status_json),
            web.post(adminapi.LOGIN, adminapi.client_login),
            web.get(adminapi.FEEDS, adminapi.feed_log),
            web.get(adminapi.FEEDS + "/{entry_id}", adminapi.feed_entry),
            web.get("/_emulator/faults", list_faults),
            web.post("/_emulator/faults", add_faults),
            web.delete("/_emulator/faults", clear_faults),
            web.post("/_emulator/settings", settings),
        ]
    )
    return app


def plain_text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


async def _log(state: State, request: web.Request, outcome: str, kind: str, **fields: Any) -> Push:
    """Records one /xmlfeed or /xmlgroups request in the feed log (off the event loop: SQLite
    may wait)."""
    values: dict[str, Any] = {
        "kind": kind,
        "client_ip": request.remote or "",
        "datasource": "",
        "feedtype": "",
        "size": 0,
        "sha256": "",
        "outcome": outcome,
        "path": None,
        "filename": None,
    }
    values.update(fields)
    record = functools.partial(state.index.record_push, **values)
    push_id = await asyncio.get_running_loop().run_in_executor(None, record)
    push = Push(
        id=push_id,
        received_at=0.0,
        client_ip=values["client_ip"],
        datasource=values["datasource"],
        feedtype=values["feedtype"],
        bytes=values["size"],
        sha256=values["sha256"],
        outcome=outcome,
        path=values["path"],
        kind=kind,
        filename=values["filename"],
    )
    request[PUSH] = push
    return push


async def drain(request: web.Request) -> int:
    """Reads and drops the body, so that a refusal reaches a client still sending its upload."""
    size = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
    return size


async def drop(request: web.Request, after_bytes: int) -> int:
    """Reads `after_bytes` of the body, then closes the connection without answering."""
    size = 0
    while size < after_bytes:
        chunk = await request.content.read(min(1 << 16, after_bytes - size))
        if not chunk:
            break
        size += len(chunk)
    assert request.transport is not None
    request.transport.abort()
    return size


async def take_fault(state: State, request: web.Request) -> tuple[Fault | None, int | None]:
    """The next fault, and what it does before the upload is read, the same for every receiver:
    `slow` waits; `drop_connection` reads its bytes and closes the connection, and their count
    is returned (else None)."""
    fault = state.faults.take()
    if fault is not None and fault.kind == "drop_connection":
        return fault, await drop(request, fault.after_bytes)
    if fault is not None and fault.kind == "slow":
        await asyncio.sleep(fault.seconds)
    return fault, None


async def receive_feed(request: web.Request, kind: str) -> web.StreamResponse:
    """POST /xmlfeed (kind "feed") and /xmlgroups (kind "groups"): the same feedergate, with
    the same faults and trusted IPs; only the form's source field and feed types differ."""
    state = request.app[STATE]
    try:
        return await _receive_feed(state, request, kind)
    except ConnectionError:
        # The client gave up mid-upload (e.g. its timeout during a slow answer): nothing to answer.
        outcome = "refused: the client closed the connection during its upload"
        await _log(state, request, outcome, kind)
        return plain_text("client gone", 400)


async def _receive_feed(state: State, request: web.Request, kind: str) -> web.StreamResponse:
    declared = request.content_length
    if declared is not None and declared > MAX_FEED_BYTES:
        error = too_large(declared)
        await _log(state, request, f"refused: {error}", kind, size=declared)
        return plain_text(str(error), error.status)
    if not state.trusts(request):
        size = await drain(request)
        outcome = f"refused: {request.remote} is not a trusted IP"
        await _log(state, request, outcome, kind, size=size)
        return plain_text(UNAUTHORIZED)

    fault, dropped = await take_fault(state, request)
    if dropped is not None:
        outcome = f"refused: connection dropped after {dropped} bytes"
        await _log(state, request, outcome, kind, size=dropped)
        return plain_text("")  # never sent: the transport is closed

    path = state.upload_path()
    with DataFile(path) as data:
        try:
            fields = await receive(request, data)
            datasource, feedtype = _check_fields(fields, data, kind)
        except UploadError as error:
            data.discard()
            outcome = f"refused: {error}"
            await _log(state, request, outcome, kind, size=data.size, sha256=data.sha256)
            return plain_text(str(error), error.status)
    received = {
        "datasource": datasource,
        "feedtype": feedtype,
        "size": data.size,
        "sha256": data.sha256,
        "filename": data.filename,
    }
    if fault is not None and fault.kind in ("http_status", "answer"):
        path.unlink()
        await _log(state, request, f"refused: HTTP {fault.status} {fault.body}", kind, **received)
        return plain_text(fault.body, fault.status)

    push = await _log(state, request, "accepted", kind, path=str(path), **received)
    state.feeder.enqueue(push, fail=fault is not None and fault.kind == "fail_in_feeder")
    return plain_text(SUCCESS)


def _check_fields(fields: dict[str, str], data: DataFile, kind: str) -> tuple[str, str]:
    source, feedtypes = FORMS[kind]
    missing = [name for name in (source, "feedtype") if not fields.get(name)]
    if not data.received:
        missing.append("data")
    if missing:
        raise UploadError(
            f"missing form field(s) {', '.join(missing)}: POST {source}, feedtype and data"
        )
    name, feedtype = fields[source], fields["feedtype"]
    # Groupsources are held to the datasource rule: the guide names none that would break it
    # ("sharepoint, ggg, ldap or others"), and fastfeed's own builder requires it.
    problem = _core.datasource_problem(name)
    if problem:
        raise UploadError(f"{source} '{name}': {problem}")
    if feedtype not in feedtypes:
        raise UploadError(f"feedtype '{feedtype}' is not one of {', '.join(feedtypes)}")
    return name, feedtype


async def probe(request: web.Request, kind: str) -> web.Response:
    """GET /xmlfeed (or /xmlgroups), no form: HTTP 200 with the feedergate's refusal when it
    would refuse a feed (an untrusted client), else 400 for the missing fields. Google's
    Connector Manager asks so after a failed push, to learn whether feeds are taken again.
    An assumption: the guide describes no GET, this is what that client expects of one."""
    state = request.app[STATE]
    if not state.trusts(request):
        return plain_text(UNAUTHORIZED)
    source = FORMS[kind][0]
    return plain_text(f"POST the form fields {source}, feedtype and data", 400)


@functools.cache
def _gsafeed_dtd() -> str:
    return resources.files("fastfeed.sets").joinpath("gsafeed.dtd").read_text(encoding="utf-8")


async def getdtd(request: web.Request) -> web.Response:
    """GET /getdtd: the gsafeed DTD the feedergate takes (software 6.2 and later), which feed
    clients such as Google's Connector Manager read to learn that base64compressed content is
    taken; an assumption, from that client: the guide names no /getdtd. Also GET /gsafeed.dtd,
    where the guide puts the DTD (on the appliance's port 7800; here on the emulator's)."""
    return plain_text(_gsafeed_dtd())


async def getbacklogcount(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.backlog_unsupported:
        raise web.HTTPNotFound(text="Not Found")
    if not state.trusts(request):
        # Assumed (the guide does not say): as the feedergate's other requests, the count is for
        # trusted clients only.
        return plain_text(UNAUTHORIZED)
    return plain_text(str(state.feeder.backlog))


async def _status(state: State) -> dict[str, Any]:
    feeder = state.feeder
    snapshot = functools.partial(
        status.snapshot, state.index, feeder.backlog, feeder.paused, feeder.applying
    )
    return await asyncio.get_running_loop().run_in_executor(None, snapshot)


async def to_status_page(request: web.Request) -> web.Response:
    """The emulator has no home page: / leads to the Feeds page, as a browser expects."""
    raise web.HTTPFound("/status")


async def status_json(request: web.Request) -> web.Response:
    return web.json_response(await _status(request.app[STATE]))


async def status_page(request: web.Request) -> web.Response:
    html = status.render_html(await _status(request.app[STATE]))
    return web.Response(text=html, content_type="text/html")


async def list_faults(request: web.Request) -> web.Response:
    pending = request.app[STATE].faults.pending()
    return web.json_response([fault.to_json() for fault in pending])


async def add_faults(request: web.Request) -> web.Response:
    """Queues faults given as one JSON object or a list of them (see `Fault.from_json`)."""
    state = request.app[STATE]
    try:
        body = await request.json()
        items = body if isinstance(body, list) else [body]
        faults = [Fault.from_json(item) for item in items]
    except ValueError as exc:
        return plain_text(f"invalid fault: {exc}", 400)
    for fault in faults:
        state.faults.add(fault)
    return web.json_response([fault.to_json() for fault in state.faults.pending()])


async def clear_faults(request: web.Request) -> web.Response:
    request.app[STATE].faults.clear()
    return web.json_response([])


async def settings(request: web.Request) -> web.Response:
    """Sets `backlog_unsupported` and `feeder_paused` from a JSON object."""
    state = request.app[STATE]
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        return plain_text(f"invalid JSON: {exc}", 400)
    known = {"backlog_unsupported", "feeder_paused"}
    if (
        not isinstance(body, dict)
        or not set(body) <= known
        or not all(isinstance(value, bool) for value in body.values())
    ):
        return plain_text(
            f"expected a JSON object of booleans with keys among {sorted(known)}", 400
        )
    if "backlog_unsupported" in body:
        state.backlog_unsupported = body["backlog_unsupported"]
    if "feeder_paused" in body:
        (state.feeder.pause if body["feeder_paused"] else state.feeder.resume)()
    return web.json_response(
        {"backlog_unsupported": state.backlog_unsupported, "feeder_paused": state.feeder.paused}
    )
