"""`build_thunderstone`: JSON Lines or directories to a Thunderstone set."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Unpack

from fastfeed.progress import Progress
from fastfeed.sets.build import BuildSummary, OnError, write_set
from fastfeed.sets.writer import FeedWarning, OnFile, SetWriter, WriterOptions
from fastfeed.thunderstone.writer import ThunderstoneWriter


def build_thunderstone(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    profile: str,
    *,
    base_url: str | None = None,
    on_error: OnError = "stop",
    on_file: OnFile | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    **options: Unpack[WriterOptions],
) -> BuildSummary:
    """Builds Thunderstone data for `profile` from the same inputs as `build`."""

    def writer(warn: Callable[[FeedWarning], None]) -> SetWriter:
        return ThunderstoneWriter(out_dir, profile, on_file=on_file, on_warning=warn, **options)

    return write_set(inputs, out_dir, writer, base_url, on_error, on_warning, progress)
