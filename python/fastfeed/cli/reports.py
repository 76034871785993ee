"""What commands say when they end: the exit statuses, an error in the user's words, and the
summaries of pushes and syncs (on stderr, and as JSON on stdout with --json)."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from fastfeed.errors import FastfeedError, InputError, MassDelete, PushError
from fastfeed.progress import Progress, plural

if TYPE_CHECKING:
    from fastfeed.delivery.results import PushSummary
    from fastfeed.delivery.settings import PushSettings
    from fastfeed.sets.sync import SyncSummary


class ExitCode(IntEnum):
    OK = 0
    #: Some of the work failed (bad records, files the appliance did not accept, invalid feeds).
    FAILED = 1
    #: The command line was wrong (click's own status).
    USAGE = 2
    #: Nothing was done because the setup is wrong: not a trusted IP, bad TLS, missing manifest.
    REFUSED = 3
    #: Stopped by Ctrl-C (128 + SIGINT, as shells report it).
    INTERRUPTED = 130
    #: Stdout's reader went away (128 + SIGPIPE, as a program killed by it exits).
    BROKEN_PIPE = 141


def describe(exc: Exception) -> str:
    """An error as the CLI shows it: an OSError as "file: what the system said", without
    Python's "[Errno N]" and quotes, and what to do where the system's words do not say."""
    if isinstance(exc, OSError) and exc.strerror:
        said = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
        remedy = _REMEDIES.get(exc.errno or 0)
        return f"{said} ({remedy})" if remedy else said
    return str(exc)


#: What to do about an OSError, by its errno.
_REMEDIES = {
    errno.EMFILE: "the process holds as many open files as its limit allows: raise it "
    "(`ulimit -n`), or close some",
}


def refused(count: int, what: str) -> str:
    """`1 line was refused`, `3 records were refused`."""
    return f"{plural(count, what)} {'was' if count == 1 else 'were'} refused"


def emit(data: Mapping[str, object], as_json: bool) -> None:
    """With --json, a command's summary as one JSON object on stdout. Every one has `ok`, true
    exactly when the command exits 0."""
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(data) + b"\n")


def failed(
    command: str,
    error: str,
    as_json: bool,
    *,
    hint: str | None = None,
    status: int = ExitCode.FAILED,
    data: Mapping[str, object] | None = None,
) -> int:
    """A command that stops on an error: the error and what to do about it on stderr, and with
    --json `{"ok": false, "error": ...}` (with `data`, what was done before) on stdout. Returns
    the exit status."""
    print(f"fastfeed {command}: error: {error}", file=sys.stderr)
    if hint:
        print(f"fastfeed {command}: {hint}", file=sys.stderr)
    emit({**(data or {}), "ok": False, "error": error}, as_json)
    return status


#: Why `fastfeed run` sent nothing of a full set whose build did not finish.
NOTHING_PUSHED = "nothing was pushed (a full feed is pushed only once its build has finished)"


def _remedy(exc: InputError | OSError, item: str, skippable: bool) -> str:
    if not isinstance(exc, InputError):
        return "it"
    if skippable:
        return f"the {item} (or use --on-error skip)"
    return "the input"


def build_stopped(
    command: str,
    exc: InputError | OSError,
    as_json: bool,
    *,
    out: str,
    item: str,
    skippable: bool,
) -> int:
    """A build stopped by a refused `item` (record, line), by an input it cannot read whole
    or by the disk: it left no manifest, so nothing half-built can be pushed; says what to fix,
    and that --on-error skip sets the item aside where it would (`skippable`)."""
    hint = (
        f"stopped; {out} has no manifest and cannot be pushed. Fix "
        f"{_remedy(exc, item, skippable)} and build again into an empty directory."
    )
    return failed(command, describe(exc), as_json, hint=hint, data={"out": out})


def run_stopped(
    exc: InputError | OSError, as_json: bool, *, out: str, full: bool, skippable: bool
) -> int:
    """`fastfeed run`'s build stopped as `build_stopped` says: of a `full` set nothing was
    pushed; of another, the files built before were."""
    pushed = NOTHING_PUSHED if full else "the files built before were pushed"
    hint = (
        f"the build stopped; {pushed}. {out} has no manifest: fix "
        f"{_remedy(exc, 'record', skippable)} and run again with a new --out."
    )
    return failed("run", describe(exc), as_json, hint=hint, data={"out": out})


class Warnings:
    """Says a build's warnings on stderr, the first `SHOWN` of them, and at the end how many
    more there were: a flood (a --max-bytes smaller than every record puts each alone in a
    file, with a warning) would bury the summary and the errors. Called on the builder's
    thread; `--json` counts them all."""

    SHOWN = 20

    def __init__(self, command: str) -> None:
        self.command = command
        self.count = 0

    def __call__(self, message: str) -> None:
        self.count += 1
        if self.count <= self.SHOWN:
            # Here: the writer's module loads the core, which a push does not need.
            from fastfeed.sets.writer import print_warning

            print_warning(message)

    def __enter__(self) -> Warnings:
        return self

    def __exit__(self, *exc: object) -> None:
        hidden = self.count - self.SHOWN
        if hidden > 0:
            print(
                f"fastfeed {self.command}: {plural(hidden, 'more warning')} not shown",
                file=sys.stderr,
            )


def skippable(exc: InputError | OSError, on_error: str) -> bool:
    """Whether --on-error skip would have set aside what stopped a build (see
    `InputError.skippable`): a refused line, row or file of a directory of documents."""
    return isinstance(exc, InputError) and exc.skippable and on_error != "skip"


def push_sets(
    command: str,
    paths: Sequence[str],
    settings: PushSettings,
    as_json: bool,
    *,
    replay: bool = False,
    allow_full_groups: bool = False,
    allow_empty_full: bool = False,
    groupsource: str | None = None,
) -> int:
    """Pushes feed or groups sets (or files of them, or lone feed files) and reports it, with
    a reminder that lone files are not journalled: the commands that send to /xmlfeed and
    /xmlgroups."""
    from fastfeed.gsa.files import NOT_JOURNALLED, is_lone
    from fastfeed.gsa.push import push  # httpx: only for the commands that push

    lone = [path for path in paths if is_lone(Path(path))]
    summary = push(
        paths,
        settings,
        progress=Progress(),
        replay=replay,
        allow_full_groups=allow_full_groups,
        allow_empty_full=allow_empty_full,
        groupsource=groupsource,
    )
    status = report(command, summary, as_json)
    for path in lone:
        print(f"fastfeed {command}: {path}: {NOT_JOURNALLED}", file=sys.stderr)
    return status


def report(command: str, summary: PushSummary, as_json: bool) -> int:
    for result in summary.results:
        if result.outcome.value in ("failed", "blocked"):
            print(f"{result.feed.path}: {result.outcome.value}: {result.message}", file=sys.stderr)
    print(f"fastfeed {command}: {summary.describe()}", file=sys.stderr)
    emit(summary.to_dict(), as_json)
    return ExitCode.OK if summary.ok else ExitCode.FAILED


def stopped(command: str, exc: FastfeedError, as_json: bool) -> int:
    """A push that could not go on: says why, and what was done before; status 3 when nothing
    could be done because the setup is wrong. The commands that push report their errors so
    (`Command`'s `errors`)."""
    summary = exc.summary if isinstance(exc, PushError) else None
    refused = not isinstance(exc, PushError) or exc.refused
    return failed(
        command,
        str(exc),
        as_json,
        hint=f"before stopping: {summary.describe()}" if summary and summary.results else None,
        status=ExitCode.REFUSED if refused else ExitCode.FAILED,
        data=summary.to_dict() if summary is not None else None,
    )


def mass_delete(command: str, exc: MassDelete, as_json: bool) -> int:
    """A snapshot refused for deleting too much: nothing was done."""
    print(f"fastfeed {command}: refused: {exc}", file=sys.stderr)
    emit({"ok": False, "error": str(exc), "deleted": exc.deleted, "held": exc.held}, as_json)
    return ExitCode.REFUSED


def run_sync_command(
    command: str, as_json: bool, call: Callable[[], SyncSummary], warnings: Warnings
) -> int:
    """Runs a sync and reports it: what it found (with example URLs), what it sent, where the
    set is kept, how many `warnings` (counted in --json, as a build's); a refusal names why,
    with the exit status the help promises (other errors are reported by the command, as
    `stopped`)."""
    try:
        summary = call()
    except InputError as exc:
        hint = "nothing was sent and the state is as it was; fix the input and sync again"
        return failed(command, str(exc), as_json, hint=hint)
    except MassDelete as exc:
        return mass_delete(command, exc, as_json)
    if summary.resumed:
        print(
            f"fastfeed {command}: first finished the set an earlier sync left unfinished "
            f"({plural(summary.resumed, 'record')}), then compared anew",
            file=sys.stderr,
        )
    for kind, urls in summary.diff.examples.items():
        if urls:
            print(f"  {kind}: {', '.join(urls)}", file=sys.stderr)
    for check in summary.confirmed.files if summary.confirmed is not None else ():
        if check.outcome in ("failed", "unconfirmed"):
            where = f"{summary.out_dir}/{check.file}"
            print(f"{where}: {check.outcome}: {check.message}".rstrip(": "), file=sys.stderr)
    print(f"fastfeed {command}: {summary.describe()}", file=sys.stderr)
    if summary.refused:
        print(f"fastfeed {command}: refused: {summary.refused}", file=sys.stderr)
    if summary.out_dir:
        print(f"fastfeed {command}: the set sent is kept in {summary.out_dir}", file=sys.stderr)
    emit({**summary.to_dict(), "warnings": warnings.count}, as_json)
    if summary.refused:
        return ExitCode.REFUSED
    return ExitCode.OK if summary.ok else ExitCode.FAILED
