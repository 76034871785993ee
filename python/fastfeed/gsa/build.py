"""`build`: JSON Lines or directories to a GSA feed set."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from fastfeed.gsa.writer import AclFormat, Compress, FeedType, FeedWriter
from fastfeed.progress import Progress
from fastfeed.sets.build import BuildSummary, OnError, check_directories, write_set
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.writer import DEFAULT_LEVEL, DEFAULT_MAX_BYTES, FeedWarning, SetWriter


def build(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    datasource: str,
    feedtype: FeedType = "incremental",
    *,
    base_url: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_records: int = 0,
    compress: Compress = "auto",
    level: int = DEFAULT_LEVEL,
    workers: int = 0,
    acl_format: AclFormat = "per-url",
    allow_empty_full: bool = False,
    on_error: OnError = "stop",
    on_file: Callable[[ManifestEntry], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> BuildSummary:
    """Builds a feed set from `inputs` into `out_dir` and returns what was written.

    Each input is a JSON Lines file, `-` for standard input, or a directory (with `base_url`).
    With `on_error="stop"` the first refused record raises `InputError` and no manifest is
    written. With `"skip"`, refused records are saved byte for byte to `rejected.jsonl` (with
    the reasons in `rejected.log`) so that they can be fixed and fed again; none is lost.
    A `full` set with no records raises `EmptyFullFeed` unless `allow_empty_full`.
    """
    check_directories(inputs, base_url)

    def writer(warn: Callable[[FeedWarning], None]) -> SetWriter:
        return FeedWriter(
            out_dir,
            datasource,
            feedtype,
            max_bytes=max_bytes,
            max_records=max_records,
            compress=compress,
            level=level,
            workers=workers,
            acl_format=acl_format,
            allow_empty_full=allow_empty_full,
            on_file=on_file,
            on_warning=warn,
        )

    return write_set(inputs, out_dir, writer, base_url, on_error, on_warning, progress)
