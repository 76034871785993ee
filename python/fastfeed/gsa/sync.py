"""`sync` for GSA feeds: keeps an appliance's datasource equal to a snapshot of the source
(the shared mechanism is `fastfeed.sets.sync`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Unpack

from fastfeed import _core
from fastfeed.delivery.results import PushSummary
from fastfeed.delivery.settings import PushSettings
from fastfeed.errors import SettingsError
from fastfeed.gsa.confirm import Confirm, Finish, start_confirm
from fastfeed.gsa.push import push
from fastfeed.gsa.writer import FeedOptions, FeedWriter
from fastfeed.progress import Progress
from fastfeed.sets.guard import AllowDeletes
from fastfeed.sets.sync import Receiver, SyncSummary, default_out, run_sync
from fastfeed.sets.writer import FeedWarning, SetWriter


def sync(
    inputs: Sequence[str],
    state: str | os.PathLike[str],
    datasource: str,
    settings: PushSettings,
    *,
    allow_deletes: AllowDeletes | None = None,
    resend_all: bool = False,
    dry_run: bool = False,
    confirm: Confirm | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    progress: Progress | None = None,
    on_warning: Callable[[str], None] | None = None,
    **options: Unpack[FeedOptions],
) -> SyncSummary:
    """Makes the appliance's `datasource` equal to the snapshot `inputs` (JSON Lines files, `-`,
    Parquet or Arrow files or dataset directories, directories with `base_url`), sending only what
    differs from `state` (a file, made if missing: one per appliance and datasource) as incremental
    feeds. `resend_all` sends every record again (after an index reset); `dry_run` compares and
    sends nothing. Raises `MassDelete` before sending anything when the snapshot would delete too
    much (more than `allow_deletes`: a share of the datasource, or a number of documents; default
    10%). `confirm` waits, after the last file, until the appliance processed what it accepted and,
    with its Administrative API, reports the files its feeder failed (`SyncSummary.confirmed`) and
    undoes them in the state, so that the next sync sends them again. Each warning about a
    record goes to `on_warning`, naming its line (default: printed on stderr). The `options`
    (`max_bytes`, `compress`...) are `FeedWriter`'s."""
    problem = _core.datasource_problem(datasource)
    if problem:
        raise SettingsError(problem)

    def writer(out: Path, warn: Callable[[FeedWarning], None]) -> SetWriter:
        return FeedWriter(out, datasource, "incremental", on_warning=warn, **options)

    def push_set(feed_set: Path, progress: Progress | None) -> PushSummary:
        return push([feed_set], settings, progress=progress)

    def confirm_set() -> Finish:
        return start_confirm(settings, confirm or Confirm(), datasource)

    receiver = Receiver(
        collection=f"datasource {datasource!r}",
        target=f"{settings.target} datasource {datasource}",
        journal_target=settings.target,
        writer=writer,
        push=push_set,
        confirm=confirm_set,
    )
    return run_sync(
        inputs,
        state,
        receiver,
        out_dir=out_dir if out_dir is not None else default_out(datasource),
        base_url=base_url,
        allow_deletes=allow_deletes,
        resend_all=resend_all,
        dry_run=dry_run,
        confirm=confirm is not None,
        progress=progress,
        on_warning=on_warning,
    )
