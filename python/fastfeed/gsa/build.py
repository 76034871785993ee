"""`build`: JSON Lines or directories to a GSA feed set."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Unpack

from fastfeed.gsa.writer import FeedOptions, FeedType, FeedWriter
from fastfeed.progress import Progress
from fastfeed.sets.build import BuildSummary, OnError, write_set
from fastfeed.sets.writer import FeedWarning, OnFile, SetWriter


def build(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    datasource: str,
    feedtype: FeedType = "incremental",
    *,
    base_url: str | None = None,
    allow_empty_full: bool = False,
    on_error: OnError = "stop",
    on_file: OnFile | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    stop: Callable[[], None] | None = None,
    **options: Unpack[FeedOptions],
) -> BuildSummary:
    """Builds a feed set from `inputs` into `out_dir` and returns what was written.

    Each input is a JSON Lines file, `-` for standard input, a Parquet or Arrow file, a glob,
    a dataset directory of such files, or a directory of documents (with `base_url`).
    With `on_error="stop"` the first refused record raises `InputError` and no manifest is
    written. With `"skip"`, refused records are saved byte for byte to `rejected.jsonl` (with
    the reasons in `rejected.log`) so that they can be fixed and fed again; none is lost.
    A `full` set with no records raises `EmptyFullFeed` unless `allow_empty_full`. The
    `options` (`max_bytes`, `compress`...) are `FeedWriter`'s. `stop`, if given, raises to
    stop the build as an error does (no manifest); it is called after each chunk of input and
    before the manifest is written.
    """

    def writer(warn: Callable[[FeedWarning], None]) -> SetWriter:
        return FeedWriter(
            out_dir,
            datasource,
            feedtype,
            allow_empty_full=allow_empty_full,
            on_file=on_file,
            on_warning=warn,
            **options,
        )

    return write_set(inputs, out_dir, writer, base_url, on_error, on_warning, progress, stop=stop)
