"""Pushing Thunderstone sets to a Thunderstone Search Appliance: `push` and `push_async`.

A Thunderstone set (a directory made by `fastfeed build --format thunderstone`) holds
`ThunderstoneReplication` documents; its manifest entries have kind `thunderstone`, and their
`datasource` is the receiving profile. Each file is POSTed to the profile's
`.../dowalk/recvdata.xml` URL as the url-encoded form fields `profile` and `data`.

Unlike the GSA feedergate, the appliance loads the items while the request is open and answers
a `ThunderstoneReplicationResult` with one `ItemResult` (`Status`, `Info`) per item, in the
order of the items: so the outcome of every record is known when the request returns, and a
failed item is reported with the URL found at its position in the file sent (the reply does
not repeat URLs).

Order and pace: sets go one after the other, in the order given, and the files of a set one at
a time in manifest order. The appliance does the work inside each request, so overlapping
requests would only compete for it, and a later file may update or delete what an earlier one
inserted. A file whose request could not be delivered (after the retries) blocks the later files
of its set; a file delivered with some failed items does not (the failed items changed
nothing, which later files may build on as on the state before). Once every file of a set was
delivered, one `UI` item asks the appliance to update its search indexes, so the new data
becomes searchable without waiting for the profile's schedule.

Retries (HTTP 5xx, 408, 429, timeouts, dropped connections) send the whole file again, which
is harmless even if the appliance had loaded it before the answer was lost: every Type is
idempotent (I overwrites, U sets the same fields, D and DP delete what is already gone).

The push journal (`fastfeed.sets.journal`) records each file whose items were all loaded, and the
`UI` request as the set's pseudo-file `update-indexes` (keyed by the set's hashes): a re-run
sends only what is missing, and sends `UI` again only if it sent something or `UI` was never
acknowledged.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

from fastfeed.delivery.blocking import blocking
from fastfeed.delivery.body import check_file
from fastfeed.delivery.exchange import ANSWER_BYTES, exchange
from fastfeed.delivery.results import FeedFile, FileResult, Outcome, PushSummary
from fastfeed.delivery.retry import Again, gave_up, retrying, transport_problem
from fastfeed.delivery.settings import PushSettings, http_client
from fastfeed.errors import FastfeedError, FileChanged, PushError, ReplyError, SettingsError
from fastfeed.progress import Progress, Stage, stage
from fastfeed.sets.journal import Journal
from fastfeed.sets.manifest import ManifestEntry, read_manifest
from fastfeed.thunderstone.recvdata import (
    KIND,
    NO_PROFILE,
    NO_PROFILE_HELP,
    NOT_ALLOWED,
    NOT_ALLOWED_HELP,
    UPDATE_INDEXES,
    UPDATE_INDEXES_DOCUMENT,
    URL_HELP,
    FormBody,
    ItemResult,
    parse_reply,
    sent_items,
)

__all__ = [
    "ItemFailure",
    "ThunderstoneSummary",
    "push",
    "push_async",
    "thunderstone_sets",
    "url_settings",
]


@dataclass(frozen=True)
class ItemFailure:
    """An item the appliance did not load: `item` is its position in `file` (from 1)."""

    file: str
    item: int
    type: str
    url: str
    status: str
    info: str

    def describe(self) -> str:
        info = f" ({self.info})" if self.info else ""
        return f"{self.file}: item {self.item} {self.type} {self.url}: {self.status}{info}"


@dataclass
class ThunderstoneSummary(PushSummary):
    """A push's files (and `update-indexes` requests) with their outcomes, and the items the
    appliance refused."""

    failed_items: list[ItemFailure] = field(default_factory=list)

    @property
    def files(self) -> list[FileResult]:
        return [r for r in self.results if r.feed.entry.file != UPDATE_INDEXES]

    def to_dict(self) -> dict[str, object]:
        data = super().to_dict()
        data["failed_items"] = [asdict(f) for f in self.failed_items]
        return data


def url_settings(url: str, **options: Any) -> PushSettings:
    """`PushSettings` (TLS, timeouts, retries) for a recvdata.xml URL: the host, port and
    scheme come from the URL, the rest from `options`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"{url!r} is not an http(s) URL: {URL_HELP}")
    if not parts.path.endswith("/recvdata.xml"):
        raise SettingsError(f"{url!r} does not end in /recvdata.xml: {URL_HELP}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise SettingsError(f"{url!r}: {exc}") from None
    return PushSettings(host=parts.hostname, port=port, https=parts.scheme == "https", **options)


def thunderstone_sets(
    paths: Iterable[str | os.PathLike[str]],
) -> list[tuple[Path, list[ManifestEntry]]]:
    """The Thunderstone sets of these directories with their entries, in push order."""
    sets: dict[Path, list[ManifestEntry]] = {}
    for raw in paths:
        directory = Path(raw)
        if not directory.is_dir():
            problem = "does not exist" if not directory.exists() else "is not a directory"
            raise PushError(
                f"{directory} {problem}: give the directory of a set made by "
                "`fastfeed build --format thunderstone` (its files go together, then UI)",
                refused=True,
            )
        try:
            entries = read_manifest(directory)
        except FastfeedError as exc:
            raise PushError(str(exc), refused=True) from None
        others = sorted({e.kind for e in entries} - {KIND})
        if others:
            raise PushError(
                f"{directory}/manifest.jsonl has entries of kind {', '.join(others)}, not "
                f"{KIND}: push GSA feed sets with `fastfeed push`",
                refused=True,
            )
        sets[directory] = entries
    return list(sets.items())


class _Pusher:
    """One push: the client, the running summary and the progress line."""

    def __init__(
        self, url: str, settings: PushSettings, client: httpx.AsyncClient, line: Stage
    ) -> None:
        self.url = url
        self.settings = settings
        self.client = client
        self.line = line
        self.summary = ThunderstoneSummary(target=url)
        # Whether the appliance answered anything yet (see `transport_problem`).
        self.answered = False
        self.files = 0
        # For the line, kept as results come (it is drawn at each block sent): the files
        # accepted, the bytes of the files done with, and the file being sent: its bytes, its
        # form's length and how much of that went out.
        self.accepted = 0
        self.done_bytes = 0
        self.sending = (0, 1)
        self.sent = 0
        self.started = time.monotonic()

    async def push_set(self, directory: Path, entries: list[ManifestEntry]) -> None:
        with Journal(directory, self.url) as journal:
            delivered_now = False
            undelivered: FeedFile | None = None
            for entry in entries:
                feed = FeedFile(directory, entry)
                if undelivered is not None:
                    reason = f"not sent: {undelivered.entry.file} before it was not delivered"
                    self._add(FileResult(feed, Outcome.BLOCKED, 0, reason))
                elif journal.is_accepted(entry):
                    self._add(FileResult(feed, Outcome.SKIPPED, 0, "accepted by an earlier push"))
                else:
                    result, delivered = await self._send_file(feed)
                    if result.outcome is Outcome.ACCEPTED:
                        journal.record(entry)
                    delivered_now |= delivered
                    if not delivered:
                        undelivered = feed
                    self._add(result)
            await self._update_indexes(directory, entries, journal, delivered_now, undelivered)

    async def _update_indexes(
        self,
        directory: Path,
        entries: list[ManifestEntry],
        journal: Journal,
        delivered_now: bool,
        undelivered: FeedFile | None,
    ) -> None:
        """Sends the set's `UI` item once all its files were delivered."""
        if not entries:
            return
        profile = entries[0].datasource
        key = "sha256:" + hashlib.sha256("\n".join(e.digest for e in entries).encode()).hexdigest()
        entry = ManifestEntry(UPDATE_INDEXES, profile, "", 0, 0, key, KIND)
        feed = FeedFile(directory, entry)
        if undelivered is not None:
            reason = f"not sent: {undelivered.entry.file} was not delivered"
            self._add(FileResult(feed, Outcome.BLOCKED, 0, reason))
        elif not delivered_now and journal.is_accepted(entry):
            self._add(FileResult(feed, Outcome.SKIPPED, 0, "done by an earlier push"))
        else:
            form = urlencode({"profile": profile, "data": UPDATE_INDEXES_DOCUMENT}).encode()
            attempts, answer = await self._exchange(lambda: form, feed)
            if isinstance(answer, FileResult):
                self._add(answer)
                return
            results = self._check_configuration(answer, feed)
            if len(results) == 1 and results[0].ok:
                journal.record(entry)
                self._add(FileResult(feed, Outcome.ACCEPTED, attempts, "search indexes updated"))
            else:
                statuses = ", ".join(f"{r.status} {r.info}".strip() for r in results) or "nothing"
                message = f"the appliance answered {statuses} to UI (update search indexes)"
                self._add(FileResult(feed, Outcome.FAILED, attempts, message))

    async def _send_file(self, feed: FeedFile) -> tuple[FileResult, bool]:
        """Sends one file; returns its result and whether the appliance processed it."""
        body = FormBody(feed, self.settings.chunk_size, self._count)
        try:
            await asyncio.to_thread(check_file, feed)
            await asyncio.to_thread(body.measure)
        except (FileChanged, OSError) as exc:
            return FileResult(feed, Outcome.FAILED, 0, f"not sent: {exc}"), False
        self.sending = (feed.entry.bytes, max(body.length, 1))

        def fresh() -> FormBody:
            self.sent = 0  # a retry sends it all again
            return body

        try:
            attempts, answer = await self._exchange(fresh, feed, body.length)
        finally:
            self.sending, self.sent = (0, 1), 0
        if isinstance(answer, FileResult):
            return answer, False
        results = self._check_configuration(answer, feed)
        expected = feed.entry.records
        failed = [i for i, r in enumerate(results) if not r.ok]
        problems = []
        if len(results) != expected:
            problems.append(f"the appliance answered for {len(results)} of {expected} items")
        if failed:
            items = await asyncio.to_thread(sent_items, feed.path)
            for i in failed:
                kind, url = items[i] if i < len(items) else (results[i].type, "")
                result = results[i]
                self.summary.failed_items.append(
                    ItemFailure(str(feed.path), i + 1, kind, url, result.status, result.info)
                )
            problems.append(f"{len(failed)} of {expected} items not loaded")
        if problems:
            return FileResult(feed, Outcome.FAILED, attempts, "; ".join(problems)), True
        return FileResult(feed, Outcome.ACCEPTED, attempts, f"{expected} items loaded"), True

    def _check_configuration(self, results: list[ItemResult], feed: FeedFile) -> list[ItemResult]:
        """Stops the push on an answer that every later request would get too."""
        for result in results:
            help_ = {NOT_ALLOWED: NOT_ALLOWED_HELP, NO_PROFILE: NO_PROFILE_HELP}.get(result.status)
            if help_ is not None:
                info = f" ({result.info})" if result.info else ""
                raise PushError(
                    f"{self.url} answered {result.status!r}{info} for profile "
                    f"{feed.entry.datasource!r}: {help_}",
                    refused=True,
                )
        return results

    async def _exchange(
        self, body: Callable[[], Any], feed: FeedFile, length: int | None = None
    ) -> tuple[int, list[ItemResult] | FileResult]:
        """POSTs the form until the appliance answers or the retries are spent; returns the
        attempts and the item results, or the file's failure. `body` makes a fresh body for
        each attempt (a streamed one can be read only once)."""
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if length is not None:
            headers["Content-Length"] = str(length)

        async def attempt(attempts: int) -> list[ItemResult] | FileResult | Again:
            try:
                answer = await exchange(
                    self.client,
                    "POST",
                    self.url,
                    deadline=self.settings.deadline,
                    # An ItemResult for each item, each a few hundred bytes at most.
                    limit=ANSWER_BYTES + 1024 * feed.entry.records,
                    content=body(),
                    headers=headers,
                )
            except FileChanged as exc:
                return FileResult(feed, Outcome.FAILED, attempts, f"not sent: {exc}")
            except httpx.HTTPError as exc:
                return await transport_problem(
                    exc,
                    self.url,
                    "--cacert",
                    first=not self.answered,
                    address_hint="check the host and port in --url",
                    name_hint="check the host in --url",
                    plain_http_hint="give an http:// --url (or the HTTPS port in it)",
                    tls_port_hint="give an https:// --url (or the HTTP port in it)",
                )
            self.answered = True
            status, text = answer.status, answer.text.strip()
            if status == 200:
                if answer.cut:
                    message = f"the appliance's reply is longer than {len(answer.body):,} bytes"
                    return FileResult(feed, Outcome.FAILED, attempts, message)
                try:
                    return parse_reply(answer.body)
                except ReplyError as exc:
                    message = f"not a Thunderstone reply: {exc}"
                    return FileResult(feed, Outcome.FAILED, attempts, message)
            if status in (401, 403, 404, 405):
                raise PushError(
                    f"{self.url} answered HTTP {status}: {URL_HELP}; and the appliance (or "
                    "a proxy before it) must let this machine POST to it",
                    refused=True,
                )
            if status < 500 and status not in (408, 429):
                message = f"HTTP {status}: {text[:500]}"
                return FileResult(feed, Outcome.FAILED, attempts, message)
            return Again(f"HTTP {status}: {text[:200]}")

        attempts, outcome = await retrying(self.settings, attempt, self._count_retry)
        if isinstance(outcome, Again):
            return attempts, FileResult(feed, Outcome.FAILED, attempts, gave_up(outcome, attempts))
        return attempts, outcome

    def _count_retry(self) -> None:
        self.summary.retries += 1

    def _count(self, n: int) -> None:
        self.sent += n
        self._show()

    def _add(self, result: FileResult) -> None:
        self.summary.results.append(result)
        if result.feed.entry.file != UPDATE_INDEXES:
            self.accepted += result.outcome in (Outcome.ACCEPTED, Outcome.SKIPPED)
            self.done_bytes += result.feed.entry.bytes
        self._show()

    def _show(self) -> None:
        """The line: the bytes of the files done with (whatever the outcome), and the share
        of the one being sent."""
        size, length = self.sending
        failed = len(self.summary.failed_items)
        self.line.update(
            self.done_bytes + size * min(self.sent / length, 1.0),
            f"{self.accepted:,}/{self.files:,} files accepted, retries {self.summary.retries:,}"
            + (f", {failed:,} items failed" if failed else ""),
        )


async def push_async(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    url: str,
    settings: PushSettings | None = None,
    *,
    progress: Progress | None = None,
) -> ThunderstoneSummary:
    """Pushes Thunderstone sets (directories) to a recvdata.xml URL; `settings` (see
    `url_settings`) gives TLS, timeouts and retries. Files the journal says this URL accepted
    are skipped. Raises `PushError` (`.refused`, `.summary`) when the push cannot go on:
    `Not Allowed`, `No Profile`, TLS, a wrong URL."""
    expected = url_settings(url)
    settings = settings if settings is not None else expected
    if settings.base_url != expected.base_url:
        raise SettingsError(
            f"the settings are for {settings.base_url}, not {url}: see url_settings"
        )
    sets = thunderstone_sets([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    total = sum(e.bytes for _, entries in sets for e in entries)
    with stage(progress, "push", total) as line:
        async with http_client(settings) as client:
            pusher = _Pusher(url, settings, client, line)
            pusher.files = sum(len(entries) for _, entries in sets)
            try:
                for directory, entries in sets:
                    await pusher.push_set(directory, entries)
            except PushError as exc:
                exc.summary = pusher.summary
                raise
            finally:
                pusher.summary.seconds = time.monotonic() - pusher.started
                pusher._show()
    return pusher.summary


push = blocking(
    push_async,
    """Synchronous `push_async`: `push("set/", url, url_settings(url, cacert="ca.pem"))`.""",
)
