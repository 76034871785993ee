"""`fastfeed sync`: keep a datasource equal to a snapshot of the source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from fastfeed.cli.commands import command, option
from fastfeed.cli.options import (
    BUILDING,
    SYNCING,
    connection_options,
    encoding_options,
    push_options,
    push_settings,
    sync_options,
    take_encoding,
)
from fastfeed.cli.reports import run_sync_command
from fastfeed.progress import Progress

if TYPE_CHECKING:
    pass

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


@command("sync", help=HELP, short_help="send only what changed since the last sync")
@click.argument(
    "inputs",
    nargs=-1,
    required=True,
    metavar="INPUT",
    help="the whole source: JSON Lines file, - (stdin) or directory",
)
@option("--datasource", required=True, section=SYNCING, help="datasource name")
@sync_options()
# No --on-error skip: a record left out of a snapshot would be deleted from the appliance.
@encoding_options(BUILDING, on_error=False)
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
