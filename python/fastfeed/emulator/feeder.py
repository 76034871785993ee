"""The emulated feeder: drains accepted feed files into the index, after the feedergate answered.

As on the appliance, `Success` only means the file was received; validation and indexing happen
later, one file at a time, and their outcome shows only on the status page (and in `pushes()`).
"""

from __future__ import annotations

import asyncio
import binascii
import json
import logging
import sqlite3
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from lxml import etree

from fastfeed.emulator.faults import FEEDER_FAILURE
from fastfeed.emulator.index import Changes, Index, Push
from fastfeed.emulator.security import Acl, acl_principals, legacy_acl, membership
from fastfeed.emulator.status import describe, outcome_line
from fastfeed.sets.codec import decode_base64, inflate
from fastfeed.sets.validate import ACL_TWICE, iterparse, metadata_ignored, validate_file

#: The largest document the emulator keeps: a content inflating past it (a zlib bomb of a few MB
#: can make gigabytes) skips its record, as a malformed one does, instead of filling the memory.
MAX_DOCUMENT_BYTES = 100 * 10**6

#: How many validation problems the feed log keeps for a failed feed.
MAX_REPORTED = 5

LOG = logging.getLogger(__name__)


def feed_kind(datasource: str, feedtype: str) -> str:
    """ "web" for URLs the appliance would crawl, "content" for documents carried in the feed."""
    return "web" if datasource == "web" or feedtype == "metadata-and-url" else "content"


def _decode_content(elem: etree._Element) -> bytes:
    text = elem.text or ""
    encoding = elem.get("encoding")
    if encoding == "base64binary":
        return decode_base64(text)
    if encoding == "base64compressed":
        return inflate(decode_base64(text), MAX_DOCUMENT_BYTES)
    return text.encode("utf-8")


def _decode_meta(elem: etree._Element) -> tuple[str, str]:
    name, content = elem.get("name", ""), elem.get("content", "")
    if elem.get("encoding") == "base64binary":
        # Both attributes are encoded when the encoding is given (guide: Metadata Base64 Encoding).
        name = decode_base64(name).decode("utf-8", "replace")
        content = decode_base64(content).decode("utf-8", "replace")
    return name, content


class _Applier:
    """Applies the records of one feed inside one transaction."""

    def __init__(self, index: Index, db: sqlite3.Connection, push: Push) -> None:
        self.index = index
        self.db = db
        self.push = push
        self.kind = feed_kind(push.datasource, push.feedtype)
        self.changes = Changes()

    def acl(self, elem: etree._Element, group_action: str) -> None:
        """A standalone <acl url=...>: the ACL of a folder or share, not a document."""
        url = elem.get("url", "")
        if group_action == "delete":
            self.db.execute(
                "DELETE FROM acls WHERE datasource = ? AND url = ?", (self.push.datasource, url)
            )
            return
        self._put_acl(self._acl(url, elem, standalone=True))

    def _acl(self, url: str, elem: etree._Element, *, standalone: bool = False) -> Acl:
        return Acl(
            url,
            acl_principals(elem),
            elem.get("inheritance-type", "leaf-node"),
            elem.get("inherit-from"),
            standalone,
        )

    def _put_acl(self, acl: Acl) -> None:
        acl = replace(acl, datasource=self.push.datasource, push_id=self.push.id)
        self.index.put_acl(self.db, acl)

    def record(self, elem: etree._Element, group_action: str) -> None:
        self.changes.records += 1
        url = elem.get("url", "")
        # A record's own action overrides its group's.
        action = elem.get("action") or group_action
        if action == "delete":
            self.db.execute(
                "DELETE FROM documents WHERE datasource = ? AND url = ?",
                (self.push.datasource, url),
            )
            self.db.execute(
                "DELETE FROM acls WHERE datasource = ? AND url = ? AND NOT standalone",
                (self.push.datasource, url),
            )
            self.changes.deleted += 1
            return
        try:
            contents = [_decode_content(c) for c in elem.iterchildren("content")]
            metadata_elems = list(elem.iterchildren("metadata"))
            metadata = [_decode_meta(m) for md in metadata_elems for m in md.iterchildren("meta")]
        except (binascii.Error, ValueError, zlib.error) as exc:
            self._skip(elem, str(exc))
            return
        if metadata_ignored(self.push.datasource, self.push.feedtype):
            # As `fastfeed validate` warns.
            metadata_elems, metadata = [], []
        acl_elem = elem.find("acl")
        acl = None if acl_elem is None else self._acl(url, acl_elem)
        legacy = legacy_acl(url, metadata)
        if acl is not None and legacy is not None:
            # The guide forbids it and names no consequence: skipped as a malformed record.
            self._skip(elem, ACL_TWICE)
            return
        if legacy is not None and any(m.get("overwrite-acls") == "false" for m in metadata_elems):
            # overwrite-acls="false": the metadata's principals add to the URL's ACL.
            old_acl = self.index.acl(self.db, self.push.datasource, url)
            if old_acl is not None:
                added = [p for p in legacy.principals if p not in old_acl.principals]
                legacy = replace(legacy, principals=old_acl.principals + tuple(added))
        old = self.db.execute(
            "SELECT content, metadata FROM documents WHERE datasource = ? AND url = ?",
            (self.push.datasource, url),
        ).fetchone()
        content: bytes | None = None
        if self.kind == "content":
            # Incremental feeds may update only the metadata, or only the content, of a URL.
            if contents:
                content = b"".join(contents)
            elif old is not None:
                content = old[0]
        metadata_json = json.dumps(metadata)
        if not metadata_elems and old is not None:
            metadata_json = old[1]
        # The guide: "The PageRank for a URL overrides one for a group."
        pagerank = elem.get("pagerank") or elem.getparent().get("pagerank")
        self.db.execute(
            "INSERT OR REPLACE INTO documents (datasource, url, kind, mimetype, content, metadata,"
            " displayurl, last_modified, lock, authmethod, pagerank, crawl_immediately,"
            " crawl_once, push_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.push.datasource,
                url,
                self.kind,
                elem.get("mimetype", ""),
                content,
                metadata_json,
                elem.get("displayurl"),
                elem.get("last-modified"),
                elem.get("lock") == "true",
                elem.get("authmethod", "none"),
                int(pagerank) if pagerank and pagerank.isdigit() else None,
                elem.get("crawl-immediately") == "true",
                elem.get("crawl-once") == "true",
                self.push.id,
            ),
        )
        new_acl = acl or legacy
        if new_acl is not None:
            self._put_acl(new_acl)
        self.changes.added += 1

    def _skip(self, elem: etree._Element, error: str) -> None:
        """Skips a record as the appliance does, in its words (002: "Skipping the record,
        Line number: nn"): the feed still applies, and fails in error at its end."""
        self.changes.errors.append(
            f"Skipping the record, Line number: {elem.sourceline}, Error: {error}"
        )

    def outcome(self) -> str:
        errors = self.changes.errors
        if not errors:
            return "applied"
        return (
            f"failed in error: documents included: {self.changes.added}, documents in error:"
            f" {len(errors)}, error details: {errors[0]}"
        )


def _free(elem: etree._Element) -> None:
    """Frees an applied element and those before it, so a 1 GB feed applies in little memory."""
    elem.clear(keep_tail=False)
    parent = elem.getparent()
    while parent is not None and elem.getprevious() is not None:
        del parent[0]


def _refused(index: Index, db: sqlite3.Connection, push: Push) -> str | None:
    """Validates the received file as the kind, datasource and feed type it was pushed as (the
    guide: those of the XML header "are ignored"); a file with problems fails in error as a
    whole, with its first problems as the log's details. Problems the appliance tolerates (an
    empty principal, which it skips) do not count, nor those for which it skips the record,
    which applying does."""
    assert push.path is not None
    found = validate_file(
        push.path,
        datasource=push.datasource,
        feedtype=push.feedtype,
        max_problems=MAX_REPORTED,
        kind=push.kind,
    )
    problems = [p for p in found if p.fatal and not p.skips_record]
    if not problems:
        return None
    details = "; ".join(
        f"line {p.line}: {p.message}" if p.line is not None else p.message for p in problems
    )
    outcome = f"failed in error: {details}"
    index.finish_push(db, push.id, outcome, Changes())
    return outcome


def apply_feed(index: Index, push: Push) -> str:
    """Validates one received feed file and, if valid, applies it; returns the outcome."""
    assert push.path is not None
    with index.transaction() as db:
        refused = _refused(index, db, push)
        if refused is not None:
            return refused
        applier = _Applier(index, db, push)
        if applier.kind == "content" and push.feedtype == "full":
            # A full feed replaces everything its datasource held, ACLs included.
            db.execute("DELETE FROM documents WHERE datasource = ?", (push.datasource,))
            db.execute("DELETE FROM acls WHERE datasource = ?", (push.datasource,))
        group_action = "add"
        for event, elem in iterparse(push.path, ("group", "record", "acl")):
            if elem.tag == "group":
                group_action = elem.get("action", "add")
            elif event == "end" and elem.tag == "record":
                applier.record(elem, group_action)
                _free(elem)
            elif event == "end" and elem.getparent().tag == "group":
                applier.acl(elem, group_action)
                _free(elem)
        outcome = applier.outcome()
        index.finish_push(db, push.id, outcome, applier.changes)
        return outcome


def apply_groups(index: Index, push: Push) -> str:
    """Validates one received groups feed and, if valid, applies it: each membership adds the
    group or replaces its members; a full groups feed first deletes every group of every
    groupsource, as the appliance does."""
    assert push.path is not None
    with index.transaction() as db:
        refused = _refused(index, db, push)
        if refused is not None:
            return refused
        changes = Changes()
        if push.feedtype == "full":
            changes.deleted = db.execute("DELETE FROM memberships").rowcount
        for event, elem in iterparse(push.path, ("membership",)):
            if event != "end":
                continue
            changes.records += 1
            group = membership(elem)
            if group is None:
                changes.errors.append(
                    f"Skipping the membership, Line number: {elem.sourceline}, Error: the group"
                    " has no name"
                )
            else:
                index.put_membership(
                    db, replace(group, groupsource=push.datasource, push_id=push.id)
                )
                changes.added += 1
            _free(elem)
        outcome = "applied"
        if changes.errors:
            outcome = (
                f"failed in error: memberships included: {changes.added}, in error:"
                f" {len(changes.errors)}, error details: {changes.errors[0]}"
            )
        index.finish_push(db, push.id, outcome, changes)
        return outcome


class Feeder:
    """Drains the backlog at `drain_per_second` files per second (None: as fast as it can)."""

    def __init__(self, index: Index, drain_per_second: float | None) -> None:
        if drain_per_second is not None and drain_per_second <= 0:
            raise ValueError(f"the drain rate must be positive, not {drain_per_second}")
        self.index = index
        self.drain_per_second = drain_per_second
        self._queue: asyncio.Queue[Push] = asyncio.Queue()
        self._running = asyncio.Event()
        self._running.set()
        self._backlog = 0
        #: The id of the push being applied now, if any (the Feeds page's "in progress").
        self.applying: int | None = None
        self._idle = threading.Condition()
        # One worker thread, so feeds apply in arrival order and the event loop keeps answering.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="emulator-feeder")
        self._task: asyncio.Task[None] | None = None
        #: Pushes to fail when processed (`Fault.fail_in_feeder`).
        self._failing: set[int] = set()

    @property
    def backlog(self) -> int:
        """Accepted feed files not yet processed (the one being applied included)."""
        return self._backlog

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._drain())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._worker.shutdown(wait=True)

    def enqueue(self, push: Push, *, fail: bool = False) -> None:
        if fail:
            self._failing.add(push.id)
        with self._idle:
            self._backlog += 1
        self._queue.put_nowait(push)

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def wait_idle(self, timeout: float) -> bool:
        """Blocks (in a thread other than the event loop's) until the backlog is empty."""
        with self._idle:
            return self._idle.wait_for(lambda: self._backlog == 0, timeout)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            push = await self._queue.get()
            if self.drain_per_second is not None:
                await asyncio.sleep(1 / self.drain_per_second)
            await self._running.wait()
            try:
                await loop.run_in_executor(self._worker, self._apply, push)
            finally:
                with self._idle:
                    self._backlog -= 1
                    self._idle.notify_all()

    def _apply(self, push: Push) -> None:
        self.applying = push.id
        try:
            if push.id in self._failing:
                self._failing.discard(push.id)
                with self.index.transaction() as db:
                    self.index.finish_push(db, push.id, FEEDER_FAILURE, Changes())
            else:
                (apply_groups if push.kind == "groups" else apply_feed)(self.index, push)
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop the feeder
            with self.index.transaction() as db:
                outcome = f"failed in error: {type(exc).__name__}: {exc}"
                self.index.finish_push(db, push.id, outcome, Changes())
        finally:
            self.applying = None
            if push.path is not None:
                Path(push.path).unlink(missing_ok=True)
        done = self.index.push(push.id)
        level = logging.INFO if done.status() == "processed" else logging.WARNING
        LOG.log(level, "%s %s %s", done.client_ip, describe(done), outcome_line(done))
