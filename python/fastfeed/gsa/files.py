"""Which files a push of GSA sets takes, from command-line style arguments: whole sets, or
files of them, checked against their manifests before anything is sent; and which files
`fastfeed validate` checks, the same way."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fastfeed.delivery.results import FeedFile
from fastfeed.errors import FastfeedError, PushError
from fastfeed.gsa.feedergate import ENDPOINTS
from fastfeed.sets.manifest import ManifestEntry, read_manifest


def feed_files(paths: Iterable[str | os.PathLike[str]]) -> list[FeedFile]:
    """The files to push for command-line style arguments, in push order.

    A directory means every file of its feed set; a file means that file of the set in its
    directory (found in the manifest, so that its datasource and feed type are the built ones).
    Sets come in argument order; within a set, manifest order.
    """
    selected: dict[Path, set[str] | None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise PushError(f"{path} does not exist", refused=True)
        if path.is_dir():
            selected[path] = None
        elif _looks_like_records(path):
            raise PushError(
                f"{path} holds JSON Lines records, not a feed set: build it first "
                f"(fastfeed build {path} --datasource NAME --out DIR, then fastfeed push DIR), "
                f"or build and push at once (fastfeed run {path} --datasource NAME --host ...)",
                refused=True,
            )
        else:
            names = selected.setdefault(path.parent, set())
            if names is not None:
                names.add(path.name)
    files: list[FeedFile] = []
    for directory, names in selected.items():
        try:
            entries = read_manifest(directory)
        except FastfeedError as exc:
            raise PushError(str(exc), refused=True) from None
        unknown = {e.kind for e in entries} - ENDPOINTS.keys()
        if unknown == {"thunderstone"}:
            raise PushError(
                f"{directory} is a Thunderstone set: push it with fastfeed thunderstone push "
                f"{directory} --url https://HOST/texis/dowalk/recvdata.xml",
                refused=True,
            )
        if unknown:
            raise PushError(
                f"{directory}/manifest.jsonl has entries of kind {', '.join(sorted(unknown))}, "
                f"which this version cannot push (known: {', '.join(ENDPOINTS)})",
                refused=True,
            )
        if names is not None:
            missing = names - {e.file for e in entries}
            if missing:
                raise PushError(
                    f"{', '.join(sorted(missing))} not in {directory}/manifest.jsonl: "
                    "only files of a built feed set can be pushed",
                    refused=True,
                )
        files.extend(FeedFile(directory, e) for e in entries if names is None or e.file in names)
    return files


def files_to_validate(
    paths: Iterable[str | os.PathLike[str]],
) -> list[tuple[Path, ManifestEntry | None]]:
    """The files `fastfeed validate` checks for command-line style arguments, in their order.

    A feed set (a directory) and a file of one are taken as `fastfeed push` takes them
    (`feed_files`: a directory without a manifest is refused), each with its manifest entry,
    whose datasource, feed type and kind the rules then follow; any other file is checked as it
    is, by its header (no entry).
    """
    given = [Path(p) for p in paths]
    listed: dict[Path, set[str]] = {}

    def in_set(path: Path) -> bool:
        if path.parent not in listed:
            try:
                listed[path.parent] = {e.file for e in read_manifest(path.parent)}
            except FastfeedError:
                listed[path.parent] = set()
        return path.name in listed[path.parent]

    of_sets = [p for p in given if p.is_dir() or in_set(p)]
    entries: dict[Path, dict[Path, ManifestEntry]] = {}
    for feed in feed_files(of_sets):
        entries.setdefault(feed.directory, {})[feed.path] = feed.entry
    files: dict[Path, ManifestEntry | None] = {}
    for path in given:
        if path.is_dir():
            files.update(entries.get(path, {}))
        else:
            files.setdefault(path, entries.get(path.parent, {}).get(path))
    return list(files.items())


def _looks_like_records(path: Path) -> bool:
    """JSON Lines given where a feed file is expected: by its name, or a first `{`."""
    if path.suffix in (".jsonl", ".ndjson", ".json"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4096).lstrip()[:1] == b"{"
    except OSError:
        return False
