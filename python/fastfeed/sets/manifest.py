"""The manifest of a feed set: `manifest.jsonl`, one line per feed file, in push order."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from fastfeed.errors import FastfeedError

MANIFEST = "manifest.jsonl"


@dataclass(frozen=True)
class ManifestEntry:
    """One feed file. Files must be pushed in manifest order: the first file of a split full
    feed is `full` and replaces the datasource, the rest are `incremental` and add to it.

    `kind` is `feed` for content and web feeds (pushed to /xmlfeed) and `groups` for groups
    feeds (pushed to /xmlgroups), whose `datasource` is the groupsource."""

    file: str
    datasource: str
    feedtype: str
    records: int
    bytes: int
    sha256: str
    kind: str = "feed"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def read_manifest(directory: str | os.PathLike[str]) -> list[ManifestEntry]:
    """Reads DIR/manifest.jsonl; a directory without one is not a finished feed set."""
    path = Path(directory) / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FastfeedError(
            f"{path} does not exist: {directory} is not a finished feed set "
            "(was `fastfeed build` interrupted?)"
        ) from None
    entries = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(ManifestEntry(**orjson.loads(line)))
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise FastfeedError(f"{path}:{lineno}: not a manifest entry: {exc}") from None
    return entries
