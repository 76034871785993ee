"""`build_and_push`: a GSA feed set built and pushed as one pipeline (`fastfeed run`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from fastfeed.delivery.blocking import blocking
from fastfeed.delivery.results import FeedFile, PushSummary
from fastfeed.delivery.settings import PushSettings
from fastfeed.errors import PushError
from fastfeed.gsa.build import build
from fastfeed.gsa.push import Pusher
from fastfeed.gsa.writer import FeedType
from fastfeed.progress import Progress
from fastfeed.sets.build import BuildSummary
from fastfeed.sets.journal import Journal
from fastfeed.sets.manifest import MANIFEST, ManifestEntry

T = TypeVar("T")


async def build_and_push_async(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    datasource: str,
    feedtype: FeedType,
    settings: PushSettings,
    *,
    max_ahead: int = 4,
    progress: Progress | None = None,
    **build_options: Any,
) -> tuple[BuildSummary, PushSummary]:
    """Builds a feed set into `out_dir` and pushes it: a `full` set once its build has
    finished, any other file by file as they are built.

    A `full` set's first file replaces the whole datasource on the appliance: pushed before the
    build had finished, a build failing then (a bad record, an input not read whole, a full
    disk, Ctrl-C) would leave the datasource holding part of its documents. So nothing of it is
    sent until the build has written its manifest; then its files are pushed in manifest order,
    as `push_async` would. The whole set is on disk before the push starts, as with `build`
    then `push`, and `max_ahead` does not apply.

    Incremental and metadata-and-url files are pushed as soon as each is finished. The builder
    runs in a thread and waits whenever `max_ahead` of its files are not yet done with by the
    pusher, so an appliance slower than the builder bounds what piles up unpushed (on disk and
    in flight) instead of letting the builder run away. It learns of its files, and so waits,
    between chunks of input: the files of the chunks being encoded (many, when they are small)
    come on top. A build that fails partway (`InputError`) raises after the files already
    built were pushed.

    The set stays in `out_dir` with its journal. A push that stops (an error, Ctrl-C) stops the
    build too, without a manifest if it had not finished: then only a set whose build had
    finished can be finished by `fastfeed push OUT_DIR`. After a Ctrl-C (or a cancel), a build
    that ends after it keeps no manifest either, nor does a `full` one interrupted before its
    push started: the Ctrl-C may have ended the program feeding its input, and the set hold
    input cut short.
    """
    if max_ahead < 1:
        raise ValueError("max_ahead must be at least 1")
    loop = asyncio.get_running_loop()
    streams = feedtype != "full"
    room = threading.Semaphore(max_ahead)
    stopped = threading.Event()
    interrupted = threading.Event()  # stopped by Ctrl-C (or cancelled), set before `stopped`
    directory = Path(out_dir)
    with contextlib.ExitStack() as journals:
        journal: list[Journal] = []

        def submit(entry: ManifestEntry) -> None:
            # The journal is opened with the first file: the builder owns the empty directory
            # until then.
            if not journal:
                journal.append(journals.enter_context(Journal(directory, settings.target)))
            pusher.submit(FeedFile(directory, entry), journal[0])

        def stop() -> None:  # called on the builder's thread
            # Once the push stopped (failed, or Ctrl-C) the build writes no manifest: the end
            # of its input may be the Ctrl-C's too (it ends the program feeding a pipe), and a
            # full set of what came before it would delete the rest from the datasource.
            if stopped.is_set():
                raise PushError("the push stopped, so the build stops too")

        def on_file(entry: ManifestEntry) -> None:  # called on the builder's thread
            while not room.acquire(timeout=0.1):
                if stopped.is_set():
                    break
            stop()
            loop.call_soon_threadsafe(submit, entry)

        def build_unless_stopped() -> BuildSummary:  # on the builder's thread
            try:
                return build(
                    inputs,
                    directory,
                    datasource,
                    feedtype,
                    on_file=on_file if streams else None,
                    progress=progress,
                    stop=stop,
                    **build_options,
                )
            finally:
                # A build that ends once the push stopped did not finish before it: the
                # writer checks `stop` last before its close, which encodes the last chunk
                # and writes the manifest before saying its files, so a Ctrl-C there leaves
                # a manifest of input the Ctrl-C may have cut short. Without it the set is
                # an unfinished one, which `fastfeed push` refuses. Decided here, where the
                # build ends, rather than by the pusher: a second Ctrl-C abandons the wait
                # for the build, not the build. Only an interrupt can have cut the input
                # short: a push that failed (an untrusted IP) leaves a finished set to resume.
                if interrupted.is_set():
                    (directory / MANIFEST).unlink(missing_ok=True)

        async def stopping_the_build(work: Awaitable[T]) -> T:
            """`work`; should it raise (the push stopped, Ctrl-C), the build stops too, and
            is waited for."""
            try:
                return await work
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                    interrupted.set()
                    if not streams:
                        # Nothing was sent: a build that ended just before the Ctrl-C reached
                        # the run may have read the end the Ctrl-C gave its input (after
                        # `build_unless_stopped` looked). Removed after `interrupted` is set,
                        # so that whichever looks last removes a manifest written before.
                        (directory / MANIFEST).unlink(missing_ok=True)
                stopped.set()
                with contextlib.suppress(Exception):
                    await building
                raise

        # Entered before the build even for a `full` set, which it sends nothing of before
        # `run`: settings it cannot work with (a --cacert that does not load) then stop the
        # run at once, not after a build of hours.
        async with Pusher(
            settings, progress=progress, on_result=lambda _: room.release()
        ) as pusher:
            building = asyncio.ensure_future(asyncio.to_thread(build_unless_stopped))
            if streams:
                building.add_done_callback(lambda _: pusher.close_input())
                pushed = await stopping_the_build(pusher.run())
                return await building, pushed
            # Shielded: a Ctrl-C does not abandon the builder's thread, but stops it through
            # `stop` and waits for its end (`stopping_the_build`).
            built = await stopping_the_build(asyncio.shield(building))
            for entry in built.manifest:
                submit(entry)
            pusher.close_input()
            return built, await pusher.run()


build_and_push = blocking(build_and_push_async, "Synchronous `build_and_push_async`.")
