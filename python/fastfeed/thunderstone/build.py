"""`build_thunderstone`: JSON Lines or directories to a Thunderstone set."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from fastfeed.progress import Progress
from fastfeed.sets.build import BuildSummary, OnError, check_directories, write_set
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.writer import DEFAULT_MAX_BYTES, FeedWarning, SetWriter
from fastfeed.thunderstone.writer import ThunderstoneWriter


def build_thunderstone(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    profile: str,
    *,
    base_url: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_records: int = 0,
    workers: int = 0,
    on_error: OnError = "stop",
    on_file: Callable[[ManifestEntry], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> BuildSummary:
    """Builds Thunderstone data for `profile` from the same inputs as `build`."""
    check_directories(inputs, base_url)

    def writer(warn: Callable[[FeedWarning], None]) -> SetWriter:
        return ThunderstoneWriter(
            out_dir,
            profile,
            max_bytes=max_bytes,
            max_records=max_records,
            workers=workers,
            on_file=on_file,
            on_warning=warn,
        )

    return write_set(inputs, out_dir, writer, base_url, on_error, on_warning, progress)
