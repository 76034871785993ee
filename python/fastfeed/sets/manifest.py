"""The manifest of a feed set: `manifest.jsonl`, one line per feed file, in push order."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from fastfeed._core import Blake3, Xxh3
from fastfeed.errors import FastfeedError

MANIFEST = "manifest.jsonl"


class FileHash(Protocol):
    """A hash given a file's bytes a piece at a time."""

    def update(self, data: bytes, /) -> None: ...
    def hexdigest(self) -> str: ...


def _sha256() -> FileHash:
    import hashlib  # here: loading OpenSSL's hashes (3 ms) would be a fixed cost of every build

    return hashlib.sha256()


#: The hash of each kind of digest a manifest may carry: XXH3-128, which the core hashes as it
#: writes a file (without the GIL, over 10 GB/s; it guards against accidental corruption, not
#: forgery, so it need not be cryptographic), and BLAKE3 and SHA-256, in manifests written
#: before.
HASHES: dict[str, Callable[[], FileHash]] = {"xxh3": Xxh3, "blake3": Blake3, "sha256": _sha256}


@dataclass(frozen=True)
class ManifestEntry:
    """One feed file. Files must be pushed in manifest order: the first file of a split full
    feed is `full` and replaces the datasource, the rest are `incremental` and add to it.

    `kind` is `feed` for content and web feeds (pushed to /xmlfeed) and `groups` for groups
    feeds (pushed to /xmlgroups), whose `datasource` is the groupsource.

    `digest` is the file's hash named by its kind: `xxh3:` and 32 hex digits (manifests
    written by earlier versions carry `blake3:`, or `sha256:` read from their `sha256` field)."""

    file: str
    datasource: str
    feedtype: str
    records: int
    bytes: int
    digest: str
    kind: str = "feed"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, item: dict[str, Any]) -> ManifestEntry:
        """The entry a manifest line holds; `TypeError` or `ValueError` says why it is none."""
        if "sha256" in item and "digest" not in item:
            item = dict(item)
            item["digest"] = f"sha256:{item.pop('sha256')}"
        entry = cls(**item)
        if entry.algorithm not in HASHES:
            raise ValueError(
                f"its digest is not one of {', '.join(HASHES)}: was it built by a newer fastfeed?"
            )
        return entry

    @property
    def algorithm(self) -> str:
        """The kind of the digest: xxh3, blake3 or sha256."""
        return self.digest.partition(":")[0]

    def hasher(self) -> FileHash:
        """A hash of the digest's kind, to check the file with (`digest_of`)."""
        return HASHES[self.algorithm]()

    def digest_of(self, hashed: FileHash) -> str:
        """The digest of what `hashed` (from `hasher`) was given, as the entry writes its own."""
        return f"{self.algorithm}:{hashed.hexdigest()}"


def read_manifest(directory: str | os.PathLike[str]) -> list[ManifestEntry]:
    """Reads DIR/manifest.jsonl; a directory without one is not a finished feed set."""
    path = Path(directory) / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FastfeedError(f"{path} does not exist: {_unfinished(Path(directory))}") from None
    entries = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(ManifestEntry.from_dict(orjson.loads(line)))
        except (TypeError, ValueError) as exc:  # orjson's JSONDecodeError is a ValueError
            raise FastfeedError(f"{path}:{lineno}: not a manifest entry: {exc}") from None
    return entries


def _unfinished(directory: Path) -> str:
    """What a directory without a manifest is, and what to do: a build or run writes the
    manifest last, so one stopped before its end left none, and its set is never finished. A
    journal there is a run's: it pushes each file as it is built, and journals those accepted
    (a build's set is pushed only once it has a manifest)."""
    from fastfeed.sets.journal import JOURNAL  # here: the journal's module reads manifests

    if (directory / JOURNAL).is_file():
        return (
            f"{directory} is not a finished feed set: a `fastfeed run` into it stopped before "
            f"its build finished, having pushed the files its {JOURNAL} lists; run it again "
            "into a new --out"
        )
    return (
        f"{directory} is not a finished feed set (did a `fastfeed build` or `fastfeed run` "
        "into it stop before its end? then build or run again into a new --out)"
    )
