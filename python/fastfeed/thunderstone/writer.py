"""`ThunderstoneWriter`: records into ThunderstoneReplication files."""

from __future__ import annotations

import os
from collections.abc import Callable

from fastfeed import _core
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.writer import DEFAULT_MAX_BYTES, FeedWarning, RecordWriter


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
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int = 0,
        workers: int = 0,
        on_file: Callable[[ManifestEntry], None] | None = None,
        on_warning: Callable[[FeedWarning], None] | None = None,
    ) -> None:
        core = _core.FeedWriter(
            os.fspath(out_dir),
            profile,
            "incremental",
            kind="thunderstone",
            max_bytes=max_bytes,
            max_records=max_records,
            workers=workers,
        )
        super().__init__(core, out_dir, on_file, on_warning)

    def __enter__(self) -> ThunderstoneWriter:
        return self
