"""The emulated Administrative API: the part `sync --confirm` reads, a datasource's feed log.

As the Administrative API Developer's Guide: Protocol describes it (see `fastfeed.gsa.adminapi`
for the client): `POST /accounts/ClientLogin` (form fields `Email`, `Passwd`) answers `Auth=TOKEN`;
`GET /feeds/feed?query=DATASOURCE` lists, with `Authorization: GoogleLogin auth=TOKEN`, the
latest five feeds of the datasource (all datasources without a query) as Atom entries of
`<gsa:content>` properties; `GET /feeds/feed/ENTRY_ID` is one of them with its log. The
appliance serves it on its admin port; the emulator on its only one.

Each feed the feedergate accepted is an entry: ACCEPTED while in the backlog, then COMPLETED,
COMPLETED_WITH_ERROR (records skipped) or FAILED_IN_ERROR (nothing applied), as the feeder left
it (`Fault.fail_in_feeder` fails one).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from xml.sax.saxutils import escape, quoteattr

from aiohttp import web

from fastfeed.emulator.index import Index, Push

LOGIN = "/accounts/ClientLogin"
FEEDS = "/feeds/feed"
#: The emulator's Admin Console account.
ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin"
#: Feeds the log keeps per datasource, as the guide says of the appliance's.
KEPT = 5

_KEY = secrets.token_bytes(32)
#: Per feed type: its name in entry IDs and its code in `feedType`.
_FEEDTYPES = {
    "full": ("FULL_FEED", 0),
    "incremental": ("INCREMENTAL", 1),
    "metadata-and-url": ("METADATA_AND_URL", 3),
}
_XML = "<?xml version='1.0' encoding='UTF-8'?>"
_NS = "xmlns='http://www.w3.org/2005/Atom' xmlns:gsa='http://schemas.google.com/gsa/2007'"


def _token(user: str) -> str:
    return hmac.new(_KEY, user.encode(), hashlib.sha256).hexdigest()


async def client_login(request: web.Request) -> web.Response:
    form = await request.post()
    if form.get("Email") != ADMIN_USER or form.get("Passwd") != ADMIN_PASSWORD:
        return web.Response(text="Error=BadAuthentication\n", status=403)
    return web.Response(text=f"Auth={_token(ADMIN_USER)}\n", content_type="text/plain")


def _authorized(request: web.Request) -> bool:
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given, f"GoogleLogin auth={_token(ADMIN_USER)}")


async def _feeds(request: web.Request) -> list[Push]:
    # Here, not at the top: the server module registers these handlers and holds the state.
    from fastfeed.emulator.server import STATE

    index: Index = request.app[STATE].index
    pushes = await asyncio.get_running_loop().run_in_executor(None, index.pushes)
    return [p for p in pushes if p.kind == "feed" and p.status() != "rejected"]


def _entry_id(push: Push) -> str:
    when = time.strftime("%Y%m%d_%H%M%S", time.gmtime(push.received_at))
    return f"{push.datasource}_{when}_{push.id:06d}_{_FEEDTYPES[push.feedtype][0]}_0"


def _state(push: Push) -> int:
    """ACCEPTED:0, COMPLETED:2, COMPLETED_WITH_ERROR:3, FAILED_IN_ERROR:4: the Feeds page's
    status (`Push.status`) in the API's numbers, a failed feed that changed documents being
    completed with errors."""
    status = push.status()
    if status == "received":
        return 0
    if status == "processed":
        return 2
    return 3 if push.added or push.deleted else 4


def _entry(push: Push, base: str, *, log: bool, root: bool = False) -> str:
    entry_id = _entry_id(push)
    props = {
        "entryID": entry_id,
        "feedDataSource": push.datasource,
        "feedType": str(_FEEDTYPES[push.feedtype][1]),
        "feedState": str(_state(push)),
        "feedTime": str(int((push.applied_at or push.received_at) * 1000)),
        "successRecords": str(push.added + push.deleted),
        "errorRecords": str(push.in_error),
    }
    if log:
        text = push.outcome if push.status() == "failed" else ""
        props.update(logContent=text, fromLine="1", toLine="1", totalLines="1")
    contents = "".join(
        f"<gsa:content name={quoteattr(k)}>{escape(v)}</gsa:content>" for k, v in props.items()
    )
    ns = f" {_NS}" if root else ""
    return f"<entry{ns}><id>{escape(base)}{FEEDS}/{escape(entry_id)}</id>{contents}</entry>"


def _denied() -> web.Response:
    return web.Response(text="Unauthorized: log in at /accounts/ClientLogin", status=401)


async def feed_log(request: web.Request) -> web.Response:
    if not _authorized(request):
        return _denied()
    datasource = request.query.get("query")
    latest: dict[str, list[Push]] = {}
    for push in await _feeds(request):
        if datasource is None or push.datasource == datasource:
            latest.setdefault(push.datasource, []).append(push)
    base = f"{request.scheme}://{request.host}"
    entries = "".join(
        _entry(p, base, log=False) for kept in latest.values() for p in reversed(kept[-KEPT:])
    )
    body = f"{_XML}<feed {_NS}><id>{escape(base)}{FEEDS}</id>{entries}</feed>"
    return web.Response(text=body, content_type="application/atom+xml")


async def feed_entry(request: web.Request) -> web.Response:
    if not _authorized(request):
        return _denied()
    wanted = request.match_info["entry_id"]
    base = f"{request.scheme}://{request.host}"
    for push in await _feeds(request):
        if _entry_id(push) == wanted:
            body = "<?xml version='1.0' encoding='UTF-8'?>" + _entry(
                push, base, log=True, root=True
            )
            return web.Response(text=body, content_type="application/atom+xml")
    raise web.HTTPNotFound(text=f"no feed {wanted}")
