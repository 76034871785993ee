"""What commands say when they end: the exit statuses, an error in the user's words, and the
summaries of pushes and syncs (on stderr, and as JSON on stdout with --json)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING

import orjson

from fastfeed.errors import FastfeedError, InputError, MassDelete, PushError

if TYPE_CHECKING:
    from fastfeed.delivery.results import PushSummary
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


def describe(exc: Exception) -> str:
    """An error as the CLI shows it: an OSError as "file: what the system said", without
    Python's "[Errno N]" and quotes."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


def report(command: str, summary: PushSummary, as_json: bool) -> int:
    for result in summary.results:
        if result.outcome.value in ("failed", "blocked"):
            print(f"{result.feed.path}: {result.outcome.value}: {result.message}", file=sys.stderr)
    print(f"fastfeed {command}: {summary.describe()}", file=sys.stderr)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(summary.to_dict()) + b"\n")
    return ExitCode.OK if summary.ok else ExitCode.FAILED


def stopped(command: str, exc: FastfeedError, as_json: bool) -> int:
    """A push that could not go on: says why, and what was done before."""

    print(f"fastfeed {command}: error: {exc}", file=sys.stderr)
    summary = exc.summary if isinstance(exc, PushError) else None
    if summary is not None and summary.results:
        print(f"fastfeed {command}: before stopping: {summary.describe()}", file=sys.stderr)
    if as_json:
        data: dict[str, object] = summary.to_dict() if summary is not None else {}
        # Whatever was done before, the command failed: `ok` says so as the exit status does.
        data.update(ok=False, error=str(exc))
        sys.stdout.buffer.write(orjson.dumps(data) + b"\n")
    refused = not isinstance(exc, PushError) or exc.refused
    return ExitCode.REFUSED if refused else ExitCode.FAILED


def run_sync_command(command: str, as_json: bool, call: Callable[[], SyncSummary]) -> int:
    """Runs a sync and reports it: what it found (with example URLs), what it sent, where the
    set is kept; a refusal names why, with the exit status the help promises."""
    try:
        summary = call()
    except InputError as exc:
        print(f"fastfeed {command}: error: {exc}", file=sys.stderr)
        print(
            f"fastfeed {command}: nothing was sent and the state is as it was; fix the input "
            "and sync again",
            file=sys.stderr,
        )
        if as_json:
            sys.stdout.buffer.write(orjson.dumps({"ok": False, "error": str(exc)}) + b"\n")
        return ExitCode.FAILED
    except MassDelete as exc:
        print(f"fastfeed {command}: refused: {exc}", file=sys.stderr)
        if as_json:
            error = {"ok": False, "error": str(exc), "deleted": exc.deleted, "held": exc.held}
            sys.stdout.buffer.write(orjson.dumps(error) + b"\n")
        return ExitCode.REFUSED
    except FastfeedError as exc:
        return stopped(command, exc, as_json)
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
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(summary.to_dict()) + b"\n")
    if summary.refused:
        return ExitCode.REFUSED
    return ExitCode.OK if summary.ok else ExitCode.FAILED
