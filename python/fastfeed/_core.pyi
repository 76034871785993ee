"""Type stubs of the Rust core (`rust/bindings.rs`)."""

import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Self, final

__all__ = [
    "FeedWriter",
    "MappingGuard",
    "Blake3",
    "Xxh3",
    "DirectoryWalk",
    "url_problem",
    "parse_last_modified",
    "datasource_problem",
    "mimetype_problem",
    "fingerprint_jsonl",
    "cut_short",
    "repeated_keys",
    "fingerprint_records",
    "TableFile",
    "ArrowBatch",
    "rows_json",
    "EmptyFullFeed",
    "FastfeedError",
    "FeedError",
    "RecordError",
    "DEFAULT_MAX_BYTES",
    "HARD_MAX_BYTES",
    "FEED_MAX_BYTES",
    "DEFAULT_LEVEL",
    "FINGERPRINT_VERSION",
    "RECORD_FIELDS",
    "LEGACY_PRINCIPALS",
    "LEGACY_INHERITANCE",
    "LEGACY_INHERIT_FROM",
    "LEGACY_IGNORED_ROLE",
    "legacy_role",
]

DEFAULT_MAX_BYTES: int
HARD_MAX_BYTES: int
#: The appliance's limit: a feed file must be smaller (the guide: "less than 1 GB").
FEED_MAX_BYTES: int
DEFAULT_LEVEL: int
#: The fields of a record, in the README's order: every reader of records takes them from here.
RECORD_FIELDS: tuple[str, ...]
#: The tag of the fingerprints' canonical form: a store of fingerprints made by another
#: version must compute them again.
FINGERPRINT_VERSION: str
#: The guide's Legacy Metadata Format: the meta names that give principals, with the scope
#: and access each gives; those of inheritance; and the role suffix whose entry is ignored.
LEGACY_PRINCIPALS: dict[str, tuple[str, str]]
LEGACY_INHERITANCE: str
LEGACY_INHERIT_FROM: str
LEGACY_IGNORED_ROLE: str

def url_problem(url: str) -> str | None: ...
def datasource_problem(name: str) -> str | None: ...
def mimetype_problem(mimetype: str) -> str | None: ...
def legacy_role(name: str, content: str) -> str | None: ...
def parse_last_modified(value: str | int | float) -> float: ...
def fingerprint_jsonl(
    chunk: bytes | memoryview, *, source: int = 0, base: int = 0
) -> tuple[str, bytes, bytes, int, int]: ...
def cut_short(line: bytes | memoryview) -> bool: ...
def repeated_keys(path: str | os.PathLike[str]) -> bool: ...
def fingerprint_records(records: Iterable[Mapping[str, Any]]) -> list[bytes]: ...
def rows_json(data: object, kind: str = "feed") -> bytes: ...

class FastfeedError(Exception): ...
class FeedError(FastfeedError): ...
class EmptyFullFeed(FastfeedError): ...

class RecordError(FeedError):
    index: int
    field: str | None
    reason: str
    #: not_json, unknown_field, missing, invalid, not_allowed, unreadable or too_large.
    kind: Literal[
        "not_json", "unknown_field", "missing", "invalid", "not_allowed", "unreadable", "too_large"
    ]
    #: Lines of a chunk of JSON Lines before this one written all the same (`add_jsonl`).
    written: int

@final
class FeedWriter:
    def __new__(
        cls,
        out_dir: str | os.PathLike[str],
        datasource: str,
        feedtype: str,
        *,
        kind: str = "feed",
        max_bytes: int = ...,
        max_records: int = 0,
        compress: str = "auto",
        level: int = ...,
        workers: int = 0,
        acl_format: str = "per-url",
        allow_empty_full: bool = False,
    ) -> Self: ...
    def add_batch(
        self, records: Iterable[Mapping[str, Any]]
    ) -> tuple[list[tuple[int, str]], list[dict[str, Any]]]: ...
    def add_arrow(
        self, data: object
    ) -> tuple[list[tuple[int, str]], list[dict[str, Any]], RecordError | None]: ...
    def add_jsonl(
        self, chunk: bytes | memoryview
    ) -> tuple[list[tuple[int, str]], list[dict[str, Any]], int]: ...
    def start_jsonl(self, chunk: bytes | memoryview) -> None: ...
    def wait_jsonl(self) -> tuple[list[tuple[int, str]], list[dict[str, Any]], int]: ...
    def skip_refused(self, on: bool) -> None: ...
    def take_refused(self, most: int) -> list[RecordError]: ...
    def fingerprint_records(self, on: bool) -> None: ...
    def take_fingerprints(
        self, *, source: int = 0, base: int = 0
    ) -> tuple[str, bytes, bytes, int]: ...
    def finish(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...
    def abort(self) -> None: ...
    @property
    def kind(self) -> str: ...
    #: `records`, `bytes` (of the records as encoded, the files' headers not counted) and `files`
    #: stay readable once the writer is closed or aborted, as they were then (once aborted, with
    #: the unfinished file it removed); they raise `FeedError` once its close failed or an internal
    #: error stopped it. Read them on the writer's thread: while a call on another thread holds
    #: the writer, they raise `RuntimeError` ("Already mutably borrowed").
    @property
    def records(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def files(self) -> int: ...

@final
class MappingGuard:
    def __new__(cls, mapping: Any) -> Self: ...
    @property
    def truncated(self) -> bool: ...
    def close(self) -> None: ...

@final
class Blake3:
    def __new__(cls) -> Self: ...
    def update(self, data: bytes) -> None: ...
    def hexdigest(self) -> str: ...

@final
class Xxh3:
    def __new__(cls) -> Self: ...
    def update(self, data: bytes) -> None: ...
    def hexdigest(self) -> str: ...

@final
class DirectoryWalk:
    def __new__(
        cls,
        top: str | os.PathLike[str],
        base_url: str,
        skip: tuple[int, int] | None,
        batch_items: int,
        batch_bytes: int,
    ) -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> tuple[bytes, list[str], list[tuple[str, str, int]]]: ...

@final
class TableFile:
    def __new__(cls, path: str | os.PathLike[str], kind: str = "feed") -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> ArrowBatch: ...

@final
class ArrowBatch:
    @property
    def num_rows(self) -> int: ...
    def slice(self, offset: int, length: int | None = None) -> ArrowBatch: ...
