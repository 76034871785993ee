"""What every writer of a set of size-capped files shares (`SetWriter`), and the base of the
writers that take document records (`RecordWriter`)."""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Protocol, Self, TypedDict, TypeVar, get_args, get_type_hints

from fastfeed import _core
from fastfeed.errors import RecordError
from fastfeed.sets.manifest import ManifestEntry
from fastfeed.sets.records import Record

#: The refused lines `take_refused` makes into `RecordError`s at a time.
REFUSED_BATCH = 1024

DEFAULT_MAX_BYTES: int = _core.DEFAULT_MAX_BYTES
HARD_MAX_BYTES: int = _core.HARD_MAX_BYTES
DEFAULT_LEVEL: int = _core.DEFAULT_LEVEL
#: What the core takes for each writer option left out: the defaults of its signature, which
#: apply them (`rust/bindings.rs`), but the two it names by constants, shown there as `...`.
CORE_DEFAULTS: dict[str, object] = {
    p.name: p.default
    for p in inspect.signature(_core.FeedWriter).parameters.values()
    if p.kind == p.KEYWORD_ONLY
} | {"max_bytes": DEFAULT_MAX_BYTES, "level": DEFAULT_LEVEL}

#: Called with each file's manifest entry as soon as the file is finished.
OnFile = Callable[[ManifestEntry], None]


class WriterOptions(TypedDict, total=False):
    """How every writer cuts a set into files, taken by keyword by the writers, the builders
    and the syncs (`max_bytes=50_000_000`) and handed on whole, so that each is declared once
    here; one left out takes the Rust core's default. Each is `Annotated` with what it does,
    which `show_options` puts in the help of a function taking them."""

    max_bytes: Annotated[
        int, "cap on each file, in bytes (default DEFAULT_MAX_BYTES, at most HARD_MAX_BYTES)"
    ]
    max_records: Annotated[int, "cap on the records of each file (default 0: none)"]
    workers: Annotated[
        int, "encoding threads (default 0: one per core; 1 in each partition on Dask or Spark)"
    ]


#: A function that takes its options as `**options: Unpack[SomeOptions]`.
_Taking = TypeVar("_Taking", bound=Callable[..., object])


def show_options(
    options: type, *applied_by: Callable[..., object] | Mapping[str, object]
) -> Callable[[_Taking], _Taking]:
    """Shows the options a function takes as `**options` (a TypedDict of `Annotated[type,
    what it does]` fields, such as `WriterOptions`) in its help: each a keyword-only parameter
    of its signature in place of `**options`, what it does at the end of its docstring. Typing
    is `Unpack[options]`'s, which checks the callers. Each option's default is that of the
    first of `applied_by` (the functions the decorated one hands its options to, or defaults
    they apply, as a mapping) that gives one, else the core's (`CORE_DEFAULTS`): read where
    they are applied, they are the values a call leaving them out gets."""
    defaults = dict(CORE_DEFAULTS)
    for applier in reversed(applied_by):
        if not isinstance(applier, Mapping):
            parameters = inspect.signature(applier).parameters.values()
            applier = {
                p.name: p.default
                for p in parameters
                if p.kind == p.KEYWORD_ONLY and p.default is not p.empty
            }
        defaults |= applier

    def show(function: _Taking) -> _Taking:
        signature = inspect.signature(function, eval_str=True)
        parameters = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
        lines = []
        for name, hint in get_type_hints(options, include_extras=True).items():
            kind, doc = get_args(hint)
            parameters.append(
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name], annotation=kind
                )
            )
            lines.append(f"    {name}: {doc}")
        function.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        function.__doc__ = "\n".join(
            [
                inspect.cleandoc(function.__doc__ or ""),
                "",
                "Options (keyword-only; one left out takes its default):",
                *lines,
            ]
        )
        return function

    return show


class ArrowStream(Protocol):
    """What exports an Arrow stream through the PyCapsule interface (a pyarrow Table or
    RecordBatchReader, a Polars DataFrame, a DuckDB result...)."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...


class ArrowArray(Protocol):
    """What exports one Arrow array through the PyCapsule interface (a pyarrow RecordBatch or
    StructArray)."""

    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[object, object]: ...


#: Tables to take as rows (records, memberships), read in place (see `SetWriter.add_arrow`).
ArrowData = ArrowStream | ArrowArray


class FeedWarning(UserWarning):
    """Something was written but deserves a look, such as a record over the size cap."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def print_warning(message: str) -> None:
    """Says a build's warning, located (`docs.jsonl:17: ...`), on stderr: what a build or sync
    given no `on_warning` does with each, and the command line with the ones it shows."""
    print(f"warning: {message}", file=sys.stderr)


class SetWriter:
    """What every writer of a set of size-capped files shares: the JSON Lines fast path, the
    manifest, and closing as a context manager (see `FeedWriter`)."""

    def __init__(
        self,
        core: _core.FeedWriter,
        out_dir: str | os.PathLike[str],
        on_file: OnFile | None,
        on_warning: Callable[[FeedWarning], None] | None,
    ) -> None:
        self._core = core
        self.out_dir = os.fspath(out_dir)
        self._on_file = on_file
        self._on_warning = on_warning
        self._manifest: list[ManifestEntry] | None = None

    def add_jsonl(self, chunk: bytes | memoryview) -> int:
        """Adds the items of a chunk of JSON Lines (whole lines only), parsed in Rust on the
        worker threads, and returns how many lines the chunk held. A bad line (unless
        `skip_refused`) raises `RecordError` whose `.index` is its line in the chunk (blank
        lines counted); nothing of the chunk is written then but its first `.written` lines
        (none, unless the chunk named more big files by content_path than one round of encoding
        takes: its rounds are written one by one, so that the records waiting to be written
        stay few). A file that cannot be read or written (a full disk) raises `OSError`, with
        `.written` too: 0 when a feed file could not be written, which stops the writer. The
        chunk goes ahead of those started and not yet waited for."""
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
        return value, same `RecordError` or `OSError`, nothing of the chunk but `.written` lines
        written on error)."""
        problems, finished, lines = self._core.wait_jsonl()
        self._report(problems, finished)
        return lines

    def add_arrow(self, data: ArrowData) -> None:
        """Adds the rows of Arrow data, whose columns are the fields of what the writer takes
        (record fields; a `GroupsWriter`'s, those of a membership) by name, read in place by the
        Rust core without pyarrow: anything with `__arrow_c_stream__` or `__arrow_c_array__` (a
        pyarrow Table, RecordBatch or RecordBatchReader, a Polars DataFrame...). A bad row
        raises `RecordError` whose `.index` counts rows across the whole input: the rows before
        it are written, none after it, so `add_arrow(table.slice(error.index + 1))` goes on
        after it. A column of an unknown name or of a type that cannot hold its field raises
        `FeedError` before any row is written. `skip_refused` does not apply: the first bad row
        raises."""
        problems, finished, error = self._core.add_arrow(data)
        self._report(problems, finished)
        if error is not None:
            raise error

    def skip_refused(self, on: bool = True) -> None:
        """From now on (`on`), or no longer, a bad line of JSON Lines raises nothing: the
        chunk's other lines are added, in one pass, and `take_refused` hands over the
        `RecordError` of each bad one. Off by default: the first bad line raises. It does not
        apply to `add_batch` and `add_arrow`, whose first bad record always raises."""
        self._core.skip_refused(on)

    def take_refused(self, most: int = REFUSED_BATCH) -> list[RecordError]:
        """The `RecordError`s of up to `most` of the lines set aside (see `skip_refused`) and
        not yet taken, in input order, each `.index` its line in its chunk (blank lines
        counted). Take them after each chunk, until none is left: the writer holds them
        compact, and makes `most` at a time, so that memory stays flat however many lines a
        chunk refuses."""
        return self._core.take_refused(most)

    def fingerprint_records(self, on: bool = True) -> None:
        """From now on (`on`), or no longer, reads each record added as JSON Lines as a sync's
        snapshot does (a delete or an update is refused) and fingerprints it on the worker
        threads as it encodes it, for `take_fingerprints`. Off by default: a plain build pays
        nothing for it."""
        self._core.fingerprint_records(on)

    def take_fingerprints(self, *, source: int = 0, base: int = 0) -> tuple[str, bytes, bytes, int]:
        """The fingerprints of the records added since last asked, as a sync's snapshot stores
        them (`_core.fingerprint_jsonl`): rows, spans, URL keys, how many. Take them after each
        chunk: `base`, the chunk's offset in input `source`, places their spans."""
        return self._core.take_fingerprints(source=source, base=base)

    def close(self) -> list[ManifestEntry]:
        """Finishes the last file, writes the manifest and returns it. Closing twice is harmless,
        even after an `on_file` that raised here: the manifest was written, and is returned. A
        set the writer refuses empty (a full feed with no records) raises `EmptyFullFeed`, and
        nothing is written, however its records were to come; chunks started and not waited for
        raise `FeedError` saying so first (their records are not counted yet). Closing again
        after a close that raised raises again: `EmptyFullFeed` again, or `FeedError` naming the
        first failure (a file that could not be written); after `abort`, `FeedError` saying it
        was aborted: there is no manifest. A writer an internal error stopped raises `FeedError`
        saying so, never `EmptyFullFeed`: its count of records is not read as 0 (nor are
        `records`, `bytes` and `files`)."""
        if self._manifest is None:
            entries, finished = self._core.finish()
            # Kept before the files are said: the manifest is on disk, whatever `on_file` raises.
            self._manifest = [ManifestEntry(**e) for e in entries]
            self._report([], finished)
        return self._manifest

    def abort(self) -> None:
        """Stops without a manifest; finished files stay, the unfinished one is removed. Harmless
        once closed (the manifest stays) or aborted."""
        self._core.abort()

    @property
    def manifest(self) -> list[ManifestEntry]:
        if self._manifest is None:
            raise RuntimeError("the manifest exists once the writer is closed")
        return self._manifest

    @property
    def kind(self) -> str:
        """The kind of set written (`feed`, `groups`, `thunderstone`): whose fields a table's
        columns are to this writer (see `_core.TableFile`), a record's unless a membership's."""
        return self._core.kind

    @property
    def records(self) -> int:
        """Records taken so far (written, or encoded and about to be). Still readable once
        closed or aborted, as they were then (with `bytes` and `files`): once closed, the set's
        final counts; once aborted, the records of the unfinished file it removed still count.
        A writer whose close failed, or that an internal error stopped, raises `FeedError`
        saying why. Read the counts on the thread that adds to the writer: read while an add on
        another thread holds it, they raise `RuntimeError` ("Already mutably borrowed")."""
        return self._core.records

    @property
    def bytes(self) -> int:
        """Bytes of the records taken so far, as encoded: the files' headers are not counted,
        so the files on disk hold more (see `records`)."""
        return self._core.bytes

    @property
    def files(self) -> int:
        """Files finished so far; once closed, all of them (see `records`)."""
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class RecordWriter(SetWriter):
    """A writer that takes document records (see `FeedWriter`)."""

    def add(self, record: Record) -> None:
        """Adds one record. Prefer `add_batch` for many: each call crosses into Rust once."""
        self.add_batch((record,))

    def add_batch(self, records: Iterable[Record]) -> None:
        """Adds records in order; nothing of the batch is written if one of them is refused: its
        `RecordError` is raised, `skip_refused` or not."""
        batch = records if isinstance(records, (list, tuple)) else list(records)
        problems, finished = self._core.add_batch(batch)
        self._report(problems, finished)
