"""`fastfeed sync`: keep a datasource equal to a snapshot of the source."""

from __future__ import annotations

from typing import Any

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
    take_sync,
)
from fastfeed.cli.reports import Warnings, run_sync_command, stopped
from fastfeed.delivery.settings import CONFIRM_TIMEOUT, Secret
from fastfeed.progress import Progress

HELP = """\
Make the appliance's datasource equal to a snapshot of the source, sending only what changed.

INPUT is the WHOLE source as it is now (JSON Lines, -, a directory with --base-url, or Parquet
or Arrow files or dataset directories). Each record's fingerprint (a hash of every field the
feed carries) is compared with --state, which holds the fingerprint of each record the appliance
accepted; new and changed records, and a delete for each URL the state holds that the snapshot
has not, go as incremental feeds, built and pushed as `fastfeed run` does. An unchanged record
is not sent; reordering records, JSON keys or metadata names changes nothing.

The state (a SQLite file, made if missing; one per appliance and datasource) moves only when
the appliance accepted the file carrying a change. A sync killed at any point is finished by
running it again: it first sends what the interrupted one left, then compares anew.

Deleting much takes your word: a snapshot that would delete more than 10% of the documents
the state holds, or an empty one, is refused before anything is sent (status 3), naming the
counts: an incomplete export is likelier than a source that lost them. --allow-deletes lets
it through: a number of documents (500), or a share (0.5 or 50%).

After an index reset, --resend-all sends every record again (and deletes what vanished).

The appliance's Success only means a file was received; its feeder processes it later and
reports errors only on its Feeds page. --confirm waits, after the last file, until the
appliance's backlog drained (at most --confirm-timeout), and with --admin-user (the
Administrative API: an Admin Console account, on port 8443) reads each file's outcome in the
datasource's feed log: a file the feeder failed is reported (status 1) and undone in the
state, so the next sync sends its records again. The feed log keeps the latest five feeds of a
datasource; earlier files of a long sync show as processed but unreported.

examples:
  fastfeed sync export.jsonl --datasource docs --state docs.state --host gsa.example.com
  fastfeed sync export.jsonl --datasource docs --state docs.state --host gsa --dry-run
  nightly-export | fastfeed sync - --datasource docs --state docs.state --host gsa --json
  fastfeed sync export.jsonl --datasource docs --state docs.state --host gsa --confirm \\
      --admin-user admin   # password in FASTFEED_ADMIN_PASSWORD

exit status: 0 in sync, 1 some files not accepted, or failed in the feeder (sync again),
2 bad command line, 3 nothing sent (mass delete refused, untrusted IP, TLS failure, bad settings).
"""


CONFIRMING = "confirming"


@command("sync", help=HELP, short_help="send only what changed since the last sync", errors=stopped)
@sync_options(option("--datasource", required=True, section=SYNCING, help="datasource name"))
# No --on-error skip: a record left out of a snapshot would be deleted from the appliance.
@encoding_options(BUILDING, on_error=False)
@connection_options()
@push_options(full_feeds=False)
@option(
    "--confirm",
    is_flag=True,
    section=CONFIRMING,
    help="wait until the appliance processed what it accepted; with --admin-user, report the "
    "files its feeder failed",
)
@option(
    "--confirm-timeout",
    type=float,
    default=CONFIRM_TIMEOUT,
    metavar="S",
    section=CONFIRMING,
    help=f"longest wait for the appliance's feeder (default {CONFIRM_TIMEOUT:g} s)",
)
@option(
    "--admin-url",
    metavar="URL",
    section=CONFIRMING,
    help="the Administrative API (default https://HOST:8443, or http://HOST:8000 with --http)",
)
@option("--admin-user", metavar="NAME", section=CONFIRMING, help="an Admin Console account")
@option(
    "--admin-password",
    metavar="SECRET",
    section=CONFIRMING,
    help="its password; prefer FASTFEED_ADMIN_PASSWORD, as flags show in `ps`",
)
def sync_command(
    datasource: str,
    as_json: bool,
    confirm: bool,
    confirm_timeout: float,
    admin_url: str | None,
    admin_user: str | None,
    admin_password: str | None,
    **options: Any,
) -> int:
    from fastfeed.gsa.adminapi import AdminApi
    from fastfeed.gsa.confirm import Confirm
    from fastfeed.gsa.sync import sync

    syncing, encoding = take_sync(options), take_encoding(options)
    settings = push_settings("sync", options)
    confirming = None
    if confirm:
        admin = None
        if admin_user:
            url = admin_url or AdminApi.default_url(settings)
            admin = AdminApi(url, admin_user, Secret(admin_password or ""))
        confirming = Confirm(confirm_timeout, admin)
    with Warnings("sync") as warn:
        return run_sync_command(
            "sync",
            as_json,
            lambda: sync(
                datasource=datasource,
                settings=settings,
                confirm=confirming,
                progress=Progress(),
                on_warning=warn,
                **syncing,
                **encoding,
            ),
            warn,
        )
