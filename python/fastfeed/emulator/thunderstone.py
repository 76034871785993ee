"""The emulated Thunderstone Search Appliance's data receiver: POST /texis/dowalk/recvdata.xml.

It takes the form fields `profile` and `data` (url-encoded or multipart), applies each `<Item>`
of the `ThunderstoneReplication` document to the profile's documents at once, inside the
request, as the appliance does, and answers a `ThunderstoneReplicationResult` with one
`ItemResult` per item, in order. Besides the appliance's elements (`rid`, `Type`, `DP`,
`Status`, `Info`), each result carries the item's `Url`, for people reading the answers; the
real appliance does not send it, so clients must not rely on it.

The same gate as the feedergate applies: a client IP outside the emulator's trusted IPs is
answered `Not Allowed` (the appliance's Cluster Members), and faults scripted for /xmlfeed
(HTTP statuses, answers, slowness, dropped connections) apply to this endpoint too. Profiles:
any name is accepted unless the emulator was given its list (`thunderstone_profiles`), in which
case others are answered `No Profile`.

Documents live in the emulator's SQLite index, in tables of their own.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import functools
import json
import re
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from lxml import etree

from fastfeed.emulator.index import Index
from fastfeed.emulator.server import STATE, State, drain, plain_text, take_fault
from fastfeed.emulator.upload import MAX_FEED_BYTES, DataFile, UploadError, receive, too_large
from fastfeed.errors import FastfeedError
from fastfeed.sets.validate import OWN_DTD, declares

PATH = "/texis/dowalk/recvdata.xml"
DATATYPES = "urn:schemas-microsoft-com:datatypes"
BASE64 = "bin.base64"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS thunderstone_documents (
        profile TEXT NOT NULL,
        url TEXT NOT NULL,
        fields TEXT NOT NULL,
        raw_data BLOB,
        encoded TEXT NOT NULL,
        PRIMARY KEY (profile, url)
    )""",
    """CREATE TABLE IF NOT EXISTS thunderstone_requests (
        id INTEGER PRIMARY KEY,
        received_at REAL NOT NULL,
        client_ip TEXT NOT NULL,
        profile TEXT NOT NULL,
        items TEXT NOT NULL,
        outcome TEXT NOT NULL
    )""",
)


@dataclass(frozen=True)
class ThunderstoneDocument:
    """A URL of a profile as the emulator holds it. `fields` maps each element of its item
    (`Title`, `Body`, `Modified`...; not `Type`, `Url`, `RawData`) to its text, base64 ones
    decoded with the item's `Charset`; `raw_data` is `RawData` decoded; `encoded` names the
    elements that came base64-encoded (`dt:dt="bin.base64"`)."""

    url: str
    fields: dict[str, str]
    raw_data: bytes | None = None
    encoded: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ThunderstoneRequest:
    """One POST to recvdata.xml: `items` holds (Type, Url, Status) per item, in order;
    `outcome` is `processed` or why the request was refused as a whole."""

    id: int
    received_at: float
    client_ip: str
    profile: str
    items: list[tuple[str, str, str]]
    outcome: str


@dataclass
class _Result:
    type: str
    status: str
    info: str = ""
    url: str = ""
    deleted: int | None = None


@dataclass
class Receiver:
    """The endpoint's configuration: the profiles that exist (None: every name does)."""

    profiles: frozenset[str] | None


RECEIVER = web.AppKey("thunderstone", Receiver)


def register(app: web.Application, profiles: Iterable[str] | None) -> None:
    """Adds the endpoint to the emulator's application, and its tables to the index."""
    app[RECEIVER] = Receiver(None if profiles is None else frozenset(profiles))
    with app[STATE].index.transaction() as db:
        for statement in SCHEMA:
            db.execute(statement)
    app.router.add_post(PATH, receive_data)


def documents(index: Index, profile: str) -> dict[str, ThunderstoneDocument]:
    with index.transaction() as db:
        rows = db.execute(
            "SELECT url, fields, raw_data, encoded FROM thunderstone_documents"
            " WHERE profile = ? ORDER BY url",
            (profile,),
        ).fetchall()
    return {
        url: ThunderstoneDocument(url, json.loads(fields), raw, frozenset(json.loads(encoded)))
        for url, fields, raw, encoded in rows
    }


def requests(index: Index) -> list[ThunderstoneRequest]:
    with index.transaction() as db:
        rows = db.execute(
            "SELECT id, received_at, client_ip, profile, items, outcome"
            " FROM thunderstone_requests ORDER BY id"
        ).fetchall()
    return [
        ThunderstoneRequest(id_, at, ip, profile, [tuple(i) for i in json.loads(items)], outcome)
        for id_, at, ip, profile, items, outcome in rows
    ]


async def receive_data(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        return await _receive(state, request.app[RECEIVER], request)
    except ConnectionError:
        await _log(state, request, "", [], "refused: the client closed the connection")
        return plain_text("client gone", 400)


async def _receive(state: State, receiver: Receiver, request: web.Request) -> web.StreamResponse:
    declared = request.content_length
    if declared is not None and declared > MAX_FEED_BYTES:
        error = too_large(declared)
        await _log(state, request, "", [], f"refused: {error}")
        return plain_text(str(error), error.status)
    if not state.trusts(request):
        await drain(request)
        refusal = _Result("", "Not Allowed", f"{request.remote} is not in Cluster Members")
        await _log(state, request, "", [refusal], "refused: Not Allowed")
        return _reply([refusal])

    fault, dropped = await take_fault(state, request)
    if dropped is not None:
        await _log(state, request, "", [], f"refused: connection dropped after {dropped} bytes")
        return plain_text("")  # never sent: the transport is closed

    path = state.upload_path("thunderstone-")
    with DataFile(path) as data:
        try:
            fields = await receive(request, data)
        except UploadError as error:
            data.discard()
            await _log(state, request, "", [], f"refused: {error}")
            return plain_text(str(error), error.status)
    try:
        profile = fields.get("profile", "")
        if fault is not None and fault.kind in ("http_status", "answer"):
            outcome = f"refused: HTTP {fault.status} {fault.body}"
            await _log(state, request, profile, [], outcome)
            return plain_text(fault.body, fault.status)
        if not profile or (receiver.profiles is not None and profile not in receiver.profiles):
            info = f"no profile {profile!r}" if profile else "no profile in the request"
            refusal = _Result("", "No Profile", info)
            await _log(state, request, profile, [refusal], "refused: No Profile")
            return _reply([refusal])
        apply = functools.partial(_apply, state.index, profile, path)
        results = await asyncio.get_running_loop().run_in_executor(None, apply)
    finally:
        path.unlink(missing_ok=True)
    await _log(state, request, profile, results, "processed")
    return _reply(results)


async def _log(
    state: State, request: web.Request, profile: str, results: list[_Result], outcome: str
) -> None:
    items = json.dumps([(r.type, r.url, r.status) for r in results])
    values = (time.time(), request.remote or "", profile, items, outcome)

    def record() -> None:
        with state.index.transaction() as db:
            db.execute(
                "INSERT INTO thunderstone_requests (received_at, client_ip, profile, items,"
                " outcome) VALUES (?, ?, ?, ?, ?)",
                values,
            )

    await asyncio.get_running_loop().run_in_executor(None, record)


def _reply(results: list[_Result]) -> web.Response:
    root = etree.Element("ThunderstoneReplicationResult")
    for result in results:
        item = etree.SubElement(root, "ItemResult")
        etree.SubElement(item, "rid").text = "000000000"
        etree.SubElement(item, "Type").text = result.type
        if result.deleted is not None:
            etree.SubElement(item, "DP").text = str(result.deleted)
        etree.SubElement(item, "Status").text = result.status
        etree.SubElement(item, "Info").text = _xml_safe(result.info)
        etree.SubElement(item, "Url").text = _xml_safe(result.url)
    etree.SubElement(root, "Rows").text = str(len(results))
    etree.SubElement(root, "Version").text = "fastfeed emulator"
    body = etree.tostring(root, xml_declaration=True, encoding="UTF-8")
    return web.Response(body=body, content_type="text/xml", charset="utf-8")


def _xml_safe(text: str) -> str:
    """The text, or its repr if XML cannot carry it (a URL with control characters)."""
    try:
        etree.Element("probe").text = text
    except ValueError:
        return repr(text)
    return text


# Applying a document


class _ItemError(FastfeedError):
    def __init__(self, status: str, info: str) -> None:
        super().__init__(info)
        self.status = status


def _apply(index: Index, profile: str, path: Path) -> list[_Result]:
    """Applies the document's items in order, in one transaction; an item that fails changes
    nothing, and the others still apply (as on the appliance)."""
    parser = etree.XMLParser(huge_tree=True, resolve_entities=False, no_network=True)
    try:
        tree = etree.parse(str(path), parser)
    except (etree.XMLSyntaxError, OSError) as exc:
        return [_Result("", "NODATA", f"no parseable data: {exc}")]
    if declares(tree):
        # Refused as a feed with one is: its entities would be dropped in silence.
        return [_Result("", "NODATA", OWN_DTD)]
    root = tree.getroot()
    items = list(root.iterchildren("Item")) if root.tag == "ThunderstoneReplication" else []
    if not items:
        return [_Result("", "NODATA", f"no <Item> in <{root.tag}>")]
    results = []
    with index.transaction() as db:
        for item in items:
            kind = (item.findtext("Type") or "").strip()
            result = _Result(kind, "OK")
            try:
                fields, raw, encoded = _fields(item)
                result.url = fields.pop("Url", "")
                _apply_item(db, profile, result, fields, raw, encoded)
            except _ItemError as exc:
                result.status, result.info = exc.status, str(exc)
            results.append(result)
    return results


def _fields(item: etree._Element) -> tuple[dict[str, str], bytes | None, set[str]]:
    """An item's elements decoded: text ones, RawData's bytes, and which were base64."""
    raw: dict[str, bytes] = {}
    encoded = set()
    for elem in item.iterchildren(tag=etree.Element):
        name = etree.QName(elem).localname
        text = elem.text or ""
        if elem.get(f"{{{DATATYPES}}}dt") == BASE64:
            encoded.add(name)
            try:
                raw[name] = base64.b64decode("".join(text.split()), validate=True)
            except binascii.Error as exc:
                raise _ItemError("FAIL", f"{name}: invalid base64: {exc}") from None
        else:
            raw[name] = text.encode()
    charset = raw.get("Charset", b"UTF-8").decode("ascii", "replace").strip() or "UTF-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        raise _ItemError("FAIL", f"unknown Charset {charset!r}") from None
    fields = {}
    for name, value in raw.items():
        if name in ("Type", "RawData"):
            continue
        try:
            # Only base64 text is in the item's charset; XML text was decoded by the parser.
            fields[name] = value.decode(charset if name in encoded else "utf-8")
        except UnicodeDecodeError as exc:
            raise _ItemError("FAIL", f"{name} is not {charset}: {exc}") from None
    return fields, raw.get("RawData"), encoded - {"Type"}


def _apply_item(
    db: sqlite3.Connection,
    profile: str,
    result: _Result,
    fields: dict[str, str],
    raw: bytes | None,
    encoded: set[str],
) -> None:
    kind, url = result.type, result.url
    if kind == "UI":
        result.info = "search indexes updated"
        return
    if kind not in ("I", "U", "D", "DP"):
        info = f"unknown Type {kind!r}" if kind else "no Type"
        raise _ItemError("FAIL_UNKNOWNTYPE", info)
    if not url:
        raise _ItemError("FAIL", "no Url")
    if kind == "DP":
        pattern = re.compile(".*".join(re.escape(part) for part in url.split("*")), re.DOTALL)
        urls = db.execute(
            "SELECT url FROM thunderstone_documents WHERE profile = ?", (profile,)
        ).fetchall()
        doomed = [(profile, u) for (u,) in urls if pattern.fullmatch(u)]
        db.executemany("DELETE FROM thunderstone_documents WHERE profile = ? AND url = ?", doomed)
        result.deleted = len(doomed)
        return
    existing = db.execute(
        "SELECT fields, raw_data, encoded FROM thunderstone_documents"
        " WHERE profile = ? AND url = ?",
        (profile, url),
    ).fetchone()
    if kind == "D":
        if existing is None:
            result.info = "Not found"
        db.execute(
            "DELETE FROM thunderstone_documents WHERE profile = ? AND url = ?", (profile, url)
        )
        return
    if kind == "U":
        if existing is None:
            result.info = "Not found: inserted"
        else:
            # Elements the item leaves out keep their values (and encodings); given ones
            # replace them.
            given = set(fields) | ({"RawData"} if raw is not None else set())
            encoded = (set(json.loads(existing[2])) - given) | encoded
            fields = {**json.loads(existing[0]), **fields}
            raw = raw if raw is not None else existing[1]
    db.execute(
        "INSERT OR REPLACE INTO thunderstone_documents (profile, url, fields, raw_data, encoded)"
        " VALUES (?, ?, ?, ?, ?)",
        (profile, url, json.dumps(fields), raw, json.dumps(sorted(encoded - {"Url"}))),
    )
