"""The seedlist's state in SQLite: every document, when it last changed, and its deletions.

Changes are numbered: each insert, update or delete takes the next change number, and a crawl
reports the documents whose number is above the one its Timestamp carries. A deletion keeps the
document's row as a tombstone (no content), so that an incremental crawl can report it; reloading
an identical document takes no number, so it is not reported again.

WAL mode lets a server read pages while records are loaded; a load is one transaction, so a
crawl sees all of it or none of it, and a refused record leaves the store as it was.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from fastfeed.errors import LoadError
from fastfeed.seedlist.records import (
    AUTHOR,
    SUMMARY,
    TITLE,
    Deletion,
    Document,
    RecordProblem,
    parse,
    xml_can_carry,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    -- change number of the last insert, update or delete; and of the last insert
    changed INTEGER NOT NULL,
    created INTEGER NOT NULL,
    changed_at REAL NOT NULL,
    deleted INTEGER NOT NULL,
    digest BLOB,
    mimetype TEXT,
    displayurl TEXT,
    last_modified TEXT,
    metadata TEXT NOT NULL,
    acl TEXT,
    content BLOB,
    text INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_changed ON documents (changed);
-- versions replaced by a later load, kept for the crawls begun before it (HISTORY_SECONDS)
CREATE TABLE IF NOT EXISTS history (
    id INTEGER NOT NULL,
    url TEXT NOT NULL,
    changed INTEGER NOT NULL,
    created INTEGER NOT NULL,
    changed_at REAL NOT NULL,
    deleted INTEGER NOT NULL,
    mimetype TEXT,
    displayurl TEXT,
    last_modified TEXT,
    metadata TEXT NOT NULL,
    acl TEXT,
    content BLOB,
    text INTEGER NOT NULL,
    -- the change that replaced this version, and when
    superseded INTEGER NOT NULL,
    superseded_at REAL NOT NULL,
    PRIMARY KEY (id, changed)
);
CREATE INDEX IF NOT EXISTS history_changed ON history (changed);
-- every custom field name loaded, for the feed's wplc:fieldInfo
CREATE TABLE IF NOT EXISTS fields (name TEXT PRIMARY KEY);
"""


#: How long a version replaced by a load is kept for the crawls begun before the load: a crawl
#: that takes longer is told to crawl again (HTTP 410), rather than given a mix of two states.
HISTORY_SECONDS = 24 * 3600

#: The columns of a version, in documents and in history alike.
_VERSION = (
    "id, url, changed, created, changed_at, deleted, mimetype, displayurl, last_modified, "
    "metadata, acl, content, text"
)


@dataclass
class LoadSummary:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class Position:
    """Where the store stands: its identity, its last change number, the oldest change an
    incremental crawl may start from (deletions before it were purged), and the oldest change
    a crawl may have begun at (versions it would read were purged)."""

    store: str
    change: int
    horizon: int
    history: int = 0


@dataclass(frozen=True)
class Change:
    """A document (or its tombstone) as a crawl reports it."""

    id: int
    url: str
    changed: int
    created: int
    changed_at: float
    deleted: bool
    mimetype: str
    displayurl: str | None
    last_modified: str | None
    #: Custom fields only; title, summary and authors are apart, for their Atom elements.
    fields: list[tuple[str, str]]
    title: str | None
    summary: str | None
    authors: list[str]
    acl: list[str] | None
    #: Inline content (text XML can carry, at most `inline_limit` bytes), else None.
    inline: str | None
    has_content: bool


class SeedlistStore:
    """A seedlist's documents in one SQLite file; `with SeedlistStore(path) as store: ...`.

    One instance per thread (SQLite connections are not shared).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout=30000")
        # Only a new file is set up: that takes a write lock, which would make a server's
        # reader wait for a load in progress.
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('store', ?), ('change', 0), ('horizon', 0), "
                "('key', ?)",
                (secrets.token_hex(8), secrets.token_hex(32)),
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SeedlistStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # Writing

    def load(self, records: Iterable[Mapping[str, Any]]) -> LoadSummary:
        """Applies records of the JSON Lines schema in one transaction. A refused record raises
        LoadError naming it (`record 3`) and the field; nothing of the batch is kept."""
        return self.load_located((f"record {i}", r) for i, r in enumerate(records))

    def load_located(self, records: Iterable[tuple[str, Mapping[str, Any]]]) -> LoadSummary:
        """As `load`, with each record's location for messages (`docs.jsonl:17`)."""
        summary = LoadSummary()
        with self._transaction():
            self._purge_history(time.time() - HISTORY_SECONDS)
            for location, record in records:
                try:
                    item = parse(record)
                except RecordProblem as exc:
                    raise LoadError(location, exc.field, exc.reason) from None
                outcome = self._apply(item)
                setattr(summary, outcome, getattr(summary, outcome) + 1)
        return summary

    def upsert(self, record: Mapping[str, Any]) -> bool:
        """Adds or replaces one document; True if that changed what the seedlist serves."""
        return self.load([{**record, "action": "add"}]).unchanged == 0

    def delete(self, url: str) -> bool:
        """Deletes a document, keeping a tombstone; True if it was there."""
        return self.load([{"url": url, "action": "delete"}]).deleted == 1

    def purge_deletions(self, before: float) -> int:
        """Forgets the tombstones of deletions made before `before` (seconds since the epoch).
        Crawls whose Timestamp is older than the newest of them can no longer be served
        incrementally (they get HTTP 410 and must crawl in full). Returns how many."""
        with self._transaction():
            newest, count = self._db.execute(
                "SELECT max(changed), count(*) FROM documents WHERE deleted AND changed_at < ?",
                (before,),
            ).fetchone()
            if count:
                self._db.execute(
                    "DELETE FROM documents WHERE deleted AND changed_at < ?", (before,)
                )
                self._db.execute(
                    "UPDATE meta SET value = max(value, ?) WHERE key = 'horizon'", (newest,)
                )
        return int(count)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def purge_history(self, before: float) -> None:
        """Forgets the versions that loads replaced before `before` (seconds since the epoch;
        each load forgets those older than HISTORY_SECONDS). Crawls begun before the newest
        of them can no longer be served from the state they began at (they get HTTP 410)."""
        with self._transaction():
            self._purge_history(before)

    def _purge_history(self, before: float) -> None:
        newest = self._db.execute(
            "SELECT max(superseded) FROM history WHERE superseded_at < ?", (before,)
        ).fetchone()[0]
        if newest is not None:
            self._db.execute("DELETE FROM history WHERE superseded_at < ?", (before,))
            self._db.execute(
                "INSERT INTO meta VALUES ('history', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
                (newest,),
            )

    def _keep_version(self, doc_id: int, change: int) -> None:
        """Keeps the version `change` replaces, for the crawls that began before it."""
        self._db.execute(
            f"INSERT INTO history ({_VERSION}, superseded, superseded_at) "
            f"SELECT {_VERSION}, ?, ? FROM documents WHERE id = ?",
            (change, time.time(), doc_id),
        )

    def _next_change(self) -> int:
        self._db.execute("UPDATE meta SET value = value + 1 WHERE key = 'change'")
        row = self._db.execute("SELECT value FROM meta WHERE key = 'change'").fetchone()
        return int(row[0])

    def _apply(self, item: Document | Deletion) -> str:
        row = self._db.execute(
            "SELECT id, deleted, digest FROM documents WHERE url = ?", (item.url,)
        ).fetchone()
        if isinstance(item, Deletion):
            if row is None or row[1]:
                return "unchanged"
            change = self._next_change()
            self._keep_version(row[0], change)
            self._db.execute(
                "UPDATE documents SET changed = ?, changed_at = ?, deleted = 1, digest = NULL, "
                "metadata = '[]', acl = NULL, content = NULL WHERE id = ?",
                (change, time.time(), row[0]),
            )
            return "deleted"
        digest = item.digest()
        if row is not None and not row[1] and row[2] == digest:
            return "unchanged"
        change = self._next_change()
        values = (
            change,
            time.time(),
            digest,
            item.mimetype,
            item.displayurl,
            item.last_modified,
            orjson.dumps(item.metadata).decode(),
            None if item.acl is None else orjson.dumps(item.acl).decode(),
            item.content,
            item.text,
        )
        self._db.executemany(
            "INSERT OR IGNORE INTO fields VALUES (?)",
            ((name,) for name, _ in item.metadata if name not in (TITLE, SUMMARY, AUTHOR)),
        )
        if row is None:
            self._db.execute(
                "INSERT INTO documents (url, created, changed, changed_at, digest, mimetype, "
                "displayurl, last_modified, metadata, acl, content, text, deleted) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                (item.url, change, *values),
            )
            return "inserted"
        self._keep_version(row[0], change)
        # A tombstone brought back is a new insert for crawls that saw it deleted.
        self._db.execute(
            "UPDATE documents SET created = CASE WHEN deleted THEN ? ELSE created END, "
            "changed = ?, changed_at = ?, digest = ?, mimetype = ?, displayurl = ?, "
            "last_modified = ?, metadata = ?, acl = ?, content = ?, text = ?, deleted = 0 "
            "WHERE id = ?",
            (change, *values, row[0]),
        )
        return "updated" if not row[1] else "inserted"

    # Reading, for the server

    def signing_key(self) -> bytes:
        """The key that signs the crawl values the server gives out (stores made before keys
        existed get one now)."""
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('key', ?)", (secrets.token_hex(32),))
        (key,) = self._db.execute("SELECT value FROM meta WHERE key = 'key'").fetchone()
        return bytes.fromhex(key)

    def position(self) -> Position:
        values = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        return Position(
            str(values["store"]),
            int(values["change"]),
            int(values["horizon"]),
            int(values.get("history", 0)),
        )

    def fields(self) -> list[str]:
        """Every custom field name loaded, sorted."""
        return [name for (name,) in self._db.execute("SELECT name FROM fields ORDER BY name")]

    def changes(
        self, after: int, upto: int, limit: int, *, deletions: bool, inline_limit: int
    ) -> list[Change]:
        """The documents changed after change `after` up to `upto`, as they were at `upto` (a
        crawl reads the store as it was when it began, even while loads go on), in change
        order; tombstones too if `deletions` (incremental crawls), else only live documents
        (full crawls). A version is current, or kept in history if a later load replaced it."""
        rows = self._db.execute(
            "SELECT id, url, changed, created, changed_at, deleted, mimetype, displayurl, "
            "last_modified, metadata, acl, length(content), text, "
            "CASE WHEN text AND length(content) <= :inline THEN content END FROM ("
            f"SELECT {_VERSION} FROM documents WHERE changed > :after AND changed <= :upto "
            f"UNION ALL SELECT {_VERSION} FROM history "
            "WHERE changed > :after AND changed <= :upto AND superseded > :upto) "
            + ("" if deletions else "WHERE NOT deleted ")
            + "ORDER BY changed LIMIT :limit",
            {"inline": inline_limit, "after": after, "upto": upto, "limit": limit},
        )
        return [_change(row) for row in rows]

    def content(self, doc_id: int, version: int | None = None) -> tuple[str, bytes] | None:
        """(MIME type, bytes) of a live document's content, None if it has none; of its version
        `version` (the change that made it: current, or kept in history) if given."""
        live = "NOT deleted AND content IS NOT NULL"
        if version is None:
            query = f"SELECT mimetype, content FROM documents WHERE id = ? AND {live}"
            values: tuple[int, ...] = (doc_id,)
        else:
            query = (
                f"SELECT mimetype, content FROM documents WHERE id = ? AND changed = ? AND {live} "
                f"UNION ALL SELECT mimetype, content FROM history "
                f"WHERE id = ? AND changed = ? AND {live}"
            )
            values = (doc_id, version) * 2
        row = self._db.execute(query, values).fetchone()
        return None if row is None else (row[0], row[1])


def _change(row: tuple[Any, ...]) -> Change:
    (
        doc_id,
        url,
        changed,
        created,
        changed_at,
        deleted,
        mimetype,
        displayurl,
        last_modified,
        metadata,
        acl,
        size,
        _text,
        inline,
    ) = row
    title = summary = None
    authors: list[str] = []
    fields: list[tuple[str, str]] = []
    for name, value in orjson.loads(metadata):
        if name == TITLE:
            title = value
        elif name == SUMMARY:
            summary = value
        elif name == AUTHOR:
            authors.append(value)
        else:
            fields.append((name, value))
    text: str | None = None
    if inline is not None:
        text = inline.decode()
        if not xml_can_carry(text):
            text = None
    return Change(
        id=doc_id,
        url=url,
        changed=changed,
        created=created,
        changed_at=changed_at,
        deleted=bool(deleted),
        mimetype=mimetype or "",
        displayurl=displayurl,
        last_modified=last_modified,
        fields=fields,
        title=title,
        summary=summary,
        authors=authors,
        acl=None if acl is None else orjson.loads(acl),
        inline=text,
        has_content=size is not None,
    )
