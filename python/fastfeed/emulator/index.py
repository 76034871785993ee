"""The emulated appliance's index and feed log, kept in SQLite so a test can inspect every byte.

The server thread records pushes while a worker thread applies feeds and the test thread reads;
each thread gets its own connection, and WAL mode lets readers run during a long feed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastfeed.emulator.security import (
    Acl,
    Membership,
    Principal,
    principals_from_json,
    principals_to_json,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS pushes (
    id INTEGER PRIMARY KEY,
    received_at REAL NOT NULL,
    client_ip TEXT NOT NULL,
    datasource TEXT NOT NULL,
    feedtype TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    path TEXT,
    outcome TEXT NOT NULL,
    records INTEGER NOT NULL DEFAULT 0,
    added INTEGER NOT NULL DEFAULT 0,
    deleted INTEGER NOT NULL DEFAULT 0,
    in_error INTEGER NOT NULL DEFAULT 0,
    applied_at REAL,
    kind TEXT NOT NULL DEFAULT 'feed',
    filename TEXT
);
CREATE TABLE IF NOT EXISTS documents (
    datasource TEXT NOT NULL,
    url TEXT NOT NULL,
    kind TEXT NOT NULL,
    mimetype TEXT NOT NULL,
    content BLOB,
    metadata TEXT NOT NULL,
    displayurl TEXT,
    last_modified TEXT,
    lock INTEGER NOT NULL,
    authmethod TEXT NOT NULL,
    pagerank INTEGER,
    crawl_immediately INTEGER NOT NULL,
    crawl_once INTEGER NOT NULL,
    push_id INTEGER NOT NULL,
    PRIMARY KEY (datasource, url)
);
CREATE TABLE IF NOT EXISTS acls (
    datasource TEXT NOT NULL,
    url TEXT NOT NULL,
    standalone INTEGER NOT NULL,
    inheritance_type TEXT NOT NULL,
    inherit_from TEXT,
    principals TEXT NOT NULL,
    principal_count INTEGER NOT NULL,
    push_id INTEGER NOT NULL,
    PRIMARY KEY (datasource, url)
);
CREATE TABLE IF NOT EXISTS memberships (
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    groupsource TEXT NOT NULL,
    principal TEXT NOT NULL,
    members TEXT NOT NULL,
    member_count INTEGER NOT NULL,
    push_id INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);
"""


@dataclass(frozen=True)
class Document:
    """A URL as the emulated index holds it; `content` is the decoded bytes, None for web feeds."""

    url: str
    mimetype: str
    content: bytes | None
    metadata: list[tuple[str, str]]
    displayurl: str | None = None
    last_modified: str | None = None
    lock: bool = False
    authmethod: str = "none"
    pagerank: int | None = None
    crawl_immediately: bool = False
    crawl_once: bool = False
    datasource: str = ""
    #: "content" for content feeds, "web" for web and metadata-and-url feeds (URLs to crawl).
    kind: str = "content"
    #: The push (see `Push.id`) that last added or updated this URL.
    push_id: int = 0


@dataclass(frozen=True)
class Push:
    """One POST /xmlfeed as the emulator received it and what became of it."""

    id: int
    received_at: float
    client_ip: str
    datasource: str
    feedtype: str
    #: Size of the `data` field as received (for refused requests: what was read of it).
    bytes: int
    #: Hex SHA-256 of the `data` field as received.
    sha256: str
    #: "accepted" (waiting in the backlog), "applied", "failed in error: ..." or "refused: ...";
    #: `status()` and `reason` say it in the Feeds page's words.
    outcome: str
    records: int = 0
    added: int = 0
    deleted: int = 0
    in_error: int = 0
    applied_at: float | None = None
    path: str | None = field(default=None, repr=False)
    #: "feed" for POST /xmlfeed, "groups" for POST /xmlgroups (whose `datasource` is the
    #: groupsource, and whose records are memberships).
    kind: str = "feed"
    #: The file name the client gave the `data` part of a multipart form (None: it gave none,
    #: as in the urlencoded form, which has no file name).
    filename: str | None = None

    def status(self, applying: bool = False) -> str:
        """The outcome in the words of the Feeds page: "received" (accepted by the feedergate,
        waiting in the backlog), "in progress" (`applying`: the feeder is on it), "processed",
        "failed" (in error, see `reason`) or "rejected" (refused by the feedergate, never fed)."""
        if self.outcome == "accepted":
            return "in progress" if applying else "received"
        if self.outcome == "applied":
            return "processed"
        return "rejected" if self.outcome.startswith("refused") else "failed"

    @property
    def reason(self) -> str:
        """Why a feed failed or was rejected; empty otherwise."""
        for prefix in ("failed in error: ", "refused: "):
            if self.outcome.startswith(prefix):
                return self.outcome.removeprefix(prefix)
        return ""


@dataclass
class Changes:
    """What applying one feed did, for the feed log."""

    records: int = 0
    added: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)


class Index:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        db = self._connect()
        db.executescript(SCHEMA)
        # Data directories made before groups feeds have no pushes.kind: all theirs are feeds.
        # Those made before file names were kept have no pushes.filename.
        columns = {row[1] for row in db.execute("PRAGMA table_info(pushes)")}
        if "kind" not in columns:
            db.execute("ALTER TABLE pushes ADD COLUMN kind TEXT NOT NULL DEFAULT 'feed'")
        if "filename" not in columns:
            db.execute("ALTER TABLE pushes ADD COLUMN filename TEXT")

    def _connect(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        """Closes this thread's connection (others close when their threads end)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # The feed log

    def record_push(
        self,
        *,
        client_ip: str,
        datasource: str,
        feedtype: str,
        size: int,
        sha256: str,
        outcome: str,
        path: str | None = None,
        kind: str = "feed",
        filename: str | None = None,
    ) -> int:
        with self.transaction() as db:
            cursor = db.execute(
                "INSERT INTO pushes (received_at, client_ip, datasource, feedtype, bytes, sha256,"
                " path, outcome, kind, filename) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    time.time(),
                    client_ip,
                    datasource,
                    feedtype,
                    size,
                    sha256,
                    path,
                    outcome,
                    kind,
                    filename,
                ),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def finish_push(
        self, db: sqlite3.Connection, push_id: int, outcome: str, changes: Changes
    ) -> None:
        db.execute(
            "UPDATE pushes SET outcome = ?, records = ?, added = ?, deleted = ?, in_error = ?,"
            " applied_at = ? WHERE id = ?",
            (
                outcome,
                changes.records,
                changes.added,
                changes.deleted,
                len(changes.errors),
                time.time(),
                push_id,
            ),
        )

    def pushes(self) -> list[Push]:
        rows = self._connect().execute(f"SELECT {_PUSH_COLUMNS} FROM pushes ORDER BY id")
        return [Push(*row) for row in rows]

    def push(self, push_id: int) -> Push:
        query = f"SELECT {_PUSH_COLUMNS} FROM pushes WHERE id = ?"
        return Push(*self._connect().execute(query, (push_id,)).fetchone())

    # The documents

    def documents(self, datasource: str) -> dict[str, Document]:
        rows = self._connect().execute(
            "SELECT url, mimetype, content, metadata, displayurl, last_modified, lock, authmethod,"
            " pagerank, crawl_immediately, crawl_once, datasource, kind, push_id"
            " FROM documents WHERE datasource = ? ORDER BY url",
            (datasource,),
        )
        return {row[0]: _document(row) for row in rows}

    def datasource_counts(self) -> dict[str, int]:
        rows = self._connect().execute(
            "SELECT datasource, COUNT(*) FROM documents GROUP BY datasource ORDER BY datasource"
        )
        return dict(rows.fetchall())

    # Per-URL ACLs

    def put_acl(self, db: sqlite3.Connection, acl: Acl) -> None:
        db.execute(
            "INSERT OR REPLACE INTO acls (datasource, url, standalone, inheritance_type,"
            " inherit_from, principals, principal_count, push_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                acl.datasource,
                acl.url,
                acl.standalone,
                acl.inheritance_type,
                acl.inherit_from,
                json.dumps(principals_to_json(acl.principals)),
                len(acl.principals),
                acl.push_id,
            ),
        )

    def acl(self, db: sqlite3.Connection, datasource: str, url: str) -> Acl | None:
        row = db.execute(
            f"SELECT {_ACL_COLUMNS} FROM acls WHERE datasource = ? AND url = ?", (datasource, url)
        ).fetchone()
        return None if row is None else _acl(row)

    def acls(self, datasource: str) -> dict[str, Acl]:
        rows = self._connect().execute(
            f"SELECT {_ACL_COLUMNS} FROM acls WHERE datasource = ? ORDER BY url", (datasource,)
        )
        return {row[0]: _acl(row) for row in rows}

    def acl_counts(self, limit: int) -> dict[str, tuple[int, dict[str, int]]]:
        """Per datasource: its number of ACLs, and the principal count of its first `limit`
        URLs (the status page must stay small for an index of millions)."""
        db = self._connect()
        totals = db.execute("SELECT datasource, COUNT(*) FROM acls GROUP BY datasource")
        out: dict[str, tuple[int, dict[str, int]]] = {}
        for datasource, total in totals.fetchall():
            rows = db.execute(
                "SELECT url, principal_count FROM acls WHERE datasource = ? ORDER BY url LIMIT ?",
                (datasource, limit),
            )
            out[datasource] = (total, dict(rows.fetchall()))
        return out

    # Groups

    def put_membership(self, db: sqlite3.Connection, membership: Membership) -> None:
        group = membership.group
        db.execute(
            "INSERT OR REPLACE INTO memberships (namespace, name, groupsource, principal, members,"
            " member_count, push_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                group.namespace,
                group.name,
                membership.groupsource,
                json.dumps(group.to_json()),
                json.dumps(principals_to_json(membership.members)),
                len(membership.members),
                membership.push_id,
            ),
        )

    def groups(self, groupsource: str | None) -> dict[tuple[str, str], Membership]:
        query = "SELECT groupsource, principal, members, push_id FROM memberships"
        params: tuple[str, ...] = ()
        if groupsource is not None:
            query += " WHERE groupsource = ?"
            params = (groupsource,)
        memberships = [
            Membership(
                Principal(**json.loads(principal)),
                principals_from_json(json.loads(members)),
                source,
                push_id,
            )
            for source, principal, members, push_id in self._connect().execute(
                query + " ORDER BY namespace, name", params
            )
        ]
        return {(m.group.namespace or "", m.group.name): m for m in memberships}

    def group_counts(self) -> dict[str, tuple[int, int]]:
        """Per groupsource: its groups and the members they list."""
        rows = self._connect().execute(
            "SELECT groupsource, COUNT(*), SUM(member_count) FROM memberships GROUP BY groupsource"
        )
        return {source: (groups, members) for source, groups, members in rows.fetchall()}


_PUSH_COLUMNS = (
    "id, received_at, client_ip, datasource, feedtype, bytes, sha256, outcome, records, added,"
    " deleted, in_error, applied_at, path, kind, filename"
)


def _document(row: tuple[object, ...]) -> Document:
    (
        url,
        mimetype,
        content,
        metadata,
        displayurl,
        modified,
        lock,
        auth,
        rank,
        now,
        once,
        ds,
        kind,
        push_id,
    ) = row
    return Document(
        url=str(url),
        mimetype=str(mimetype),
        content=bytes(content) if isinstance(content, bytes) else None,
        metadata=[(str(n), str(c)) for n, c in json.loads(str(metadata))],
        displayurl=displayurl if isinstance(displayurl, str) else None,
        last_modified=modified if isinstance(modified, str) else None,
        lock=bool(lock),
        authmethod=str(auth),
        pagerank=rank if isinstance(rank, int) else None,
        crawl_immediately=bool(now),
        crawl_once=bool(once),
        datasource=str(ds),
        kind=str(kind),
        push_id=int(push_id) if isinstance(push_id, int) else 0,
    )


_ACL_COLUMNS = "url, principals, inheritance_type, inherit_from, standalone, datasource, push_id"


def _acl(row: tuple[Any, ...]) -> Acl:
    url, principals, inheritance, inherit_from, standalone, datasource, push_id = row
    return Acl(
        url=url,
        principals=principals_from_json(json.loads(principals)),
        inheritance_type=inheritance,
        inherit_from=inherit_from,
        standalone=bool(standalone),
        datasource=datasource,
        push_id=push_id,
    )
