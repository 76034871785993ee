"""The sync state: per URL, the fingerprint of the record an appliance last accepted.

A state is one SQLite file for one appliance and one datasource (it records both, and refuses
to serve another). Its tables:

* `documents`: URL, fingerprint (16 bytes in hex, `rust/fingerprint.rs`), when accepted. A URL
  is here once the appliance accepted the feed file that carried its record, never before.
  `meta` names the fingerprints' version (`fingerprint`; none in a state of a fastfeed before
  version 2): fingerprints of another version match no record, so the next sync sends every
  record once again (`outdated` says so before it does).
* `pending`: the records of the last sync's feed set, in the set's order, with the fingerprint
  each will have once accepted (none for a delete); `meta` names the set (`pending_set`, an
  absolute path: a sync run again from another directory finds it) and the appliance its journal
  is kept for (`pending_journal`). The set is recorded once built, before any of it is sent (a
  sync killed while building leaves none). When the push journal says a file was accepted, its
  records move to `documents` (`commit_records`), in one transaction; a sync killed at any point
  leaves them pending, and the next sync finishes that set first. A set given up before every
  file of it is known accepted (`unknown_pending`) leaves its URLs `UNKNOWN` (or `MAYBE_HELD`,
  those the appliance held none of before): any file not journalled may have arrived (in flight
  when the sync was killed). A state of an earlier fastfeed names no `pending_journal`: it
  recorded its set before building it and pushed it only once built.
* `confirming`: while a sync confirms (`--confirm`), the URL of each record committed, by its
  place in the set, so that a file the appliance's feeder then failed can be undone
  (`unconfirm`).
* `snapshot` (temporary, on disk: it may hold millions of URLs, memory does not): the URL and
  fingerprint of each record of the snapshot being compared, its rowid the record's place in
  the snapshot plus one. Two columns and no index: filling it is most of the cost of a sync
  that finds nothing to send, and each column and index counted (1 M records: 7 columns and a
  primary key 2.5 s, these 1.5 s; a chunk's rows in one statement through json_each, 0.9 s).
  Its URLs are indexed only when the comparison needs it (a URL's hash repeats, or URLs were
  deleted). A sync that sends every record (`start_snapshot(pending=True)`) has no such table:
  the snapshot's rows are the pending set's first rows, written there directly, uncommitted
  until the set is recorded (copied from a snapshot's table, a first sync of 1 M URLs kept
  three copies of them on disk at once, 450 MB).

Nothing here holds every URL in memory: comparisons are joins, results are read in batches.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastfeed import _core
from fastfeed.errors import FastfeedError, StateError

SCHEMA_VERSION = 1
#: The version of the fingerprints this fastfeed makes (`rust/fingerprint.rs`).
FINGERPRINT_VERSION: str = _core.FINGERPRINT_VERSION
#: Rows read or written per round trip to SQLite.
BATCH = 10_000
#: Seconds a write waits for another process's to end (a sync holds its state's write lock
#: from its read of a first snapshot to the set recorded), before `StateError` says to wait.
WAIT = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    url TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, accepted REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY, url TEXT NOT NULL, fingerprint TEXT
);
CREATE TABLE IF NOT EXISTS confirming (seq INTEGER PRIMARY KEY, url TEXT NOT NULL);
"""

#: The fingerprint of a URL the appliance may hold in another version than the state knew (a
#: file its feeder failed after accepting it; a set given up, or lost, before every file of it was
#: known accepted): it matches no record, so the next sync sends the URL again, as a record or a
#: delete.
UNKNOWN = ""
#: The fingerprint of a URL the appliance held no version of before a set given up carried its
#: record (`unknown_pending`): it may hold it now (a file in flight) or not. The next sync sends
#: it again as `UNKNOWN`'s, but as a new record; a delete of it is sent too, and counted by the
#: mass-delete guard as one of the documents held: the appliance may hold them all (the files
#: arrived, their answers lost), and an empty or partial export must not delete them unasked.
MAYBE_HELD = "?"


@dataclass
class Diff:
    """How a snapshot differs from what the appliance holds."""

    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    #: URLs the state held before the sync (not those `MAYBE_HELD`).
    held: int = 0
    #: URLs `MAYBE_HELD` before the sync: the mass-delete guard counts them as held.
    maybe_held: int = 0
    #: Of the records and deletes to send, those of URLs whose version the appliance holds is
    #: not known (`UNKNOWN`, `MAYBE_HELD`): sent again whatever it holds.
    unknown: int = 0
    #: A few URLs of each kind, to show.
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def to_send(self) -> int:
        return self.new + self.changed + self.deleted


@dataclass(frozen=True)
class Changed:
    """A snapshot record to send: its place in the snapshot, URL and fingerprint."""

    seq: int
    url: str
    fingerprint: str


class SyncState:
    """A state file for `target` (the appliance and the datasource, as one string)."""

    def __init__(self, path: str | os.PathLike[str], target: str | None) -> None:
        """Opens the state of `target`, made if missing; with no target, an existing state of
        any (to look at it)."""
        self.path = Path(path)
        if target is None and not self.path.is_file():
            raise StateError(f"{self.path} does not exist: no sync used it as its state")
        if target is not None and not self.path.exists():
            _make(self.path, target)
        try:
            self._db = sqlite3.connect(
                self.path, timeout=WAIT, isolation_level=None, factory=_Connection
            )
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{self.path}: not a usable sync state: {exc}") from None
        self._db.state = self.path
        try:
            self.target = self._open(target)
        except BaseException:
            self._db.close()
            raise

    def _open(self, target: str | None) -> str:
        """Checks that the file is a state of `target` (any, if None); returns the target it is
        the state of. With no target, nothing is written: a sync holds the state's write lock
        while it reads and compares a first snapshot (`start_snapshot`), and looking at the
        state (`fastfeed state show`) meanwhile shows what it held before."""
        try:
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
            if not tables:
                raise _no_state(self.path)
            if "meta" not in tables:
                # Another program's database (a seedlist store...): not ours to add tables to.
                raise StateError(f"{self.path} is not a sync state")
            # Looked at before anything is written: a file refused is left as it was.
            version, held = self._meta("schema"), self._meta("target") or ""
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{self.path}: not a usable sync state: {exc}") from None
        if version is None:  # made in place by an earlier fastfeed, and cut short
            raise _no_state(self.path)
        if version != str(SCHEMA_VERSION):
            raise StateError(
                f"{self.path}: not a sync state of this fastfeed (format {version}; this one "
                f"reads format {SCHEMA_VERSION})"
            )
        if target is not None and held != target:
            raise StateError(
                f"{self.path} is the state of {held}, not of {target}: keep one state file per "
                "appliance and datasource"
            )
        try:
            if target is not None:  # tables a later version added
                self._db.executescript(_SCHEMA)
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # What is deleted is blanked (SQLite's default is not to, Debian's to): a URL the
            # state no longer holds leaves no trace in it. But where the pages freed hold what
            # the state keeps anyway (`_free_pending`); `forget` rewrites the file.
            self._db.execute("PRAGMA secure_delete=ON")
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{self.path}: not a usable sync state: {exc}") from None
        return held

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SyncState:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    #: Whether what is written is to be undone (`rehearsal`).
    _rehearsing = False

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, nested=self._rehearsing)

    @contextlib.contextmanager
    def rehearsal(self) -> Iterator[None]:
        """What is written to the state in this block is seen as written, then undone: a dry
        run does to the state what the sync would before comparing (a set lost given up), so
        that it finds what the sync would, and leaves the state as it was."""
        self._db.execute("BEGIN IMMEDIATE")
        self._rehearsing = True
        try:
            yield
        finally:
            self._rehearsing = False
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # What the appliance holds.

    def count(self) -> int:
        """The documents held (not the URLs `MAYBE_HELD`)."""
        query = "SELECT count(*) FROM documents WHERE fingerprint != ?"
        return int(self._db.execute(query, (MAYBE_HELD,)).fetchone()[0])

    def unknown(self) -> int:
        """URLs held as `UNKNOWN`: the next sync sends them again."""
        return self._count_of(UNKNOWN)

    def maybe_held(self) -> int:
        """URLs `MAYBE_HELD`: the next sync sends them again, or deletes them."""
        return self._count_of(MAYBE_HELD)

    def _count_of(self, fingerprint: str) -> int:
        query = "SELECT count(*) FROM documents WHERE fingerprint = ?"
        return int(self._db.execute(query, (fingerprint,)).fetchone()[0])

    def fingerprint(self, url: str) -> tuple[str, float] | None:
        """The fingerprint of `url`'s accepted record and when it was accepted."""
        row = self._db.execute(
            "SELECT fingerprint, accepted FROM documents WHERE url = ?", (url,)
        ).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def documents(self) -> Iterator[tuple[str, str, float]]:
        """What the appliance holds: URL, fingerprint, when accepted; in URL order."""
        cursor = self._db.execute("SELECT url, fingerprint, accepted FROM documents ORDER BY url")
        while rows := cursor.fetchmany(BATCH):
            yield from rows

    def forget(self, urls: Iterable[str] | None) -> int:
        """Forgets that the appliance holds `urls` (None: every URL, and the unfinished set):
        the next sync sends them again (as new), and the file keeps no trace of them (it is
        rewritten: a state of 1 M URLs, 0.6 s). Returns how many it held."""
        with self._transaction():
            if urls is None:
                forgotten = self._db.execute("DELETE FROM documents").rowcount
                self._drop_pending()
            else:
                forgotten = self._db.executemany(
                    "DELETE FROM documents WHERE url = ?", ((u,) for u in urls)
                ).rowcount
        # No trace of them left in the file: pages freed earlier may hold them (a pushed set's,
        # `_free_pending`), which only rewriting the file without free pages removes; and the
        # WAL's earlier frames, which the checkpoint empties.
        if int(self._db.execute("PRAGMA freelist_count").fetchone()[0]):
            self._db.execute("VACUUM")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return forgotten

    @property
    def outdated(self) -> str | None:
        """The version of the fingerprints held, when it is not this fastfeed's and URLs are
        held: none of them matches a record (the next sync sends every record again)."""
        held = self._meta("fingerprint") or "fastfeed-fp1"  # states before it was recorded
        return held if held != FINGERPRINT_VERSION and self.count() else None

    @property
    def last_sync(self) -> float | None:
        value = self._meta("last_sync")
        return None if value is None else float(value)

    def synced(self) -> None:
        """Notes that a sync finished: the appliance holds the snapshot it read."""
        with self._transaction():
            self._set_meta("last_sync", repr(time.time()))

    # The snapshot being compared.

    #: Where the snapshot's rows are (`start_snapshot`): the table, and each row's place in the
    #: snapshot (from 0) as an expression of its columns.
    _snapshot, _seq = "temp.snapshot", "rowid - 1"
    #: The records taken into the pending set as the snapshot's rows (`start_snapshot`).
    _records = 0

    def start_snapshot(self, *, pending: bool = False) -> None:
        """Starts taking a snapshot's rows (`add_snapshot`). With `pending`, for a sync that
        sends every record in the snapshot's order, they are the pending set's first rows: one
        copy of each URL on disk, not two; uncommitted until `set_pending_snapshot` records
        the set (another end, `end_snapshot`, or a killed sync, rolls them back)."""
        # Sorting and the index on disk beyond this cache: memory stays flat at 10 M URLs.
        self._db.execute("PRAGMA cache_size=-65536")
        self._db.execute("PRAGMA temp_store=FILE")
        self._db.execute("DROP TABLE IF EXISTS temp.snapshot")
        self._records = 0
        if pending:
            self._snapshot, self._seq = "main.pending", "seq"
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM pending")  # a set finished, or none (`_finish_pending`)
            return
        self._snapshot, self._seq = "temp.snapshot", "rowid - 1"
        self._db.execute(
            "CREATE TEMP TABLE snapshot (url TEXT NOT NULL, fingerprint BLOB NOT NULL)"
        )
        if not self._rehearsing:  # a rehearsal's transaction holds the rows as well
            self._db.execute("BEGIN")

    def add_snapshot(self, rows: str) -> None:
        """Adds records, in snapshot order: a JSON array of [url, fingerprint], as the core's
        `fingerprint_jsonl` makes it. One statement a chunk: binding rows one by one from
        Python took twice as long."""
        values = "json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)"
        if self._snapshot == "main.pending":
            self._records += self._db.execute(
                f"INSERT INTO pending SELECT ? + key, {values}", (self._records, rows)
            ).rowcount
        else:
            self._db.execute(f"INSERT INTO temp.snapshot SELECT {values}", (rows,))

    def compare(self, *, resend_all: bool = False, repeats: bool = True) -> Diff:
        """Compares the snapshot with what the appliance holds. A URL twice in the snapshot is
        ambiguous (which record should the appliance hold?): `DuplicateUrl` names it. Only
        when `repeats` (the snapshot's URL hashes repeat) is it searched for, by a unique index:
        indexing every URL was a sixth of the time of a sync that finds nothing to send."""
        db, snapshot, seq = self._db, self._snapshot, self._seq
        if snapshot != "main.pending" and not self._rehearsing:
            db.execute("COMMIT")
        if repeats:
            try:
                self._index_urls(unique=True)
            except sqlite3.IntegrityError:
                url, first, second = db.execute(
                    f"SELECT url, min({seq}), max({seq}) FROM {snapshot} GROUP BY url "
                    f"HAVING count(*) > 1 ORDER BY max({seq}) LIMIT 1"
                ).fetchone()
                raise DuplicateUrl(url, first, second) from None
        maybe = self.maybe_held()
        diff = Diff(held=self.count(), maybe_held=maybe, unknown=self.unknown() + maybe)
        # A URL `MAYBE_HELD` is new: the appliance held none of it before (see `MAYBE_HELD`).
        new, maybe_new, changed, unchanged = db.execute(
            "SELECT sum(d.url IS NULL), sum(d.fingerprint = :maybe), "
            "sum(d.fingerprint != s.fingerprint AND d.fingerprint != :maybe), "
            "sum(d.fingerprint = s.fingerprint) "
            f"FROM {snapshot} s LEFT JOIN documents d ON d.url = s.url",
            {"maybe": MAYBE_HELD},
        ).fetchone()
        diff.new, diff.changed, diff.unchanged = (
            int(new or 0) + int(maybe_new or 0),
            int(changed or 0),
            int(unchanged or 0),
        )
        # Snapshot URLs are unique: the URLs held (or maybe) that it did not find are deleted.
        diff.deleted = diff.held + maybe - diff.changed - diff.unchanged - int(maybe_new or 0)
        if diff.deleted:
            self._index_urls()
        examples = {
            "new": (diff.new, f"SELECT s.url FROM {snapshot} s WHERE NOT EXISTS "
                    "(SELECT 1 FROM documents d WHERE d.url = s.url AND d.fingerprint != :maybe) "
                    "LIMIT 3"),
            "changed": (diff.changed, f"SELECT s.url FROM {snapshot} s JOIN documents d "
                        "ON d.url = s.url WHERE d.fingerprint != s.fingerprint "
                        "AND d.fingerprint != :maybe LIMIT 3"),
            "deleted": (diff.deleted, "SELECT url FROM documents d WHERE NOT EXISTS "
                        f"(SELECT 1 FROM {snapshot} s WHERE s.url = d.url) LIMIT 3"),
        }  # fmt: skip
        diff.examples = {
            k: [r[0] for r in db.execute(q, {"maybe": MAYBE_HELD})] if n else []
            for k, (n, q) in examples.items()
        }
        if resend_all:
            diff.changed += diff.unchanged
            diff.unchanged = 0
        self._resend_all = resend_all
        if snapshot == "main.pending" and not diff.to_send:
            db.execute("ROLLBACK")  # no set to send (an empty snapshot, nothing held)
        return diff

    def changed(self) -> Iterator[Changed]:
        """The snapshot's records to send, in snapshot order."""
        where = "" if self._resend_all else "WHERE d.fingerprint IS NOT s.fingerprint "
        cursor = self._db.execute(
            f"SELECT s.{self._seq}, s.url, s.fingerprint "
            f"FROM {self._snapshot} s LEFT JOIN documents d ON d.url = s.url "
            f"{where}ORDER BY s.rowid"
        )
        while rows := cursor.fetchmany(BATCH):
            for seq, url, fp in rows:
                yield Changed(seq, url, fp)

    def _index_urls(self, *, unique: bool = False) -> None:
        """Finding the held URLs a snapshot has not needs its URLs indexed (else each held URL
        would scan the whole snapshot); `unique` finds a URL there twice. The pending set's
        index is dropped before the set is recorded."""
        schema, table = self._snapshot.split(".")
        kind = "UNIQUE INDEX" if unique else "INDEX IF NOT EXISTS"
        self._db.execute(f"CREATE {kind} {schema}.{table}_url ON {table} (url)")

    def deleted(self) -> Iterator[str]:
        """The URLs the appliance holds that the snapshot has not, in URL order."""
        self._index_urls()
        cursor = self._db.execute(
            "SELECT url FROM documents d WHERE NOT EXISTS "
            f"(SELECT 1 FROM {self._snapshot} s WHERE s.url = d.url) ORDER BY url"
        )
        while rows := cursor.fetchmany(BATCH):
            yield from (row[0] for row in rows)

    def end_snapshot(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        self._db.execute("DROP TABLE IF EXISTS temp.snapshot")

    # The set being sent.

    @property
    def pending_set(self) -> Path | None:
        """The feed set of a sync whose records are not all accepted yet. Absolute; an earlier
        fastfeed recorded it as given, relative to the directory that sync ran in, which is
        taken to be the current one (where the default `--out` of a sync run again puts its
        set); a set not found there is lost (`unknown_pending`)."""
        value = self._meta("pending_set")
        return None if value is None else Path(value)

    @property
    def pending_journal(self) -> str | None:
        """The target the pending set's push journal is kept for (none in a state of an earlier
        fastfeed)."""
        return self._meta("pending_journal")

    @contextlib.contextmanager
    def recording_pending(
        self, feed_set: Path, journal: str, records: Iterable[tuple[str, str | None]]
    ) -> Iterator[None]:
        """Records the set about to be built and sent: its records (URL, fingerprint, None for a
        delete) in the set's order, and the target its push journal is kept for (`journal`).
        Written before the body (the set's build) runs and committed when it ends, before the
        first file is sent, so that a sync killed while pushing knows what each accepted file
        carried; one killed while building, or whose build fails, records nothing."""
        with self._transaction():
            self._db.execute("DELETE FROM pending")
            batch: list[tuple[int, str, str | None]] = []
            for seq, (url, fp) in enumerate(records):
                batch.append((seq, url, fp))
                if len(batch) >= BATCH:
                    self._db.executemany("INSERT INTO pending VALUES (?, ?, ?)", batch)
                    batch.clear()
            self._db.executemany("INSERT INTO pending VALUES (?, ?, ?)", batch)
            yield
            self._name_pending(feed_set, journal)

    def _name_pending(self, feed_set: Path, journal: str) -> None:
        self._set_meta("pending_set", os.fspath(feed_set.absolute()))
        self._set_meta("pending_journal", journal)

    def set_pending_snapshot(self, feed_set: Path, journal: str, deletes: bool) -> None:
        """Records the set about to be sent, as `recording_pending` does, when it carries every
        record of the snapshot in its order (taken into the pending set as it was read:
        `start_snapshot(pending=True)`), then (`deletes`) a delete for each URL held that the
        snapshot has not, in URL order (as `deleted` lists them). No row goes through Python."""
        if deletes:
            self._index_urls()
            self._db.execute(
                "INSERT INTO pending SELECT ? - 1 + row_number() OVER (ORDER BY url), url, NULL "
                "FROM documents d WHERE NOT EXISTS (SELECT 1 FROM pending s WHERE s.url = d.url)",
                (self._records,),
            )
        self._db.execute("DROP INDEX IF EXISTS main.pending_url")
        self._name_pending(feed_set, journal)
        self._db.execute("COMMIT")

    def commit_records(
        self, accepted: Iterable[tuple[int, int]], *, confirming: bool = False
    ) -> None:
        """The appliance accepted the files that carried the pending records of each span
        `(first, end)` (end excluded): they become what it holds, all in one transaction. Done
        again, it changes nothing. `confirming` keeps their URLs until the sync knows whether
        the feeder processed the files."""
        spans = list(_joined(accepted))
        if not spans:
            return
        now = time.time()
        with self._transaction():
            for first, end in spans:
                if confirming:
                    self._db.execute(
                        "INSERT OR REPLACE INTO confirming SELECT seq, url FROM pending "
                        "WHERE seq >= ? AND seq < ?",
                        (first, end),
                    )
                # In URL order, the documents' own, and one transaction for every file: a
                # million URLs committed file by file in the set's order took 3.3 s, this 1.3 s
                # (each insert landed on another page of the index, written again each time).
                self._db.execute(
                    "INSERT OR REPLACE INTO documents SELECT url, fingerprint, ? FROM pending "
                    "WHERE seq >= ? AND seq < ? AND fingerprint IS NOT NULL ORDER BY url",
                    (now, first, end),
                )
                self._db.execute(
                    "DELETE FROM documents WHERE url IN (SELECT url FROM pending "
                    "WHERE seq >= ? AND seq < ? AND fingerprint IS NULL)",
                    (first, end),
                )
                whole = "SELECT min(seq) >= ? AND max(seq) < ? FROM pending"
                if self._db.execute(whole, (first, end)).fetchone()[0]:
                    self._free_pending()  # the usual end of a push
                else:
                    self._db.execute("DELETE FROM pending WHERE seq >= ? AND seq < ?", (first, end))
            # What it holds now is (in part) of this version; older ones still differ.
            self._set_meta("fingerprint", FINGERPRINT_VERSION)

    def unconfirm(self, first: int, end: int) -> int:
        """The appliance's feeder failed the file that carried records `first` to `end` of the
        set after accepting it: what the appliance holds for their URLs is unknown (a changed
        record's old version, a deleted one still there), so each becomes held with the
        `UNKNOWN` fingerprint and the next sync sends it again. Returns how many URLs."""
        with self._transaction():
            return self._db.execute(
                "INSERT OR REPLACE INTO documents SELECT url, ?, ? FROM confirming "
                "WHERE seq >= ? AND seq < ?",
                (UNKNOWN, time.time(), first, end),
            ).rowcount

    def unconfirm_left(self) -> int:
        """A sync killed while it confirmed, or whose confirmation failed, left the URLs of files
        whose outcome it never read: each becomes held with the `UNKNOWN` fingerprint, as a
        failed file's do, so that the next sync sends it again (sent twice is harmless; taken as
        held, a file the feeder failed would stay missing). Returns how many URLs."""
        with self._transaction():
            count = self._db.execute(
                "INSERT OR REPLACE INTO documents SELECT url, ?, ? FROM confirming",
                (UNKNOWN, time.time()),
            ).rowcount
            self._db.execute("DELETE FROM confirming")
        return count

    def end_confirming(self) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM confirming")

    def _free_pending(self) -> None:
        """Deletes the pending set, every record of it now in `documents`, without a WHERE:
        SQLite then frees the table's pages whole, and (secure_delete=FAST) does not write each
        again to blank it (a first sync's WAL: 165 MB less at 1 M URLs), for they hold the URLs
        and fingerprints `documents` holds anyway. Not the URLs of the deletes, which the state
        no longer holds: they are blanked first (the set's last rows: few pages)."""
        self._db.execute("DELETE FROM pending WHERE fingerprint IS NULL")
        self._db.execute("PRAGMA secure_delete=FAST")
        try:
            self._db.execute("DELETE FROM pending")
        finally:
            self._db.execute("PRAGMA secure_delete=ON")

    def pending_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM pending").fetchone()[0])

    def clear_pending(self) -> None:
        """The pending set is done with: every file of it accepted."""
        with self._transaction():
            self._drop_pending()

    def unknown_pending(self) -> int:
        """Gives up the pending set, whose records left are of files not known to be accepted
        (`fastfeed state abandon`, or a set that cannot be read). Any of them may have arrived
        all the same (in flight when the sync was killed; a request whose answer was lost), so
        each of their URLs becomes held with the `UNKNOWN` fingerprint, or `MAYBE_HELD` if the
        appliance held none of it before: the next sync sends it again, as the record the
        snapshot has or as a delete. Returns how many URLs."""
        with self._transaction():
            count = self._db.execute(
                "INSERT OR REPLACE INTO documents SELECT p.url, "
                "CASE WHEN d.url IS NULL OR d.fingerprint = :maybe THEN :maybe ELSE :unknown END, "
                ":now FROM pending p LEFT JOIN documents d ON d.url = p.url",
                {"maybe": MAYBE_HELD, "unknown": UNKNOWN, "now": time.time()},
            ).rowcount
            self._drop_pending()
        return count

    def _drop_pending(self) -> None:
        self._db.execute("DELETE FROM pending")
        self._db.execute("DELETE FROM meta WHERE key IN ('pending_set', 'pending_journal')")


def work_prefix(state: Path) -> str:
    """How the names of what is made beside the state at `state` begin (a new state, a sync's
    work): what a sync killed meanwhile left, the next one removes."""
    return f".{state.name}.sync-"


def _make(path: Path, target: str) -> None:
    """Makes a new state of `target` at `path`: complete beside it, then renamed into place, so
    that a sync killed meanwhile leaves no empty file there (an existing file that holds no
    state is refused, never taken for a new state). One sync at a time makes it (`locked`)."""
    try:
        work = Path(tempfile.mkdtemp(prefix=work_prefix(path), dir=path.parent))
    except OSError as exc:
        raise StateError(f"cannot make the sync state {path}: {exc.strerror}") from None
    try:
        new = work / path.name
        db = sqlite3.connect(new, isolation_level=None, factory=_Connection)
        db.state = path
        try:
            db.executescript(_SCHEMA)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            with _Transaction(db):
                for key, value in (
                    ("schema", str(SCHEMA_VERSION)),
                    ("target", target),
                    ("fingerprint", FINGERPRINT_VERSION),
                ):
                    db.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
        finally:
            db.close()  # the WAL checkpointed into the file, and removed
        os.rename(new, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _no_state(path: Path) -> StateError:
    return StateError(
        f"{path} holds no sync state (it is empty: emptied, or cut short by a crash or a full "
        "disk?). It is not taken for a new state, which would send no delete for what the "
        "appliance holds and the source no longer has. Restore it from a backup and sync "
        "again; or remove it to start over: the next sync then sends every record again and "
        "deletes nothing (remove from the index what the source no longer has by hand, or "
        "reset the index first)"
    )


def _joined(spans: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Spans with those that touch joined: one statement for many files."""
    current: tuple[int, int] | None = None
    for first, end in spans:
        if current is not None and current[1] == first:
            current = (current[0], end)
            continue
        if current is not None:
            yield current
        current = (first, end)
    if current is not None:
        yield current


class DuplicateUrl(FastfeedError):
    """A URL found twice in a snapshot: at records `first` and `second` (places in it)."""

    def __init__(self, url: str, first: int, second: int) -> None:
        super().__init__(url)
        self.url, self.first, self.second = url, first, second


def in_use(path: str | os.PathLike[str]) -> str:
    """What to say when another sync holds the state at `path`."""
    return f"another sync is using {os.fspath(path)}; wait for it to end"


class _Connection(sqlite3.Connection):
    """A state's connection: SQLite's "database is locked" (another process held the state's
    write lock longer than the wait, as a sync does while it reads a first snapshot) is a
    `StateError` that says what holds it and to wait; SQLite's other failures to run a
    statement (a full disk, most often) are a `StateError` naming the state and the cause."""

    #: The state's path, as the user gave it.
    state: Path

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        with self._waited():
            return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        with self._waited():
            return super().executemany(sql, parameters)

    def executescript(self, script: str, /) -> sqlite3.Cursor:
        with self._waited():
            return super().executescript(script)

    @contextlib.contextmanager
    def _waited(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise StateError(in_use(self.state)) from None
            raise StateError(_failed(self.state, exc)) from None


def _failed(state: Path, exc: sqlite3.OperationalError) -> str:
    """What to say when SQLite cannot use the state. A full disk is not always SQLite's
    SQLITE_FULL: it may fail to grow its shared-memory file first, "disk I/O error"."""
    try:
        full = os.statvfs(state.parent).f_bavail == 0
    except OSError:
        full = False
    if full or exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL:
        return (
            f"cannot write the sync state {state}: the disk is full ({exc}); free space where "
            "it is (or in the temporary directory, where SQLite sorts) and sync again"
        )
    return f"cannot use the sync state {state}: {exc} ({exc.sqlite_errorname})"


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception (unless SQLite rolled it back
    already, as it does on a full disk: a ROLLBACK then would hide why). `nested` in a
    transaction already begun (`SyncState.rehearsal`): a savepoint, released or rolled back to."""

    def __init__(self, db: sqlite3.Connection, *, nested: bool = False) -> None:
        self._db, self._nested = db, nested

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("SAVEPOINT nested" if self._nested else "BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self._db.execute("RELEASE nested" if self._nested else "COMMIT")
        elif self._db.in_transaction:
            if self._nested:
                self._db.execute("ROLLBACK TO nested")
                self._db.execute("RELEASE nested")
            else:
                self._db.execute("ROLLBACK")
