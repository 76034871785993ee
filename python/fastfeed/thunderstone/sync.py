"""`sync` for Thunderstone: keeps a Thunderstone Search Appliance profile equal to a snapshot of
the source (the shared mechanism is `fastfeed.sets.sync`); deletes go as `D` items."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Unpack

from fastfeed.delivery.results import PushSummary
from fastfeed.delivery.settings import PushSettings
from fastfeed.progress import Progress
from fastfeed.sets.guard import AllowDeletes
from fastfeed.sets.sync import Receiver, SyncSummary, default_out, run_sync
from fastfeed.sets.writer import FeedWarning, SetWriter, WriterOptions
from fastfeed.thunderstone.push import push, url_settings
from fastfeed.thunderstone.writer import ThunderstoneWriter


def sync(
    inputs: Sequence[str],
    state: str | os.PathLike[str],
    url: str,
    profile: str,
    settings: PushSettings | None = None,
    *,
    allow_deletes: AllowDeletes | None = None,
    resend_all: bool = False,
    dry_run: bool = False,
    out_dir: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    progress: Progress | None = None,
    on_warning: Callable[[str], None] | None = None,
    **options: Unpack[WriterOptions],
) -> SyncSummary:
    """Makes the Thunderstone `profile` at `url` (its recvdata.xml) equal to the snapshot
    `inputs`, sending only what differs from `state`, as GSA's `sync` does for a datasource.
    Each warning about a record goes to `on_warning`, naming its line (default: printed on
    stderr)."""
    settings = settings if settings is not None else url_settings(url)

    def writer(out: Path, warn: Callable[[FeedWarning], None]) -> SetWriter:
        return ThunderstoneWriter(out, profile, on_warning=warn, **options)

    def push_set(feed_set: Path, progress: Progress | None) -> PushSummary:
        return push([feed_set], url, settings, progress=progress)

    receiver = Receiver(
        collection=f"profile {profile!r}",
        target=f"{url} profile {profile}",
        journal_target=url,
        writer=writer,
        push=push_set,
    )
    return run_sync(
        inputs,
        state,
        receiver,
        out_dir=out_dir if out_dir is not None else default_out(profile),
        base_url=base_url,
        allow_deletes=allow_deletes,
        resend_all=resend_all,
        dry_run=dry_run,
        progress=progress,
        on_warning=on_warning,
    )
