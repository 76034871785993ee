"""`fastfeed push`, `run`, `replay` and `backlog`: the command line over the GSA pusher."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from fastfeed.cli.commands import command, option, pushing
from fastfeed.cli.options import (
    BUILDING,
    RECORDS,
    connection_options,
    count,
    groupsource_option,
    json_option,
    paths_argument,
    push_options,
    push_settings,
    record_options,
    take_encoding,
)
from fastfeed.cli.reports import (
    ExitCode,
    Warnings,
    emit,
    failed,
    push_sets,
    report,
    run_stopped,
    skippable,
    stopped,
)
from fastfeed.delivery.settings import HTTP_PORT, HTTPS_PORT, PushSettings
from fastfeed.errors import BacklogError, InputError
from fastfeed.gsa.files import NOT_JOURNALLED
from fastfeed.gsa.writer import FeedType
from fastfeed.progress import Progress
from fastfeed.sets.build import OnError

# The uploader (httpx) is imported by the commands that push, not here: every command pays for
# what this module imports, `fastfeed build` and `validate` included.

PUSH_HELP = f"""\
Push feed sets (directories made by `fastfeed build`), some of their files, or lone feed files
to an appliance. DIR is a feed set; FILE is a file of one (listed in the manifest.jsonl beside
it), or a lone feed file: one in a directory without a manifest, written by another tool or by
hand, as Google's pushfeed_client.py pushes them.

Each file of a set is POSTed to /xmlfeed with the datasource and feed type its manifest gives, after
checking that it is still the file that was built (its digest). Only the answer `Success` counts:
an untrusted IP stops the push (status 3); "insufficient disk space" is retried later; 5xx,
timeouts, dropped connections and `Internal Error` are retried with backoff; any other answer
fails that file. Files of different datasources go side by side (--concurrency); within one
datasource they go in manifest order, one after the other, and a `full` file always alone.
Sending pauses while the appliance's backlog is above --backlog-high.

Accepted files are recorded in DIR/push-journal.jsonl: running the same push again sends only
what was not accepted, even after kill -9 (the file in flight then may be sent twice).

A lone file is pushed with the datasource and feed type of its <header>; a groups feed
(<xmlgroups>), which names neither, to /xmlgroups with --groupsource, as an incremental feed.
It is first validated whole against its DTD (as `fastfeed validate`) and refused (status 3,
nothing sent) at its first problem, since the appliance would drop it; a full feed with no
records needs --allow-empty-full, as a built one does. Then it is sent like a set's file, checked
to be the bytes validated. {NOT_JOURNALLED[0].upper()}{NOT_JOURNALLED[1:]}. A gzip-compressed
file is refused: gunzip it first; so is one of 1 GB or more, the appliance's limit.

HTTPS on port {HTTPS_PORT} by default, verifying the certificate (--cacert for a private CA);
--http for port {HTTP_PORT}.

examples:
  fastfeed push feeds/ --host gsa.example.com --cacert corp-ca.pem
  fastfeed push feeds/docs-000003.xml --host gsa.example.com --http
  fastfeed push sample_feed.xml --host gsa.example.com --cacert corp-ca.pem
  fastfeed push groups.xml --groupsource ldap --host gsa.example.com
  FASTFEED_HOST=gsa.example.com fastfeed push feeds-a/ feeds-b/ --concurrency 8 --json

exit status: 0 every file accepted, 1 some not accepted, 3 nothing could be done (untrusted IP,
TLS failure, missing manifest, an invalid lone file, bad settings).
"""

RUN_HELP = """\
Build a feed set and push it as one pipeline. Takes the options of `fastfeed build` and
`fastfeed push`.

A full feed (--feedtype full) is pushed once its build has finished: its first file replaces
the whole datasource, so a build stopped by a bad record, an unreadable input, a full disk or
Ctrl-C must not have sent any of it. Nothing is sent before; then the files go in order, as
`fastfeed push` sends them. The whole set is on disk first, as with `fastfeed build` then
`fastfeed push`.

Any other feed file is pushed as soon as it is built, and the builder waits when it is
--max-ahead files ahead of the pusher, so a slow appliance never makes unpushed feeds pile up.

The feed set is kept (--out, default ./fastfeed-feeds/DATASOURCE-TIMESTAMP/): the guide advises
keeping copies to push again after an index reset (`fastfeed replay`). An interrupted run is
finished with `fastfeed push OUT` when its build had completed (the set has a manifest), or by
running it again into a new --out otherwise.

examples:
  fastfeed run docs.jsonl --datasource docs --feedtype full --host gsa.example.com
  fastfeed run /srv/share --base-url http://files.example.com/share/ --datasource share \\
      --host gsa.example.com --out feeds/share-2024-06-01
"""

REPLAY_HELP = """\
Push saved feed sets again, in the order given, for instance after an index reset: unlike
`push`, files accepted before are not skipped. Each set's journal starts a new generation for
this appliance; if a replay is interrupted, finish it with `fastfeed push` on the same sets
(which skips what the replay already got accepted).

example:
  fastfeed replay fastfeed-feeds/docs-20240601-* fastfeed-feeds/docs-20240608-* --host gsa
"""

BACKLOG_HELP = """\
Print how many feed files the appliance has received but not yet processed
(GET /getbacklogcount). Exits 1 if the appliance does not support it (HTTP 404) or cannot be
reached.

example:
  fastfeed backlog --host gsa.example.com --cacert corp-ca.pem
"""


@command("push", help=PUSH_HELP, short_help="push feed sets to an appliance", errors=stopped)
@paths_argument("paths", "DIR|FILE", "feed set directory, a feed file of one, or a lone feed file")
@groupsource_option()
@connection_options()
@push_options()
def push_command(
    paths: tuple[str, ...], groupsource: str | None, as_json: bool, **options: Any
) -> int:
    return _push("push", paths, as_json, options, groupsource=groupsource)


@command("replay", help=REPLAY_HELP, short_help="push saved feed sets again", errors=stopped)
@paths_argument("paths", "DIR", "feed set directory")
@groupsource_option()
@connection_options()
@push_options()
def replay_command(
    paths: tuple[str, ...], groupsource: str | None, as_json: bool, **options: Any
) -> int:
    return _push("replay", paths, as_json, options, replay=True, groupsource=groupsource)


def _push(
    command: str,
    paths: tuple[str, ...],
    as_json: bool,
    options: dict[str, Any],
    *,
    replay: bool = False,
    groupsource: str | None = None,
) -> int:
    settings = push_settings(command, options)
    pushing(paths, settings.target)
    return push_sets(
        command,
        paths,
        settings,
        as_json,
        replay=replay,
        allow_empty_full=options["allow_empty_full"],
        groupsource=groupsource,
    )


@command("run", help=RUN_HELP, short_help="build and push in one pipeline", errors=stopped)
@paths_argument("inputs", "INPUT", RECORDS)
@record_options(BUILDING, gsa_only=True)
@option(
    "--out",
    metavar="DIR",
    section=BUILDING,
    help="where to keep the feed set (default: ./fastfeed-feeds/...)",
)
@option(
    "--max-ahead",
    type=count(1),
    default=4,
    metavar="K",
    section=BUILDING,
    help="built files not yet pushed before the builder waits (default 4; a full feed is "
    "pushed once built whole, without waiting)",
)
@connection_options()
@push_options()
def run_command(
    inputs: tuple[str, ...],
    datasource: str,
    feedtype: FeedType,
    on_error: OnError,
    out: str | None,
    max_ahead: int,
    as_json: bool,
    **options: Any,
) -> int:
    from fastfeed.gsa.run import build_and_push

    out = out or str(Path("fastfeed-feeds") / f"{datasource}-{time.strftime('%Y%m%d-%H%M%S')}")
    encoding = take_encoding(options)
    try:
        settings = push_settings("run", options)
        pushing([out], settings.target)
        with Warnings("run") as warn:
            _, pushed = build_and_push(
                inputs,
                out,
                datasource,
                feedtype,
                settings,
                max_ahead=max_ahead,
                progress=Progress(),
                allow_empty_full=options["allow_empty_full"],
                on_error=on_error,
                on_warning=warn,
                **encoding,
            )
    # OSError: the build's (an input not read whole, a full disk): the push turns its own
    # into results. The command's other errors are Command.invoke's.
    except (InputError, OSError) as exc:
        can_skip = skippable(exc, on_error)
        return run_stopped(exc, as_json, out=out, full=feedtype == "full", skippable=can_skip)
    print(f"fastfeed run: the feed set is kept in {out}", file=sys.stderr)
    return report("run", pushed, as_json)


@command(
    "backlog", help=BACKLOG_HELP, short_help="print the appliance's feed backlog", errors=stopped
)
@connection_options()
@json_option('print {"ok": true, "backlog": N} on stdout')
def backlog_command(as_json: bool, **options: Any) -> int:
    import asyncio  # here: every command line would pay for it (a build needs none)

    try:
        settings = push_settings("backlog", options)
        count = asyncio.run(_backlog(settings))
    except BacklogError as exc:
        return failed("backlog", str(exc), as_json)
    if count is None:
        unsupported = f"{settings.base_url} does not support /getbacklogcount (HTTP 404)"
        return failed("backlog", unsupported, as_json)
    if as_json:
        emit({"ok": True, "backlog": count}, as_json)
    else:
        print(count)
    return ExitCode.OK


async def _backlog(settings: PushSettings) -> int | None:
    from fastfeed.delivery.settings import http_client
    from fastfeed.gsa.backlog import fetch_backlog

    async with http_client(settings) as client:
        return await fetch_backlog(client, settings)
