"""`ThunderstoneWriter`: records into ThunderstoneReplication files."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Unpack

from fastfeed import _core
from fastfeed.sets.writer import FeedWarning, OnFile, RecordWriter, WriterOptions


class ThunderstoneWriter(RecordWriter):
    """Writes records as `ThunderstoneReplication` items for a Thunderstone Search Appliance
    `profile`, in numbered size-capped files and `manifest.jsonl` (entries of kind
    `thunderstone`, whose `datasource` is the profile). Used like `FeedWriter`; the README
    says how record fields map onto items, and `action` may also be `update` or
    `delete-pattern`."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        profile: str,
        *,
        on_file: OnFile | None = None,
        on_warning: Callable[[FeedWarning], None] | None = None,
        **options: Unpack[WriterOptions],
    ) -> None:
        core = _core.FeedWriter(
            os.fspath(out_dir), profile, "incremental", kind="thunderstone", **options
        )
        super().__init__(core, out_dir, on_file, on_warning)
