"""The Python API for building feeds: `FeedWriter` (and the base it shares with `GroupsWriter`)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Literal, TypedDict

from fastfeed import _core
from fastfeed.errors import EmptyFullFeed
from fastfeed.manifest import ManifestEntry

FeedType = Literal["full", "incremental", "metadata-and-url"]
Compress = Literal["auto", "always", "never"]
AclFormat = Literal["per-url", "legacy"]

DEFAULT_MAX_BYTES: int = _core.DEFAULT_MAX_BYTES
HARD_MAX_BYTES: int = _core.HARD_MAX_BYTES
DEFAULT_LEVEL: int = _core.DEFAULT_LEVEL


class _PrincipalRequired(TypedDict):
    name: str
    scope: Literal["user", "group"]


class Principal(_PrincipalRequired, total=False):
    """A user or group: in an ACL (with `access`), or a member of a group (without)."""

    access: Literal["permit", "deny"]
    namespace: str
    case_sensitive: bool
    principal_type: Literal["unqualified"]


class Acl(TypedDict, total=False):
    """A per-URL ACL: who may or may not see the document, and what it inherits."""

    principals: Sequence[Principal]
    inheritance_type: Literal["child-overrides", "parent-overrides", "and-both-permit", "leaf-node"]
    inherit_from: str


class _RecordRequired(TypedDict):
    url: str


class Record(_RecordRequired, total=False):
    """One document, as in the JSON Lines schema (see the README). At most one content field.

    With `kind="acl"` it is instead an ACL for a URL that is not a document (a folder, a share)
    and carries only `url` and `acl`."""

    kind: Literal["document", "acl"]
    action: Literal["add", "delete", "update", "delete-pattern"]
    mimetype: str
    displayurl: str
    last_modified: str | int | float
    lock: bool
    authmethod: Literal["none", "httpbasic", "ntlm", "httpsso"]
    pagerank: int
    crawl_immediately: bool
    crawl_once: bool
    metadata: Mapping[str, str | Sequence[str]]
    content: str | bytes
    content_base64: str
    content_path: str | os.PathLike[str]
    acl: Acl
    overwrite_acls: bool


class FeedWarning(UserWarning):
    """Something was written but deserves a look, such as a record over the size cap."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class SetWriter:
    """What every writer of a set of size-capped files shares: the JSON Lines fast path, the
    manifest, and closing as a context manager (see `FeedWriter`)."""

    def __init__(
        self,
        core: _core.FeedWriter,
        out_dir: str | os.PathLike[str],
        on_file: Callable[[ManifestEntry], None] | None,
        on_warning: Callable[[FeedWarning], None] | None,
        refuse_empty: str | None = None,
    ) -> None:
        self._core = core
        # What an empty set would do on the appliance, when that is refused.
        self._refuse_empty = refuse_empty
        self.out_dir = os.fspath(out_dir)
        self._on_file = on_file
        self._on_warning = on_warning
        self._manifest: list[ManifestEntry] | None = None

    def add_jsonl(self, chunk: bytes | memoryview) -> int:
        """Adds the items of a chunk of JSON Lines (whole lines only), parsed in Rust on the
        worker threads, and returns how many lines the chunk held. A bad line raises
        `RecordError` whose `.index` is its line in the chunk (blank lines counted); nothing of
        the chunk is written then. The chunk goes ahead of those started and not yet waited
        for."""
        problems, finished, lines = self._core.add_jsonl(chunk)
        self._report(problems, finished)
        return lines

    def start_jsonl(self, chunk: bytes | memoryview) -> None:
        """Starts encoding a chunk of JSON Lines on the worker threads and returns at once;
        `wait_jsonl` adds it, and what is added meanwhile goes ahead of it. Starting the next
        chunk before waiting for the last keeps the threads busy while Python reads on."""
        self._core.start_jsonl(chunk)

    def wait_jsonl(self) -> int:
        """Waits for the oldest chunk started and adds its items, as `add_jsonl` does (same
        return value, same `RecordError`, nothing of the chunk written on error)."""
        problems, finished, lines = self._core.wait_jsonl()
        self._report(problems, finished)
        return lines

    def close(self) -> list[ManifestEntry]:
        """Finishes the last file, writes the manifest and returns it. Closing twice is harmless."""
        if self._manifest is None:
            if self._refuse_empty is not None and self._core.records == 0:
                self.abort()
                raise EmptyFullFeed(
                    f"{self._refuse_empty}; nothing was written. If that is what you want, build "
                    "it with --allow-empty-full (Python: allow_empty_full=True)"
                )
            entries, finished = self._core.finish()
            self._report([], finished)
            self._manifest = [ManifestEntry(**e) for e in entries]
        return self._manifest

    def abort(self) -> None:
        """Stops without a manifest; finished files stay, the unfinished one is removed."""
        self._core.abort()

    @property
    def manifest(self) -> list[ManifestEntry]:
        if self._manifest is None:
            raise RuntimeError("the manifest exists once the writer is closed")
        return self._manifest

    @property
    def records(self) -> int:
        return self._core.records

    @property
    def bytes(self) -> int:
        return self._core.bytes

    @property
    def files(self) -> int:
        return self._core.files

    def _report(self, problems: list[tuple[int, str]], finished: list[dict[str, object]]) -> None:
        for index, message in problems:
            warning = FeedWarning(message, index)
            if self._on_warning is None:
                warnings.warn(warning, stacklevel=3)
            else:
                self._on_warning(warning)
        if self._on_file is not None:
            for entry in finished:
                self._on_file(ManifestEntry(**entry))  # type: ignore[arg-type]

    def __enter__(self) -> SetWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class _RecordWriter(SetWriter):
    """A writer that takes document records (see `FeedWriter`)."""

    def add(self, record: Record) -> None:
        """Adds one record. Prefer `add_batch` for many: each call crosses into Rust once."""
        self.add_batch((record,))

    def add_batch(self, records: Iterable[Record]) -> None:
        """Adds records in order; nothing of the batch is written if one of them is refused."""
        batch = records if isinstance(records, (list, tuple)) else list(records)
        problems, finished = self._core.add_batch(batch)
        self._report(problems, finished)


class FeedWriter(_RecordWriter):
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
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int = 0,
        compress: Compress = "auto",
        level: int = DEFAULT_LEVEL,
        workers: int = 0,
        acl_format: AclFormat = "per-url",
        allow_empty_full: bool = False,
        on_file: Callable[[ManifestEntry], None] | None = None,
        on_warning: Callable[[FeedWarning], None] | None = None,
    ) -> None:
        core = _core.FeedWriter(
            os.fspath(out_dir),
            datasource,
            feedtype,
            max_bytes=max_bytes,
            max_records=max_records,
            compress=compress,
            level=level,
            workers=workers,
            acl_format=acl_format,
        )
        empty = feedtype == "full" and not allow_empty_full
        refuse = f"a full feed with no records would remove every document of {datasource!r}"
        super().__init__(core, out_dir, on_file, on_warning, refuse if empty else None)

    def __enter__(self) -> FeedWriter:
        return self


class ThunderstoneWriter(_RecordWriter):
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
