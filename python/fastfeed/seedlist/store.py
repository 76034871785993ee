"""The seedlist's state in SQLite: every document, when it last changed, and its deletions.

Changes are numbered: each insert, update or delete takes the next change number, and a crawl
reports the documents whose number is above the one its Timestamp carries. A deletion keeps the
document's row as a tombstone (no content), so that an incremental crawl can report it; reloading
an identical document takes no number, so it is not reported again.

A document changes when its fingerprint does: the one `fastfeed sync` compares records by,
of the document as served (`records.fingerprints`). The store records the fingerprints'
version; a load that finds another (a store made before) first fingerprints every document
again from what it stored, so that none looks changed for it. A snapshot load also deletes
the documents it lacks, guarded as a sync is (`fastfeed.sets.guard`).

WAL mode lets a server read pages while records are loaded; a load is one transaction, so a
crawl sees all of it or none of it, and a refused record leaves the store as it was.

Over 500 lines on purpose: the store is the one owner of its tables; loads, tombstones, the
versions kept for crawls in progress and the crawl reads share its schema and transactions,
and split apart each part would write SQL against the other's tables.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from fastfeed import _core
from fastfeed.errors import LoadError, MassDelete
from fastfeed.seedlist.records import (
    AUTHOR,
    SUMMARY,
    TITLE,
    Deletion,
    Document,
    RecordProblem,
    fingerprints,
    parse,
    xml_can_carry,
)
from fastfeed.sets.guard import AllowDeletes, check_deletes

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

#: Records fingerprinted in one call to the core, and content bytes at most in one batch.
_BATCH = 1000
_BATCH_BYTES = 32 << 20

#: The columns of a version, in documents and in history alike.
_VERSION = (
    "id, url, changed, created, changed_at, deleted, mimetype, displayurl, last_modified, "
    "metadata, acl, content, text"
)


@dataclass
class LoadSummary:
    """What a load found and did (with `dry_run`, would do)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    #: A snapshot: its URLs are all the documents, the others are deleted.
    snapshot: bool = False
    #: The documents the store held before a snapshot (tombstones aside).
    held: int = 0
    #: A few URLs a snapshot deleted, to show.
    examples: dict[str, list[str]] = field(default_factory=dict)
    dry_run: bool = False
    #: Why the load would be refused (a dry run that would delete too much: `MassDelete`).
    refused: str = ""

    def describe(self) -> str:
        counts = (
            f"{self.inserted:,} inserted, {self.updated:,} updated, {self.deleted:,} deleted, "
            f"{self.unchanged:,} unchanged"
        )
        return f"would load {counts} (dry run: nothing changed)" if self.dry_run else counts

    def to_dict(self) -> dict[str, object]:
        counts: dict[str, object] = {
            "ok": not self.refused,
            "inserted": self.inserted,
            "updated": self.updated,
            "deleted": self.deleted,
            "unchanged": self.unchanged,
            "dry_run": self.dry_run,
        }
        if not self.snapshot:
            return counts
        return {
            **counts,
            "held": self.held,
            "examples": self.examples,
            "refused": self.refused or None,
        }


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
                "('key', ?), ('fingerprint', ?)",
                (secrets.token_hex(8), secrets.token_hex(32), _core.FINGERPRINT_VERSION),
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

    def load(
        self,
        records: Iterable[Mapping[str, Any]],
        *,
        snapshot: bool = False,
        allow_deletes: AllowDeletes | None = None,
        dry_run: bool = False,
    ) -> LoadSummary:
        """Applies records of the JSON Lines schema in one transaction. A refused record raises
        LoadError naming it (`record 3`) and the field; nothing of the batch is kept.

        A `snapshot` is the whole source: each URL once, no deletes; the documents it lacks are
        deleted, unless that is more than `allow_deletes` allows (the guard of `fastfeed sync`,
        `fastfeed.sets.guard`: `MassDelete`, and nothing of the load is kept). A `dry_run`
        finds what the load would do and keeps nothing (a refusal is then its `refused`)."""
        located = ((f"record {i}", r) for i, r in enumerate(records))
        return self.load_located(
            located, snapshot=snapshot, allow_deletes=allow_deletes, dry_run=dry_run
        )

    def load_located(
        self,
        records: Iterable[tuple[str, Mapping[str, Any]]],
        *,
        snapshot: bool = False,
        allow_deletes: AllowDeletes | None = None,
        dry_run: bool = False,
    ) -> LoadSummary:
        """As `load`, with each record's location for messages (`docs.jsonl:17`)."""
        summary = LoadSummary(snapshot=snapshot, dry_run=dry_run)
        with self._transaction(keep=not dry_run):
            self._refingerprint()
            self._purge_history(time.time() - HISTORY_SECONDS)
            if snapshot:
                summary.held = self._live()
                self._db.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS snapshot (url TEXT PRIMARY KEY, location TEXT)"
                )
                self._db.execute("DELETE FROM temp.snapshot")
            found = 0
            for batch in _batches(records, self._listed if snapshot else None):
                for (_, item), fingerprint in zip(batch, _fingerprints(batch), strict=True):
                    outcome = self._apply(item, fingerprint)
                    setattr(summary, outcome, getattr(summary, outcome) + 1)
                found += len(batch)
            if snapshot:
                self._delete_unlisted(summary, found, allow_deletes)
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
    def _transaction(self, *, keep: bool = True) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT" if keep else "ROLLBACK")

    def _live(self) -> int:
        return int(
            self._db.execute("SELECT count(*) FROM documents WHERE NOT deleted").fetchone()[0]
        )

    def _listed(self, location: str, item: Document | Deletion) -> None:
        """Notes a snapshot's record, refusing what a snapshot cannot hold."""
        if isinstance(item, Deletion):
            raise LoadError(
                location,
                "action",
                "a snapshot lists the documents as they are now: no deletes in it (a URL left "
                "out of it is deleted)",
            )
        try:
            self._db.execute("INSERT INTO temp.snapshot VALUES (?, ?)", (item.url, location))
        except sqlite3.IntegrityError:
            (first,) = self._db.execute(
                "SELECT location FROM temp.snapshot WHERE url = ?", (item.url,)
            ).fetchone()
            raise LoadError(
                location, "url", f"{item.url} is also at {first}: a snapshot holds each URL once"
            ) from None

    def _delete_unlisted(
        self, summary: LoadSummary, records: int, allow_deletes: AllowDeletes | None
    ) -> None:
        """Deletes the documents a snapshot lacks, if the guard lets it."""
        unlisted = (
            "FROM documents d WHERE NOT deleted AND NOT EXISTS "
            "(SELECT 1 FROM temp.snapshot s WHERE s.url = d.url)"
        )
        count = int(self._db.execute(f"SELECT count(*) {unlisted}").fetchone()[0])
        summary.examples = {
            "deleted": [
                url for (url,) in self._db.execute(f"SELECT url {unlisted} ORDER BY id LIMIT 3")
            ]
        }
        try:
            check_deletes(
                count,
                summary.held,
                records,
                allow_deletes,
                f"the seedlist {self.path}",
                unchanged="nothing was loaded",
                again="load again",
            )
        except MassDelete as exc:
            if not summary.dry_run:
                raise
            summary.refused = str(exc)  # a dry run shows what it found, then the refusal
        # A page at a time, read before it is deleted: memory stays flat however many go.
        last = 0
        while count:
            page = self._db.execute(
                f"SELECT id, url {unlisted} AND id > ? ORDER BY id LIMIT ?", (last, _BATCH)
            ).fetchall()
            if not page:
                break
            for _, url in page:
                summary.deleted += self._apply(Deletion(url), None) == "deleted"
            last = page[-1][0]

    def _refingerprint(self) -> None:
        """Fingerprints every document again if the store's fingerprints are of another
        version (or older digests): compared with the new ones, they would make every
        document look changed. A stored document is all its fingerprint is taken of, so the
        new ones are exactly what loading it again makes."""
        (version,) = self._db.execute(
            "SELECT coalesce((SELECT value FROM meta WHERE key = 'fingerprint'), '')"
        ).fetchone()
        if version == _core.FINGERPRINT_VERSION:
            return
        last = 0
        while True:
            rows = self._db.execute(
                "SELECT id, url, mimetype, displayurl, last_modified, metadata, acl, content, "
                "text FROM documents WHERE id > ? AND NOT deleted ORDER BY id LIMIT ?",
                (last, _BATCH),
            ).fetchall()
            if not rows:
                break
            documents = [_document(row) for row in rows]
            self._db.executemany(
                "UPDATE documents SET digest = ? WHERE id = ?",
                zip(fingerprints(documents), (row[0] for row in rows), strict=True),
            )
            last = rows[-1][0]
        self._db.execute(
            "INSERT INTO meta VALUES ('fingerprint', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (_core.FINGERPRINT_VERSION,),
        )

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

    def _apply(self, item: Document | Deletion, digest: bytes | None) -> str:
        """Applies one record whose document has the fingerprint `digest` (None: a delete)."""
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


def _batches(
    records: Iterable[tuple[str, Mapping[str, Any]]],
    check: Callable[[str, Document | Deletion], None] | None,
) -> Iterator[list[tuple[str, Document | Deletion]]]:
    """The records, checked (by `check` too, in order, so that the first bad record is the one
    named), in batches the core fingerprints in one call (bounded by count and by content, so
    that memory stays flat whatever the records hold)."""
    batch: list[tuple[str, Document | Deletion]] = []
    size = 0
    for location, record in records:
        try:
            item = parse(record)
        except RecordProblem as exc:
            raise LoadError(location, exc.field, exc.reason) from None
        if check is not None:
            check(location, item)
        batch.append((location, item))
        size += len(item.content or b"") if isinstance(item, Document) else 0
        if len(batch) >= _BATCH or size >= _BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _fingerprints(batch: list[tuple[str, Document | Deletion]]) -> list[bytes | None]:
    """Each document's fingerprint, None for a deletion."""
    documents = [item for _, item in batch if isinstance(item, Document)]
    found = iter(fingerprints(documents))
    return [next(found) if isinstance(item, Document) else None for _, item in batch]


def _document(row: tuple[Any, ...]) -> Document:
    """A stored document (id, url, mimetype, displayurl, last_modified, metadata, acl, content,
    text), as loading it made it."""
    _, url, mimetype, displayurl, last_modified, metadata, acl, content, text = row
    return Document(
        url=url,
        mimetype=mimetype,
        displayurl=displayurl,
        last_modified=last_modified,
        metadata=[(name, value) for name, value in orjson.loads(metadata)],
        acl=None if acl is None else orjson.loads(acl),
        content=content,
        text=bool(text),
    )


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
