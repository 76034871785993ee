"""`fastfeed thunderstone push`: the command line over `fastfeed.thunderstone`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastfeed.cli.commands import F, group, option, pushing
from fastfeed.cli.options import (
    BUILDING,
    SYNCING,
    json_option,
    paths_argument,
    push_settings,
    retry_options,
    set_options,
    sync_options,
    take_sync,
    tls_options,
    together,
)
from fastfeed.cli.reports import Warnings, report, run_sync_command, stopped
from fastfeed.errors import PushError

if TYPE_CHECKING:
    from fastfeed.sets.sync import SyncSummary
    from fastfeed.thunderstone.push import ThunderstoneSummary

# The uploader (httpx, lxml) is imported by the handler, not here: every fastfeed command pays
# for what this module imports.

HELP = """\
Send data to a Thunderstone Search Appliance profile (its data receiving URL).

  push  send Thunderstone sets made by `fastfeed build --format thunderstone`
  sync  keep a profile equal to a snapshot of the source, sending only what changed

example:
  fastfeed thunderstone push ts-feeds/ \\
      --url https://search.example.com/texis/dowalk/recvdata.xml --cacert corp-ca.pem
"""

PUSH_HELP = """\
Push Thunderstone sets (directories made by `fastfeed build --format thunderstone --profile
NAME`) to a Thunderstone Search Appliance.

Each file is POSTed to --url, the profile's data receiving URL (the admin URL ending in
/dowalk, with /recvdata.xml appended), as the url-encoded form fields `profile` (the set's
profile) and `data` (the file, streamed), after checking that it is still the file that was
built (its digest). The appliance loads the items during the request and answers a status per
item: items it did not load are listed with their URLs. Files of a set go one at a time, in
order; once every file of a set was delivered, a UI item asks the appliance to update its
search indexes, so the new data becomes searchable at once.

`Not Allowed` (this machine is not in the appliance's Cluster Members), `No Profile` (no such
profile on the appliance), a TLS failure or a wrong URL stop the push (status 3), with what to
fix. HTTP 5xx, timeouts and dropped connections are retried with backoff (--retries). Files
whose items were all loaded are recorded in DIR/push-journal.jsonl: running the same push again
sends only the rest, even after kill -9.

Every option can also be set as a FASTFEED_* variable or in a [thunderstone] (or
[thunderstone.push]) table of fastfeed.toml.

examples:
  fastfeed thunderstone push ts-feeds/ \\
      --url https://search.example.com/texis/dowalk/recvdata.xml --cacert corp-ca.pem
  FASTFEED_URL=https://search.example.com/texis/dowalk/recvdata.xml \\
      fastfeed thunderstone push ts-docs/ ts-news/ --json

exit status: 0 every file loaded, 1 some files or items not loaded, 3 nothing could be done
(Not Allowed, No Profile, TLS failure, wrong URL, missing manifest, bad settings).
"""

#: Item failures printed one per line; --json lists them all.
SHOWN_FAILURES = 100


def appliance_options() -> Callable[[F], F]:
    """Where the profile receives data, how to trust it, how patiently to send."""
    return together(
        option(
            "--url",
            required=True,
            section="appliance",
            help="the profile's data receiving URL, e.g. "
            "https://search.example.com/texis/dowalk/recvdata.xml",
        ),
        tls_options(),
        retry_options("appliance"),
        json_option(),
    )


@group(
    "thunderstone",
    help=HELP,
    short_help="push Thunderstone sets to a Thunderstone Search Appliance",
)
def thunderstone() -> None:
    pass


@thunderstone.command(
    "push", help=PUSH_HELP, short_help="send the sets to the appliance", errors=stopped
)
@paths_argument("paths", "DIR", "a set made by fastfeed build")
@appliance_options()
def push_command(paths: tuple[str, ...], url: str, as_json: bool, **options: Any) -> int:
    from fastfeed.progress import Progress
    from fastfeed.thunderstone.push import ThunderstoneSummary, push, url_settings

    # The URL gives host, port and scheme; TLS and retries are read as `fastfeed push` reads
    # them, so both commands treat them alike.
    target = url_settings(url)
    options.update(host=target.host, port=target.port, http=not target.https)
    pushing(paths, url)
    try:
        summary = push(paths, url, push_settings("thunderstone push", options), progress=Progress())
    except PushError as exc:  # Not Allowed, TLS, a wrong URL: reported by the command
        if isinstance(exc.summary, ThunderstoneSummary):
            show_failures(exc.summary)
        raise
    show_failures(summary)
    return report("thunderstone push", summary, as_json)


def show_failures(summary: ThunderstoneSummary) -> None:
    """The items the appliance did not load, the first `SHOWN_FAILURES` of them."""
    for failure in summary.failed_items[:SHOWN_FAILURES]:
        print(failure.describe(), file=sys.stderr)
    hidden = len(summary.failed_items) - SHOWN_FAILURES
    if hidden > 0:
        print(f"... and {hidden} more failed items (--json lists them all)", file=sys.stderr)


SYNC_HELP = """\
Make a Thunderstone profile equal to a snapshot of the source, sending only what changed: what
`fastfeed sync` does for a GSA datasource (see its help), with deletes as D items. INPUT is the
WHOLE source as it is now; --state is kept per URL and profile.

Deleting much takes your word: a snapshot that would delete more than 10% of the documents the
state holds, or an empty one, is refused before anything is sent (status 3), naming the counts.
--allow-deletes lets it through: a number of documents (500), or a share (0.5 or 50%).

example:
  fastfeed thunderstone sync export.jsonl --profile docs --state docs.state \\
      --url https://search.example.com/texis/dowalk/recvdata.xml
"""


@thunderstone.command(
    "sync", help=SYNC_HELP, short_help="send only what changed since the last sync", errors=stopped
)
@sync_options(
    option("--profile", required=True, section=SYNCING, help="the profile that receives the data")
)
@set_options("records", BUILDING, on_error=False)
@option("--base-url", metavar="URL", section=BUILDING,
        help="URL of a directory INPUT's root")  # fmt: skip
@appliance_options()
def sync_command(
    profile: str,
    max_bytes: int,
    max_records: int,
    base_url: str | None,
    url: str,
    as_json: bool,
    **options: Any,
) -> int:
    from fastfeed.progress import Progress
    from fastfeed.thunderstone.push import url_settings
    from fastfeed.thunderstone.sync import sync

    syncing = take_sync(options)

    def call() -> SyncSummary:
        target = url_settings(url)
        options.update(host=target.host, port=target.port, http=not target.https)
        return sync(
            url=url,
            profile=profile,
            settings=push_settings("thunderstone sync", options),
            **syncing,
            base_url=base_url,
            max_bytes=max_bytes,
            max_records=max_records,
            progress=Progress(),
            on_warning=warn,
        )

    with Warnings("thunderstone sync") as warn:
        return run_sync_command("thunderstone sync", as_json, call, warn)
