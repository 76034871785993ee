"""Pushing GSA feed and groups sets to an appliance's feedergate: `push`, `push_async` and
`Pusher`.

What the appliance answers decides everything, not the HTTP status alone: the feedergate
answers HTTP 200 with `Success`, or with a sentence explaining why the feed was refused.

Ordering rule (why a push may be slower than `--concurrency` suggests):
  * Up to `concurrency` files are in flight at once, across datasources: datasources are
    independent on the appliance, so different ones are pushed side by side.
  * Within one datasource, files start in manifest order and each starts only once every earlier
    file of that datasource was accepted. The feeder processes files in the order it received
    them, and a later file may update or delete what an earlier one added: overlapping them
    would let the appliance see them in the wrong order.
  * With `overlap_incremental`, incremental (and metadata-and-url) files of one datasource may
    overlap; still in manifest order of starting, and never before the datasource's last earlier
    `full` file was accepted. Use it only when no URL appears in two files of a datasource.
  * A `full` file always goes alone: it starts when all earlier files of its datasource were
    accepted, and nothing later of that datasource starts before it is accepted, because a full
    feed replaces the whole datasource.
  * When a file of a datasource fails, the later files of that datasource are not sent
    ("blocked"): the next run resumes from the failed file, in order.
  * Groups feeds (manifest kind `groups`, POSTed to /xmlgroups) follow the same rule with their
    groupsource in place of the datasource, in lanes apart from the feeds'. A `full` groups feed
    replaces the groups of every groupsource on the appliance, not only its own: it waits for
    every earlier groups file and every later one waits for it. Sending one needs
    `allow_full_groups`, so that it is never done by mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from fastfeed.delivery.blocking import blocking
from fastfeed.delivery.body import check_file
from fastfeed.delivery.exchange import exchange
from fastfeed.delivery.results import FeedFile, FileResult, Outcome, PushSummary
from fastfeed.delivery.retry import Again, gave_up, jitter, retrying, transport_problem
from fastfeed.delivery.settings import PushSettings, http_client
from fastfeed.errors import FastfeedError, FileChanged, PushError
from fastfeed.gsa.backlog import BacklogGate
from fastfeed.gsa.feedergate import (
    EMPTY_ANSWER,
    ENDPOINTS,
    TLS_HINT,
    UNAUTHORIZED_HELP,
    Answer,
    Multipart,
    classify,
)
from fastfeed.gsa.files import LoneFile, feed_files
from fastfeed.gsa.groups import FULL_GROUPS_WARNING, full_groups
from fastfeed.progress import Progress, Stage, plural, stage
from fastfeed.sets.journal import Journal


class _State(enum.Enum):
    PENDING = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()


@dataclass
class _Job:
    index: int
    feed: FeedFile
    journal: Journal | None
    state: _State = _State.PENDING
    result: FileResult | None = None
    #: The digest check, started early for the file next in line (see `_start_eligible`).
    check: asyncio.Future[None] | None = None
    #: Bytes of the file sent by the POST under way: how far along it is.
    sent: int = 0

    @property
    def replaces(self) -> bool:
        return self.feed.entry.feedtype == "full"

    @property
    def lane(self) -> tuple[str, str]:
        """Files of one lane go in order: a datasource's feeds, or a groupsource's groups."""
        return self.feed.entry.kind, self.feed.entry.datasource

    @property
    def replaces_all_groups(self) -> bool:
        return self.replaces and self.feed.entry.kind == "groups"

    @property
    def accepted(self) -> bool:
        return self.result is not None and self.result.outcome in (
            Outcome.ACCEPTED,
            Outcome.SKIPPED,
        )


class Pusher:
    """Pushes feed files as they are submitted, under the ordering rule of this module.

    `push_async` submits whole feed sets at once; `fastfeed run` submits each file as the
    builder finishes it. Use it as an async context manager around `run()`::

        async with Pusher(settings) as pusher:
            pusher.submit(feed, journal)
            pusher.close_input()
            summary = await pusher.run()
    """

    def __init__(
        self,
        settings: PushSettings,
        *,
        progress: Progress | None = None,
        on_result: Callable[[FileResult], None] | None = None,
    ) -> None:
        self.settings = settings
        self._progress = progress
        self._line: Stage | None = None
        self._on_result = on_result
        self._jobs: list[_Job] = []
        self._input_closed = False
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._fatal: PushError | None = None
        self._hold_until = 0.0
        self._retries = 0
        self._started = 0.0  # when `run` starts: a run's push may wait for its build first
        self._client: httpx.AsyncClient | None = None
        # Whether the appliance answered anything yet: a connection refused before that means
        # nothing listens there, and after it an appliance restarting.
        self._answered = False
        self._gate: BacklogGate | None = None

    async def __aenter__(self) -> Pusher:
        # One connection more than the files in flight, for the backlog polls.
        self._client = http_client(self.settings, self.settings.concurrency + 1)
        self._gate = BacklogGate(self._client, self.settings, on_open=self._changed.set)
        self._gate.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._cancel_all()
        if self._gate is not None:
            await self._gate.stop()
        if self._client is not None:
            await self._client.aclose()

    def submit(self, feed: FeedFile, journal: Journal | None) -> None:
        """Queues a file behind those already submitted; the journal may say it is done.
        A file without one (a lone file) is sent, and its acceptance recorded nowhere."""
        if self._input_closed:
            raise RuntimeError("submit after close_input")
        job = _Job(len(self._jobs), feed, journal)
        self._jobs.append(job)
        if journal is not None and journal.is_accepted(feed.entry):
            self._finish(job, FileResult(feed, Outcome.SKIPPED, 0, "accepted by an earlier push"))
        self._changed.set()

    def close_input(self) -> None:
        """No more files will be submitted: `run` returns once the queued ones are done."""
        self._input_closed = True
        self._changed.set()

    def summary(self) -> PushSummary:
        return PushSummary(
            target=self.settings.base_url,
            results=[j.result for j in self._jobs if j.result is not None],
            seconds=time.monotonic() - self._started,
            retries=self._retries,
            backlog=self._gate.count if self._gate else None,
        )

    async def run(self) -> PushSummary:
        """Pushes until every submitted file is done; raises `PushError` if told to stop."""
        self._started = time.monotonic()
        self._line = stage(self._progress, "push")
        ticker = asyncio.create_task(self._tick()) if self._line.live else None
        try:
            while True:
                self._changed.clear()
                if self._fatal is not None:
                    await self._cancel_all()
                    self._fatal.summary = self.summary()
                    raise self._fatal
                self._start_eligible()
                if self._input_closed and all(j.state is _State.DONE for j in self._jobs):
                    return self.summary()
                await self._changed.wait()
        finally:
            if ticker is not None:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
                self._show()
            # Never a full bar for a push that stopped: the total is known once all came.
            self._line.close(done=False)

    # -- scheduling -------------------------------------------------------------------------

    def _start_eligible(self) -> None:
        assert self._gate is not None
        running = sum(1 for j in self._jobs if j.state is _State.RUNNING)
        early = sum(
            1
            for j in self._jobs
            if j.state is _State.PENDING and j.check is not None and not j.check.done()
        )
        may_start = not self._gate.paused and time.monotonic() >= self._hold_until
        earlier: dict[tuple[str, str], list[_Job]] = {}
        full_groups: list[_Job] = []  # every groups lane, even one not seen yet, waits for these
        for job in self._jobs:
            if job.lane not in earlier:
                earlier[job.lane] = list(full_groups) if job.lane[0] == "groups" else []
            before = earlier[job.lane]
            if job.replaces_all_groups:
                # Replaces every groupsource's groups: after all earlier groups files, alone.
                before = [e for lane, jobs in earlier.items() if lane[0] == "groups" for e in jobs]
            if job.state is _State.PENDING:
                failed = next((e for e in before if _failed(e)), None)
                if failed is not None:
                    reason = f"not sent: {failed.feed.entry.file} before it was not accepted"
                    self._finish(job, FileResult(job.feed, Outcome.BLOCKED, 0, reason))
                elif (
                    may_start
                    and running < self.settings.concurrency
                    and self._may_start(job, before)
                ):
                    job.state = _State.RUNNING
                    running += 1
                    task = asyncio.create_task(self._push_one(job))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif early < self.settings.concurrency and all(
                    e.accepted or e.state is _State.RUNNING for e in before
                ):
                    # Next in line behind files being sent: hash it meanwhile, so that strictly
                    # ordered files go out back to back instead of waiting for their check.
                    early += int(not self._check(job).done())
            if job.replaces_all_groups:
                full_groups.append(job)
                for lane, jobs in earlier.items():
                    if lane[0] == "groups":
                        jobs.append(job)
            else:
                before.append(job)

    def _check(self, job: _Job) -> asyncio.Future[None]:
        if job.check is None:
            job.check = asyncio.ensure_future(asyncio.to_thread(check_file, job.feed))
            # A file blocked after its early check is never sent: its failure needs no reader.
            job.check.add_done_callback(lambda f: f.cancelled() or f.exception())
        return job.check

    def _may_start(self, job: _Job, before: list[_Job]) -> bool:
        if not self.settings.overlap_incremental or job.replaces:
            return all(e.accepted for e in before)
        return all(e.accepted or (e.state is _State.RUNNING and not e.replaces) for e in before)

    def _finish(self, job: _Job, result: FileResult) -> None:
        job.state = _State.DONE
        job.result = result
        if self._on_result is not None:
            self._on_result(result)
        self._changed.set()

    async def _cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- one file ---------------------------------------------------------------------------

    async def _push_one(self, job: _Job) -> None:
        try:
            result = await self._send(job)
            if result.outcome is Outcome.ACCEPTED:
                if job.journal is not None:
                    job.journal.record(job.feed.entry)
                assert self._gate is not None
                self._gate.file_accepted()
        except PushError as exc:
            self._stop(exc)
            return
        except FastfeedError as exc:  # the journal cannot be written: nothing would be durable
            self._stop(PushError(str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - whatever it is, the job must end, or run() waits forever
            result = FileResult(job.feed, Outcome.FAILED, 0, f"{type(exc).__name__}: {exc}")
        self._finish(job, result)

    def _stop(self, exc: PushError) -> None:
        self._fatal = self._fatal or exc
        self._changed.set()

    async def _send(self, job: _Job) -> FileResult:
        s, feed = self.settings, job.feed
        try:
            await self._check(job)
        except FileChanged as exc:
            return FileResult(feed, Outcome.FAILED, 0, f"not sent: {exc}")
        posts = 0

        async def attempt(_: int) -> tuple[Outcome, str] | Again:
            """One POST; while the appliance says its disk is full, waits and posts again
            without spending a retry (up to `disk_full_retries` times)."""
            nonlocal posts
            disk_waits = 0
            while True:
                await self._wait_hold()
                posts += 1
                try:
                    status, text = await self._post(job)
                except FileChanged as exc:
                    return Outcome.FAILED, f"not sent: {exc}"
                except httpx.HTTPError as exc:
                    return await transport_problem(
                        exc, s.base_url, TLS_HINT, first=not self._answered
                    )
                self._answered = True
                answer = classify(text) if status == 200 else None
                if answer is Answer.SUCCESS:
                    return Outcome.ACCEPTED, "Success"
                if answer is Answer.UNAUTHORIZED:
                    raise PushError(
                        f"{s.base_url} answered {text.strip()!r}: {UNAUTHORIZED_HELP}",
                        refused=True,
                    )
                if answer is Answer.DISK_FULL:
                    if disk_waits >= s.disk_full_retries:
                        return Outcome.FAILED, text.strip()
                    disk_waits += 1
                    self._retries += 1
                    self._hold(jitter(s.disk_full_delay))
                    continue
                if answer is Answer.OTHER:
                    return Outcome.FAILED, text.strip()[:500] or EMPTY_ANSWER
                if answer is None and status < 500 and status not in (408, 429):
                    return Outcome.FAILED, f"HTTP {status}: {text.strip()[:500]}"
                return Again(text.strip() if answer else f"HTTP {status}: {text.strip()[:200]}")

        _, outcome = await retrying(s, attempt, self._count_retry)
        if isinstance(outcome, Again):
            return FileResult(feed, Outcome.FAILED, posts, gave_up(outcome, posts))
        return FileResult(feed, outcome[0], posts, outcome[1])

    def _count_retry(self) -> None:
        self._retries += 1

    async def _post(self, job: _Job) -> tuple[int, str]:
        assert self._client is not None
        feed = job.feed
        job.sent = 0

        def count(n: int) -> None:
            job.sent += n

        body = Multipart(feed, self.settings.chunk_size, count)
        answer = await exchange(
            self._client,
            "POST",
            self.settings.base_url + ENDPOINTS[feed.entry.kind][0],
            deadline=self.settings.deadline,
            content=body,
            headers={"Content-Type": body.content_type, "Content-Length": str(body.length)},
        )
        return answer.status, answer.text

    def _hold(self, seconds: float) -> None:
        """Holds every new send: an appliance out of disk refuses every file, not just one."""
        self._hold_until = max(self._hold_until, time.monotonic() + seconds)
        asyncio.get_running_loop().call_later(seconds, self._changed.set)

    async def _wait_hold(self) -> None:
        while (delay := self._hold_until - time.monotonic()) > 0:
            await asyncio.sleep(delay)

    # -- progress ---------------------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            self._show()
            await asyncio.sleep(0.25)

    def _show(self) -> None:
        """The line: the bytes of the files done with (whatever the outcome) and of those
        under way, of all the files submitted (a total known once no more will come)."""
        assert self._line is not None and self._gate is not None
        done = [j for j in self._jobs if j.accepted]
        records = sum(j.feed.entry.records for j in done)
        finished = sum(j.feed.entry.bytes for j in self._jobs if j.state is _State.DONE)
        under_way = sum(
            min(j.sent, j.feed.entry.bytes) for j in self._jobs if j.state is _State.RUNNING
        )
        total = sum(j.feed.entry.bytes for j in self._jobs) if self._input_closed else None
        files = f"{len(self._jobs):,}" + ("" if self._input_closed else "+")
        backlog = "n/a" if self._gate.count is None else f"{self._gate.count:,}"
        if self._gate.paused:
            backlog += " (paused)"
        failed = sum(1 for j in self._jobs if _failed(j))
        self._line.update(
            finished + under_way,
            f"{len(done):,}/{files} files, {plural(records, 'record')} accepted, "
            f"backlog {backlog}, retries {self._retries:,}"
            + (f", {failed:,} failed" if failed else ""),
            total=total,
        )


def _failed(job: _Job) -> bool:
    return job.state is _State.DONE and not job.accepted


async def push_async(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    settings: PushSettings,
    *,
    progress: Progress | None = None,
    replay: bool = False,
    allow_full_groups: bool = False,
    allow_empty_full: bool = False,
    groupsource: str | None = None,
) -> PushSummary:
    """Pushes feed sets (directories) or files of them (or one), or lone feed files, each
    validated whole first (`LoneHead.validated`; `groupsource` is that of a lone groups feed); see
    `feed_files` for the order.

    Files the journal says this target accepted are skipped, so running the same push again
    after an interruption sends only what is missing. With `replay`, the journal is reset for
    this target first, and everything is sent again. Groups sets are pushed like feed sets, but
    a full groups feed is refused (nothing is sent) unless `allow_full_groups`: see
    `FULL_GROUPS_WARNING`. A full feed with no records (which would empty its datasource, or
    every groupsource) is refused unless `allow_empty_full`. Lone files have no journal: see
    `NOT_JOURNALLED`.
    Raises `PushError` (with `.refused` and `.summary`) when the push cannot go on at all.
    """
    files = feed_files(
        [paths] if isinstance(paths, (str, os.PathLike)) else paths,
        groupsource=groupsource,
        progress=progress,
    )
    full = full_groups(files)
    if full and not allow_full_groups:
        raise PushError(
            f"{full[0].path} is a full groups feed; {FULL_GROUPS_WARNING}. Nothing was sent. "
            "To send it anyway: `fastfeed groups push --allow-full` (Python: "
            "allow_full_groups=True); to add or update groups, build an incremental groups feed",
            refused=True,
        )
    empty = [f for f in files if f.entry.feedtype == "full" and f.entry.records == 0]
    if empty and not allow_empty_full:
        what = (
            "group of every source"
            if empty[0].entry.kind == "groups"
            else "document of its datasource"
        )
        raise PushError(
            f"{empty[0].path} is a full feed with no records: it would remove every {what} from "
            "the appliance. Nothing was sent. If that is what you want, push it with "
            "--allow-empty-full (Python: allow_empty_full=True)",
            refused=True,
        )
    with contextlib.ExitStack() as stack:
        journals: dict[Path, Journal] = {}
        sets = (f.directory for f in files if not isinstance(f, LoneFile))
        for directory in dict.fromkeys(sets):
            journal = stack.enter_context(Journal(directory, settings.target))
            if replay:
                journal.start_replay()
            journals[directory] = journal
        async with Pusher(settings, progress=progress) as pusher:
            for feed in files:
                lone = isinstance(feed, LoneFile)
                pusher.submit(feed, None if lone else journals[feed.directory])
            pusher.close_input()
            return await pusher.run()


push = blocking(
    push_async,
    """Synchronous `push_async`: `push("feeds/", PushSettings(host="gsa.example.com"))`.""",
)
