"""The build pipeline behind `fastfeed build`: inputs to a feed set on disk.

Inputs are JSON Lines files (read with orjson), standard input, or directories of documents.
Records cross into the Rust core in batches bounded in count and bytes, which keeps memory flat
whatever the corpus size, and a refused record is reported with its file and line.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import quote

import orjson

from fastfeed.errors import FastfeedError, RecordError
from fastfeed.manifest import ManifestEntry
from fastfeed.progress import Progress, human_bytes
from fastfeed.writer import DEFAULT_LEVEL, DEFAULT_MAX_BYTES, Compress, FeedType, FeedWarning, FeedWriter

OnError = Literal["stop", "skip"]

#: A batch is sent to the core when it holds this many records or input bytes, whichever first.
BATCH_RECORDS = 2048
BATCH_BYTES = 16 * 1024 * 1024

REJECTED = "rejected.jsonl"
REJECTED_LOG = "rejected.log"


class InputError(FastfeedError):
    """An input record that cannot be read or is refused, with where it came from."""

    def __init__(self, location: str, message: str) -> None:
        super().__init__(f"{location}: {message}")
        self.location = location
        self.reason = message


@dataclass
class Item:
    """One input record, with what is needed to name it and to save it if refused."""

    location: str
    record: dict[str, Any] | None
    raw: bytes
    size: int
    error: str | None = None


@dataclass
class BuildSummary:
    out_dir: str
    manifest: list[ManifestEntry]
    records: int
    rejected: int
    warnings: int
    bytes: int
    seconds: float
    rejected_file: str | None = field(default=None)


def _read_jsonl(stream: IO[bytes], name: str) -> Iterator[Item]:
    for lineno, line in enumerate(stream, 1):
        if not line.strip():
            continue
        location = f"{name}:{lineno}"
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            # orjson says "str is not valid UTF-8" for bad bytes, which names the problem.
            yield Item(location, None, line, len(line), f"not a JSON object: {exc}")
            continue
        if not isinstance(record, dict):
            yield Item(location, None, line, len(line), f"expected a JSON object, got {type(record).__name__}")
            continue
        yield Item(location, record, line, len(line))


def _read_directory(root: Path, base_url: str) -> Iterator[Item]:
    base = base_url if base_url.endswith("/") else base_url + "/"
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            rel = path.relative_to(root).as_posix()
            try:
                stat = path.stat()
            except OSError as exc:
                yield Item(str(path), None, b"", 0, f"cannot read: {exc}")
                continue
            record = {
                "url": base + quote(rel, safe="/"),
                "content_path": str(path),
                "last_modified": int(stat.st_mtime),
            }
            yield Item(str(path), record, orjson.dumps(record) + b"\n", stat.st_size)


def read_inputs(inputs: Sequence[str], base_url: str | None = None) -> Iterator[Item]:
    """Yields every input record in order: JSON Lines files, `-` for stdin, or directories."""
    for name in inputs:
        if name == "-":
            yield from _read_jsonl(sys.stdin.buffer, "<stdin>")
            continue
        path = Path(name)
        if path.is_dir():
            if not base_url:
                raise FastfeedError(
                    f"{name} is a directory: give --base-url to map its files to URLs "
                    "(e.g. --base-url http://docs.example.com/share/)"
                )
            yield from _read_directory(path, base_url)
        else:
            try:
                stream = path.open("rb")
            except OSError as exc:
                raise FastfeedError(f"cannot read {name}: {exc.strerror}") from None
            with stream:
                yield from _read_jsonl(stream, name)


def _batches(items: Iterator[Item]) -> Iterator[list[Item]]:
    batch: list[Item] = []
    size = 0
    for item in items:
        batch.append(item)
        size += item.size
        if len(batch) >= BATCH_RECORDS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


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
    on_error: OnError = "stop",
    on_file: Callable[[ManifestEntry], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> BuildSummary:
    """Builds a feed set from `inputs` into `out_dir` and returns what was written.

    With `on_error="stop"` the first refused record raises `InputError` and no manifest is
    written. With `"skip"`, refused records are saved byte for byte to `rejected.jsonl` (with
    the reasons in `rejected.log`) so that they can be fixed and fed again; none is lost.
    """
    started = time.monotonic()
    out = Path(out_dir)
    warned = 0
    rejected: list[tuple[Item, str]] = []
    current: list[Item] = []

    def warn(warning: FeedWarning) -> None:
        nonlocal warned
        warned += 1
        message = f"{current[warning.index].location}: {warning}"
        if on_warning is None:
            print(f"warning: {message}", file=sys.stderr)
        else:
            on_warning(message)

    def refuse(item: Item, reason: str) -> None:
        if on_error == "stop":
            raise InputError(item.location, reason)
        rejected.append((item, reason))

    writer = FeedWriter(
        out,
        datasource,
        feedtype,
        max_bytes=max_bytes,
        max_records=max_records,
        compress=compress,
        level=level,
        workers=workers,
        on_file=on_file,
        on_warning=warn,
    )
    with writer:
        for batch in _batches(read_inputs(inputs, base_url)):
            for item in batch:
                if item.error is not None:
                    refuse(item, item.error)
            current = [item for item in batch if item.error is None]
            while current:
                try:
                    writer.add_batch([item.record for item in current])  # type: ignore[misc]
                    break
                except RecordError as exc:
                    # Nothing of the batch was written: drop the culprit and send the rest again.
                    bad = current.pop(exc.index)
                    refuse(bad, f"{exc.field}: {exc.reason}" if exc.field else exc.reason)
            if progress is not None:
                rate = writer.records / max(progress.elapsed, 1e-9)
                progress.update(
                    f"{writer.records:,} records, {writer.files} files, "
                    f"{human_bytes(writer.bytes)}, {rate:,.0f} records/s"
                    + (f", {len(rejected)} rejected" if rejected else "")
                )
    if progress is not None:
        progress.close()
    rejected_file = _save_rejected(out, rejected) if rejected else None
    return BuildSummary(
        out_dir=str(out),
        manifest=writer.manifest,
        records=sum(e.records for e in writer.manifest),
        rejected=len(rejected),
        warnings=warned,
        bytes=sum(e.bytes for e in writer.manifest),
        seconds=time.monotonic() - started,
        rejected_file=rejected_file,
    )


def _save_rejected(out: Path, rejected: list[tuple[Item, str]]) -> str:
    path = out / REJECTED
    with path.open("wb") as lines, (out / REJECTED_LOG).open("w", encoding="utf-8") as log:
        for item, reason in rejected:
            lines.write(item.raw if item.raw.endswith(b"\n") else item.raw + b"\n")
            log.write(f"{item.location}: {reason}\n")
    return str(path)
