"""Seedlist pages: Atom feeds with the `wplc` extension of IBM Connections seedlists.

Built with lxml, which escapes every text and attribute value; the store has already refused
what XML 1.0 cannot carry, so every page is well-formed. Element order follows the seedlist
response reference: feed links, generator, timestamp, title, updated, fieldInfo, then entries of
id, links, content, authors, title, updated, action, acls, fields, summary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lxml import etree

from fastfeed.seedlist.store import Change

ATOM = "http://www.w3.org/2005/Atom"
WPLC = "http://www.ibm.com/wplc/atom/1.0"
NSMAP = {"atom": ATOM, "wplc": WPLC}
CONTENT_TYPE = "application/atom+xml; charset=utf-8"
XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'

#: How text content is inlined: Atom names text/plain and text/html by kind; other text types
#: go inline under their own type (RFC 4287 4.1.3.3); anything else only by `src`.
_INLINE_TYPES = {"text/plain": "text", "text/html": "html"}
#: XML media types (text/xml too): RFC 4287 4.1.3.3 makes their inline content an element,
#: which a reader would look for instead of the escaped text: they go by `src`.
_XML_SUFFIXES = ("/xml", "+xml")

#: fieldInfo of the Atom elements a seedlist entry fills: (id, name, type, sortable).
_STANDARD_FIELDS = (
    ("title", "Title", "string", False),
    ("summary", "Description", "string", False),
    ("updated", "Last Update Date", "date", True),
    ("author", "Author", "string", False),
)


@dataclass(frozen=True)
class Page:
    #: The feed's atom:id: the URL that was asked for.
    feed_id: str
    entries: Sequence[Change]
    #: True for crawls after a Timestamp: new documents are `insert`, others `update`.
    incremental: bool
    since: int
    #: rel="next" (more pages follow), or None on the last page, which has the timestamp.
    next_href: str | None
    timestamp: str | None
    fields: Sequence[str]
    #: The content URL of a document's version: `content_href.format(id="ID.CHANGED")`.
    content_href: str


def _el(parent: Any, ns: str, tag: str, text: str | None = None, **attrs: str) -> Any:
    element = etree.SubElement(parent, f"{{{ns}}}{tag}", attrs)
    if text is not None:
        element.text = text
    return element


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _field_info(feed: Any, field_id: str, name: str, kind: str, sortable: bool) -> None:
    _el(
        feed,
        WPLC,
        "fieldInfo",
        id=field_id,
        name=name,
        description=name,
        type=kind,
        contentSearchable="true",
        fieldSearchable="true",
        parametric="false",
        returnable="true",
        sortable="true" if sortable else "false",
        supportsExactMatch="true",
    )


def render(page: Page) -> bytes:
    """The page as UTF-8 bytes with an XML declaration."""
    feed = etree.Element(f"{{{ATOM}}}feed", nsmap=NSMAP)
    _el(feed, ATOM, "id", page.feed_id)
    if page.next_href is not None:
        _el(
            feed,
            ATOM,
            "link",
            href=page.next_href,
            rel="next",
            type="application/atom+xml",
            title="Next page",
        )
    _el(feed, ATOM, "generator", "fastfeed seedlist", version="1.0")
    if page.timestamp is not None:
        _el(feed, WPLC, "timestamp", page.timestamp)
    kind = "changes" if page.incremental else "documents"
    _el(feed, ATOM, "title", f"fastfeed seedlist: {len(page.entries)} {kind}")
    newest = max((e.changed_at for e in page.entries), default=None)
    _el(feed, ATOM, "updated", _rfc3339(newest if newest is not None else time.time()))
    for field_id, name, field_type, sortable in _STANDARD_FIELDS:
        _field_info(feed, field_id, name, field_type, sortable)
    for name in page.fields:
        _field_info(feed, name, name, "string", False)
    for change in page.entries:
        _entry(feed, change, page)
    body: bytes = etree.tostring(feed, encoding="UTF-8", xml_declaration=False)
    return XML_DECLARATION + body


def _action(change: Change, page: Page) -> str:
    if change.deleted:
        return "delete"
    if page.incremental and change.created <= page.since:
        return "update"
    return "insert"


def _inline_type(mimetype: str) -> str | None:
    """The atom:content type a text content goes inline under, or None to serve it by src."""
    if mimetype.split(";")[0].strip().lower().endswith(_XML_SUFFIXES):
        return None
    return _INLINE_TYPES.get(mimetype) or (mimetype if mimetype.startswith("text/") else None)


def _entry(feed: Any, change: Change, page: Page) -> None:
    entry = _el(feed, ATOM, "entry")
    _el(entry, ATOM, "id", change.url)
    action = _action(change, page)
    if action != "delete":
        _el(
            entry,
            ATOM,
            "link",
            href=change.displayurl or change.url,
            rel="alternate",
            type=change.mimetype,
        )
        inline_type = _inline_type(change.mimetype)
        if change.inline is not None and inline_type is not None:
            _el(entry, ATOM, "content", change.inline, type=inline_type)
        elif change.has_content:
            # The version read, not the document's latest: a crawl reads the store as it was.
            src = page.content_href.format(id=f"{change.id}.{change.changed}")
            _el(entry, ATOM, "content", type=change.mimetype, src=src)
        for author in change.authors:
            _el(_el(entry, ATOM, "author"), ATOM, "name", author)
    _el(entry, ATOM, "title", change.title or change.url)
    _el(entry, ATOM, "updated", change.last_modified or _rfc3339(change.changed_at))
    _el(entry, WPLC, "action", do=action)
    if action == "delete":
        return
    if change.acl is not None:
        acls = _el(entry, WPLC, "acls")
        for token in change.acl:
            _el(acls, WPLC, "acl", token)
    for name, value in change.fields:
        _el(entry, WPLC, "field", value, id=name)
    if change.summary is not None:
        _el(entry, ATOM, "summary", change.summary)
