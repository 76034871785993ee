"""`FeedWriter`: records into gsafeed files."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Literal, Unpack

from fastfeed import _core
from fastfeed.sets.writer import FeedWarning, OnFile, RecordWriter, WriterOptions

FeedType = Literal["full", "incremental", "metadata-and-url"]
Compress = Literal["auto", "always", "never"]
AclFormat = Literal["per-url", "legacy"]


class FeedOptions(WriterOptions, total=False):
    """`WriterOptions` and how GSA feeds encode content and ACLs (see `FeedWriter`)."""

    compress: Annotated[Compress, "'auto' (default): zlib content that shrinks; 'always'; 'never'"]
    level: Annotated[int, "compression level, 1 (fastest) to 12 (default DEFAULT_LEVEL)"]
    acl_format: Annotated[
        AclFormat, "'per-url' (default): <acl> elements; 'legacy': google:acl* meta names"
    ]


class FeedWriter(RecordWriter):
    """Writes records into numbered, size-capped feed files in `out_dir`, and `manifest.jsonl`.

    Use it as a context manager; leaving the block closes the last file and writes the manifest,
    unless an exception escapes it, in which case no manifest is written and the unfinished file
    is removed, so that an incomplete set is never pushed::

        with FeedWriter("feeds", "docs", "full") as writer:
            writer.add_batch(records)
        print(writer.manifest)

    `add_batch` is the fast path: the whole batch crosses into Rust in one call and is encoded on
    `workers` threads without the GIL. A bad record raises `RecordError` (with `.index` and
    `.field`) and nothing of its batch is written, so the batch can be retried without it.
    `acl_format="legacy"` writes ACLs as the google:acl* meta names of appliances before 7.0.
    A `full` feed with no records is refused when closed (`EmptyFullFeed`) unless
    `allow_empty_full`: it would remove every document of the datasource.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        datasource: str,
        feedtype: FeedType = "incremental",
        *,
        allow_empty_full: bool = False,
        on_file: OnFile | None = None,
        on_warning: Callable[[FeedWarning], None] | None = None,
        **options: Unpack[FeedOptions],
    ) -> None:
        core = _core.FeedWriter(
            os.fspath(out_dir),
            datasource,
            feedtype,
            allow_empty_full=allow_empty_full,
            **options,
        )
        super().__init__(core, out_dir, on_file, on_warning)
