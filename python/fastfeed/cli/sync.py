"""`fastfeed sync`: keep a datasource equal to a snapshot of the source."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
import orjson

from fastfeed.cli.build import encoding_options, take_encoding
from fastfeed.cli.commands import F, argument, command, option
from fastfeed.cli.options import connection_options, push_options, push_settings, together
from fastfeed.errors import ExitCode, FastfeedError, InputError, MassDelete
from fastfeed.progress import Progress

if TYPE_CHECKING:
    from fastfeed.sets.sync import SyncSummary

HELP = """\
Make the appliance's datasource equal to a snapshot of the source, sending only what changed.

INPUT is the WHOLE source as it is now (JSON Lines, - or a directory with --base-url). Each
record's fingerprint (a hash of every field the feed carries) is compared with --state, which
holds the fingerprint of each record the appliance accepted; new and changed records, and a
delete for each URL the state holds that the snapshot has not, go as incremental feeds, built
and pushed as `fastfeed run` does. An unchanged record is not sent; reordering records, JSON
keys or metadata names changes nothing.

The state (a SQLite file, made if missing; one per appliance and datasource) moves only when
the appliance accepted the file carrying a change. A sync killed at any point is finished by
running it again: it first sends what the interrupted one left, then compares anew.

Deleting much takes your word: a snapshot that would delete more than 10% of the documents
the state holds, or an empty one, is refused before anything is sent (status 3), naming the
counts: an incomplete export is likelier than a source that lost them. --allow-deletes lets
it through: a number of documents (500), or a share (0.5 or 50%).

After an index reset, --resend-all sends every record again (and deletes what vanished).

examples:
  fastfeed sync export.jsonl --datasource docs --state docs.state --host gsa.example.com
  fastfeed sync export.jsonl --datasource docs --state docs.state --host gsa --dry-run
  nightly-export | fastfeed sync - --datasource docs --state docs.state --host gsa --json

exit status: 0 in sync, 1 some files not accepted (sync again), 2 bad command line,
3 nothing sent (mass delete refused, untrusted IP, TLS failure, bad settings).
"""

SYNCING = "syncing"
_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class Deletes(click.ParamType[float | int]):
    """How much a sync may delete: a count (500), or a share (0.5, 50%)."""

    name = "deletes"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float | int:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        share = _SHARE.match(text)
        try:
            if share:
                fraction = float(share.group(1)) / 100
            elif "." in text:
                fraction = float(text)
            else:
                count = int(text)
                if count < 0:
                    raise ValueError
                return count
        except ValueError:
            self.fail(f"'{value}' is not a number of documents (500) or a share (0.5, 50%)")
        if not 0 <= fraction <= 1:
            self.fail(f"'{value}' is not a share from 0 to 1 (or 0% to 100%)")
        return fraction


def sync_options() -> Callable[[F], F]:
    """What every receiver's sync takes besides its receiver's settings."""
    s = SYNCING
    return together(
        option(
            "--state",
            required=True,
            metavar="FILE",
            section=s,
            help="the sync state of this appliance and collection (made if missing)",
        ),
        option(
            "--allow-deletes",
            type=Deletes(),
            metavar="N|SHARE",
            section=s,
            help="deletes allowed: documents (500) or a share (0.5, 50%) (default: 10%, none "
            "when the snapshot is empty)",
        ),
        option("--resend-all", is_flag=True, section=s, help="send every record, changed or not"),
        option(
            "--dry-run",
            is_flag=True,
            section=s,
            help="compare and say what would be sent; send nothing",
        ),
        option(
            "--out",
            metavar="DIR",
            section=s,
            help="where to keep the set sent (default: ./fastfeed-feeds/NAME-sync-...)",
        ),
    )


def run_sync_command(command: str, as_json: bool, call: Callable[[], SyncSummary]) -> int:
    """Runs a sync and reports it: what it found (with example URLs), what it sent, where the
    set is kept; a refusal names why, with the exit status the help promises."""
    from fastfeed.cli.push import stopped

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
    print(f"fastfeed {command}: {summary.describe()}", file=sys.stderr)
    if summary.out_dir:
        print(f"fastfeed {command}: the set sent is kept in {summary.out_dir}", file=sys.stderr)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(summary.to_dict()) + b"\n")
    return ExitCode.OK if summary.ok else ExitCode.FAILED


@command("sync", help=HELP, short_help="send only what changed since the last sync")
@argument(
    "inputs",
    nargs=-1,
    required=True,
    metavar="INPUT",
    help="the whole source: JSON Lines file, - (stdin) or directory",
)
@option("--datasource", required=True, section=SYNCING, help="datasource name")
@sync_options()
# No --on-error skip: a record left out of a snapshot would be deleted from the appliance.
@encoding_options("building (as `fastfeed build`)", on_error=False)
@connection_options()
@push_options(full_feeds=False)
def sync_command(
    inputs: tuple[str, ...],
    datasource: str,
    state: str,
    allow_deletes: float | int | None,
    resend_all: bool,
    dry_run: bool,
    out: str | None,
    as_json: bool,
    **options: Any,
) -> int:
    from fastfeed.gsa.sync import sync

    encoding = take_encoding(options)
    return run_sync_command(
        "sync",
        as_json,
        lambda: sync(
            inputs,
            state,
            datasource,
            push_settings("sync", options),
            allow_deletes=allow_deletes,
            resend_all=resend_all,
            dry_run=dry_run,
            out_dir=out,
            progress=Progress(),
            **encoding,
        ),
    )
