"""`sync --confirm` for GSA: after the last file, waits until the appliance has processed what it
accepted, and reads what became of each file.

The feedergate's `Success` only means the file was received; the feeder processes it later and
reports errors only on the Feeds page. So the wait polls `/getbacklogcount` until the appliance
holds no unprocessed file. With the Administrative API (`AdminApi`), it also reads the
datasource's feed log: the entries that appeared since the push began are this push's files,
processed in the order they were accepted (a sync sends one datasource's files one at a time),
so they are matched to the files from the last one back. The log keeps only the latest few
feeds of a datasource: earlier files are processed (the backlog says so) but "unreported".
Matching assumes nothing else feeds the same datasource meanwhile, which a sync, owning its
datasource, may.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastfeed.delivery.settings import CONFIRM_TIMEOUT, PushSettings, http_client
from fastfeed.errors import FastfeedError
from fastfeed.gsa.adminapi import LOG_KEEPS, AdminApi, AdminClient, FeedEntry, admin_client
from fastfeed.gsa.backlog import fetch_backlog
from fastfeed.progress import Progress, plural, stage
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.sync import Confirmation, FileCheck

#: What is shown of a failed feed's log.
LOG_CHARS = 300


@dataclass(frozen=True)
class Confirm:
    """How `sync(confirm=...)` confirms: how long to wait for the appliance's feeder, and its
    Administrative API, to read each file's outcome (without it, only that the backlog
    drained)."""

    timeout: float = CONFIRM_TIMEOUT
    admin: AdminApi | None = None


Finish = Callable[[list[ManifestEntry], Progress | None], Confirmation]


def start_confirm(settings: PushSettings, confirm: Confirm, datasource: str) -> Finish:
    """Reads the feed log as it is before the push (its entries are not this push's), logging
    in to the Administrative API so that a refused login stops the sync before it sends."""
    before: set[str] = set()
    if confirm.admin is not None:
        entries = asyncio.run(_read_log(settings, confirm.admin, datasource))
        before = {e.entry_id for e in entries}

    def finish(files: list[ManifestEntry], progress: Progress | None) -> Confirmation:
        return asyncio.run(_confirm(settings, confirm, datasource, before, files, progress))

    return finish


async def _read_log(settings: PushSettings, api: AdminApi, datasource: str) -> list[FeedEntry]:
    async with admin_client(settings) as client:
        return await AdminClient(client, api, settings.deadline).feeds(datasource)


async def _confirm(
    settings: PushSettings,
    confirm: Confirm,
    datasource: str,
    before: set[str],
    files: list[ManifestEntry],
    progress: Progress | None,
) -> Confirmation:
    started = time.monotonic()
    if not files:
        return Confirmation([], 0.0)
    line = stage(progress, "confirm", len(files), unit="files")
    async with http_client(settings) as client, admin_client(settings) as admin_http:
        admin = (
            None
            if confirm.admin is None
            else AdminClient(admin_http, confirm.admin, settings.deadline)
        )
        seen: dict[str, FeedEntry] = {}
        problem, failures = "", 0
        while True:
            try:
                backlog = await fetch_backlog(client, settings)
                if admin is not None:
                    for entry in await admin.feeds(datasource):
                        if entry.entry_id not in before:
                            seen[entry.entry_id] = entry
                failures = 0
            except FastfeedError as exc:
                failures += 1
                if failures > settings.retries:
                    problem = f"cannot read the appliance's progress: {exc}"
                    break
            else:
                if backlog is None and admin is None:
                    problem = (
                        "the appliance does not report its backlog (/getbacklogcount: 404): give "
                        "its Administrative API (--admin-url, --admin-user) to confirm"
                    )
                    break
                new = _in_order(seen)
                logged = all(e.state.finished for e in new)
                # The feed log must show the sync's files (as many as it keeps) before the wait
                # may end: a drained backlog and an empty log would confirm nothing.
                listed = admin is None or len(new) >= min(len(files), LOG_KEEPS)
                # Without a backlog count, the feed log must show every file finished.
                if (
                    logged
                    and listed
                    and (backlog == 0 or (backlog is None and len(new) >= len(files)))
                ):
                    break
                if time.monotonic() - started > confirm.timeout:
                    left = f"{plural(backlog, 'file')} still in its backlog" if backlog else ""
                    paused = left or "its feed log not finished"
                    problem = (
                        f"the appliance had not processed what it accepted after "
                        f"{confirm.timeout:g} s ({paused}; is its feeder paused?). The files were "
                        "accepted and the state holds them; check the appliance's Feeds page, "
                        "or wait longer with --confirm-timeout"
                    )
                    break
                if line.live:
                    waiting = "?" if backlog is None else f"{backlog:,}"
                    finished = sum(e.state.finished for e in new)
                    line.update(
                        finished if admin is not None else max(0, len(files) - (backlog or 0)),
                        f"{waiting} in the appliance's backlog, {finished} in its feed log",
                    )
            await asyncio.sleep(settings.backlog_interval)
        checks = await _checks(admin, files, _in_order(seen), drained=not problem)
    line.close(done=not problem)
    return Confirmation(checks, time.monotonic() - started, problem)


def _in_order(seen: dict[str, FeedEntry]) -> list[FeedEntry]:
    """The entries in the order the feeder took them. An entry's time is when its latest stage
    began, so this order is the files' only once every entry is finished (the feeder processes
    files one at a time, in the order they were received)."""
    return sorted(seen.values(), key=lambda e: (e.time_ms, e.entry_id))


async def _checks(
    admin: AdminClient | None, files: list[ManifestEntry], new: list[FeedEntry], *, drained: bool
) -> list[FileCheck]:
    """Each file's outcome: from its feed log entry, matched from the last file back."""
    if any(not e.state.finished for e in new) and any(e.state.failed for e in new):
        # Entries still waiting keep the time they were received, finished ones take the time
        # they were processed: the order cannot tell which file failed. Every file not known to
        # be processed is then failed, so the next sync sends it again (sending twice is
        # harmless; a failed file taken as held would stay missing from the index).
        why = (
            "the feeder failed a file of this sync before the wait ended, and which one cannot "
            "be told: sent again by the next sync"
        )
        return [FileCheck(entry.file, "failed", why) for entry in files]
    # The shorter runs out first: files before the log's window, or entries of other feeders.
    last = range(len(files) - 1, -1, -1)
    matched: dict[int, FeedEntry] = dict(zip(last, reversed(new), strict=False))
    checks = []
    for n, entry in enumerate(files):
        logged = matched.get(n)
        if logged is not None and logged.state.failed and admin is not None:
            try:
                logged = await admin.feed(logged.entry_id)  # with its log, to say why
            except FastfeedError as exc:  # failed all the same: the log is only the reason
                logged = dataclasses.replace(logged, log=f"(its log could not be read: {exc})")
            log = " ".join(logged.log.split())[:LOG_CHARS]
            message = (
                f"{logged.state.name} ({logged.success_records:,} records indexed, "
                f"{logged.error_records:,} in error; feed {logged.entry_id}): {log}"
            )
            checks.append(FileCheck(entry.file, "failed", message))
        elif logged is not None and logged.state.finished:
            checks.append(FileCheck(entry.file, "processed", logged.state.name))
        elif not drained:
            checks.append(FileCheck(entry.file, "unconfirmed"))
        elif admin is None:
            checks.append(FileCheck(entry.file, "processed", "the backlog drained"))
        else:
            checks.append(
                FileCheck(
                    entry.file,
                    "unreported",
                    "processed (the backlog drained); the feed log keeps only the latest feeds "
                    "of a datasource",
                )
            )
    return checks
