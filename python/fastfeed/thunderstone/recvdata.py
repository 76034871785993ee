"""What a profile's recvdata.xml takes and answers (Thunderstone's data receiving): the form a
file goes in, url-encoded on the way, and the `ThunderstoneReplicationResult` it answers."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from lxml import etree

from fastfeed.delivery.body import file_chunks
from fastfeed.delivery.results import FeedFile
from fastfeed.errors import FileChanged, ReplyError

KIND = "thunderstone"
#: The namespace of the `dt:dt="bin.base64"` attribute.
DATATYPES = "urn:schemas-microsoft-com:datatypes"
#: The journal's name for a set's `UI` request.
UPDATE_INDEXES = "update-indexes"
UPDATE_INDEXES_DOCUMENT = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    f'<ThunderstoneReplication xmlns:dt="{DATATYPES}">'
    "<Item><Type>UI</Type></Item></ThunderstoneReplication>\n"
)

NOT_ALLOWED = "Not Allowed"
NO_PROFILE = "No Profile"
NOT_ALLOWED_HELP = (
    "the appliance accepts data only from its cluster members: in its administration "
    "interface, add this machine's IP address to the Cluster Members list, then push again"
)
NO_PROFILE_HELP = (
    "the profile must exist on the appliance: create it there (or check the spelling), or "
    "rebuild the set with `fastfeed build --format thunderstone --profile NAME` naming an "
    "existing profile"
)
URL_HELP = (
    "give the profile's data receiving URL: the admin URL ending in /dowalk, with "
    "/recvdata.xml appended, e.g. https://search.example.com/texis/dowalk/recvdata.xml"
)

#: Characters sent as themselves in application/x-www-form-urlencoded (space becomes `+`).
_FORM_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-._"
_KEPT = _FORM_SAFE + b" "
_ESCAPES = [b"%%%02X" % byte for byte in range(256)]


@dataclass(frozen=True)
class ItemResult:
    """One `ItemResult` of a reply: `Status` is `OK`, `FAIL_UNKNOWNTYPE`, `NODATA`,
    `Not Allowed`, `No Profile` or `FAIL`; `deleted` is the `DP` count of a pattern delete."""

    type: str
    status: str
    info: str
    deleted: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "OK"


def parse_reply(body: bytes) -> list[ItemResult]:
    """The item results of a reply, in item order. Parsed strictly: well-formed XML without a
    DTD (nothing an entity could expand), rooted at `ThunderstoneReplicationResult`."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        root = etree.fromstring(body, parser)
    except etree.XMLSyntaxError as exc:
        raise ReplyError(f"not XML ({exc}): {_excerpt(body)}") from None
    if root.getroottree().docinfo.doctype:
        raise ReplyError(f"a reply with a DOCTYPE is not the appliance's: {_excerpt(body)}")
    if root.tag != "ThunderstoneReplicationResult":
        raise ReplyError(f"<{root.tag}> is not a ThunderstoneReplicationResult")
    results = []
    for item in root.iterchildren("ItemResult"):
        status = item.findtext("Status")
        if status is None:
            raise ReplyError("an ItemResult has no Status")
        deleted = item.findtext("DP")
        results.append(
            ItemResult(
                type=(item.findtext("Type") or "").strip(),
                status=status.strip(),
                info=(item.findtext("Info") or "").strip(),
                deleted=int(deleted) if deleted and deleted.strip().isdigit() else None,
            )
        )
    return results


def _excerpt(body: bytes) -> str:
    return repr(body[:200].decode("utf-8", "replace"))


def sent_items(path: Path) -> list[tuple[str, str]]:
    """(Type, Url) of each item of a file, in order: the reply says only which position
    failed. Streamed, so that a large file is not held in memory."""
    items = []
    for _, item in etree.iterparse(
        str(path), tag="Item", huge_tree=True, resolve_entities=False, no_network=True
    ):
        url = item.find("Url")
        text = "" if url is None else url.text or ""
        if url is not None and url.get(f"{{{DATATYPES}}}dt") == "bin.base64":
            text = base64.b64decode(text).decode("utf-8", "replace")
        items.append(((item.findtext("Type") or "").strip(), text))
        item.clear(keep_tail=False)
        while item.getprevious() is not None:
            del item.getparent()[0]
    return items


def _encoded_length(data: bytes) -> int:
    """Bytes of `data` once form-encoded: every byte not kept as is becomes `%XX`."""
    return len(data) + 2 * len(data.translate(None, _KEPT))


def _form_encode(data: bytes) -> bytes:
    """application/x-www-form-urlencoded `data`, at hundreds of MB/s for text: one C-speed
    replace per distinct byte to escape, where `urllib.parse.quote_from_bytes` goes through a
    Python-level lookup per byte (about 25 MB/s)."""
    present = set(data.translate(None, _KEPT))
    if 0x25 in present:  # "%" first, so that the escapes added next are left alone
        data = data.replace(b"%", b"%25")
        present.discard(0x25)
    for byte in present:
        data = data.replace(bytes((byte,)), _ESCAPES[byte])
    return data.replace(b" ", b"+")


class FormBody:
    """`profile=...&data=...`, the data streamed from the file and encoded on the way.

    Its length is measured first (one fast pass over the file) so the request carries a
    Content-Length: the appliance's web server is not known to take chunked request bodies. A
    file that changes after that is never sent cut short or padded: the stream stops with an
    error when its bytes differ from the manifest's size or the measured length.
    """

    def __init__(self, feed: FeedFile, chunk_size: int, on_chunk: Callable[[int], None]) -> None:
        self._head = f"{urlencode({'profile': feed.entry.datasource})}&data=".encode()
        self._feed = feed
        self._chunk_size = chunk_size
        self._on_chunk = on_chunk
        self.length = 0

    def measure(self) -> None:
        length = len(self._head)
        with open(self._feed.path, "rb") as f:
            while chunk := f.read(self._chunk_size):
                length += _encoded_length(chunk)
        self.length = length

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._head
        sent = len(self._head)
        async for chunk in file_chunks(self._feed, self._chunk_size):
            encoded = _form_encode(chunk)
            sent += len(encoded)
            if sent > self.length:
                raise FileChanged("it changed while being sent")
            self._on_chunk(len(chunk))
            yield encoded
        if sent != self.length:
            raise FileChanged("it changed while being sent")
