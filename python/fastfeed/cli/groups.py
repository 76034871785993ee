"""`fastfeed groups build` and `fastfeed groups push`: groups feeds (/xmlgroups)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from fastfeed.cli.commands import group, option, pushing
from fastfeed.cli.options import (
    connection_options,
    groupsource_option,
    json_option,
    paths_argument,
    push_options,
    push_settings,
    set_options,
)
from fastfeed.cli.reports import (
    ExitCode,
    Warnings,
    build_stopped,
    emit,
    push_sets,
    refused,
    skippable,
    stopped,
)
from fastfeed.errors import InputError, PushError
from fastfeed.progress import Progress, human_bytes, plural
from fastfeed.sets.build import OnError
from fastfeed.sets.writer import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from fastfeed.gsa.groups import GroupsFeedType

# The groups builder, the uploader (httpx) and the manifest reader are imported by the actions
# that use them, not here: every fastfeed command pays for what this module imports.

HELP = """\
Feed the appliance the members of each group, so that it resolves a user's groups at
search time without asking the directory (GSA 7.2 guide: "Feeding Groups to the Search
Appliance").

  build  write groups feed files (<xmlgroups>) and their manifest from JSON Lines or Parquet
  push   POST them to the appliance's /xmlgroups, like `fastfeed push` does feeds

examples:
  fastfeed groups build groups.jsonl --groupsource ldap --out groups/
  fastfeed groups push groups/ --host gsa.example.com --cacert corp-ca.pem
"""

BUILD_HELP = f"""\
Build a groups feed set from JSON Lines, one group per line (or from Parquet or Arrow files,
globs or dataset directories, whose columns are these fields, `members` a list of structs):

  {{"group": "eng", "namespace": "Default", "case_sensitive": false,
   "members": [{{"name": "CORP\\\\alice", "scope": "user"}},
               {{"name": "interns", "scope": "group", "namespace": "Default"}}]}}

(`namespace`, `case_sensitive` and `principal_type` are optional, on groups and members
alike; the namespace defaults to Default.) DIR (--out) receives numbered files
GROUPSOURCE-groups-000001.xml, each under --max-bytes, and manifest.jsonl, which lists them in
the order they must be pushed. A refused line is reported as file:line: reason.

--feedtype incremental (the default) adds groups and replaces the members of the groups it
names. --feedtype full REPLACES THE GROUPS OF EVERY GROUPSOURCE on the appliance, not only of
this one, and `fastfeed groups push` sends it only with --allow-full. Split, a full groups
feed has a full first file and incremental others.

examples:
  fastfeed groups build groups.jsonl --groupsource ldap --out groups/
  ldap-export | fastfeed groups build - --groupsource ldap --out groups-$(date +%s)/ --json

The default cap is {DEFAULT_MAX_BYTES // 1_000_000} MB per file.
"""

PUSH_HELP = """\
Push groups feed sets (directories made by `fastfeed groups build`) or files of them to the
appliance's /xmlgroups, with fields groupsource, feedtype and data. Everything `fastfeed push`
does applies: only `Success` counts, retries with backoff, the backlog gate, the journal
(running it again sends only what was not accepted), the manifest order within a groupsource.

A lone groups feed file (<xmlgroups>, in a directory without a manifest, written by another
tool or by hand) names no groupsource: it is pushed with --groupsource, as an incremental feed,
after it is validated whole, as `fastfeed push` does it.

A full groups feed replaces the groups of EVERY groupsource on the appliance: the groups of
connectors and of other sources are deleted. A set holding one is refused (status 3, nothing
sent) unless --allow-full is given, and then a warning is printed before sending. While it is
being sent, no other groups file goes; groups files after it wait until it is accepted.

examples:
  fastfeed groups push groups/ --host gsa.example.com --cacert corp-ca.pem
  fastfeed groups push all-groups/ --host gsa.example.com --allow-full
  fastfeed groups push groups.xml --groupsource ldap --host gsa.example.com

exit status: 0 every file accepted, 1 some not accepted, 3 nothing could be done (a full
groups feed without --allow-full, a set that is not a groups set, untrusted IP, TLS failure).
"""


@group("groups", help=HELP, short_help="build and push groups feeds (group memberships)")
def groups() -> None:
    pass


@groups.command("build", help=BUILD_HELP, short_help="build groups feed files")
@paths_argument(
    "inputs", "INPUT", "JSON Lines file, - (stdin), or Parquet or Arrow file, glob or dataset"
)
@option(
    "--groupsource",
    required=True,
    help="the source of these groups (e.g. ldap): [a-zA-Z_][a-zA-Z0-9_-]*",
)
@option("--out", required=True, metavar="DIR", help="new or empty output directory")
@option(
    "--feedtype",
    type=click.Choice(["incremental", "full"]),
    default="incremental",
    help="incremental adds groups and replaces their members (default); full replaces the "
    "groups of every groupsource on the appliance",
)
@set_options("groups")
@json_option()
def build_command(
    inputs: tuple[str, ...],
    groupsource: str,
    out: str,
    feedtype: GroupsFeedType,
    max_bytes: int,
    max_records: int,
    on_error: OnError,
    as_json: bool,
) -> int:
    from fastfeed.gsa.groups import build_groups

    try:
        with Warnings("groups build") as warn:
            summary = build_groups(
                inputs,
                out,
                groupsource,
                feedtype,
                max_bytes=max_bytes,
                max_records=max_records,
                on_error=on_error,
                on_warning=warn,
                progress=Progress(),
            )
    except (InputError, OSError) as exc:
        can_skip = skippable(exc, on_error)
        return build_stopped("groups build", exc, as_json, out=out, item="line", skippable=can_skip)
    emit(
        {
            "ok": not summary.rejected,
            "out": summary.out_dir,
            "files": len(summary.manifest),
            "groups": summary.records,
            "bytes": summary.bytes,
            "rejected": summary.rejected,
            "seconds": round(summary.seconds, 3),
        },
        as_json,
    )
    print(
        f"wrote {plural(summary.records, 'group')} into {plural(len(summary.manifest), 'file')} "
        f"({human_bytes(summary.bytes)}) in {summary.out_dir} in {summary.seconds:.1f} s",
        file=sys.stderr,
    )
    if summary.rejected:
        print(
            f"{refused(summary.rejected, 'line')} and saved to {summary.rejected_file} "
            "(reasons in rejected.log)",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    return ExitCode.OK


@groups.command("push", help=PUSH_HELP, short_help="push groups feed sets", errors=stopped)
@paths_argument(
    "paths", "DIR|FILE", "groups set directory, a file of one, or a lone groups feed file"
)
@option(
    "--allow-full",
    is_flag=True,
    help="send full groups feeds, which replace the groups of every groupsource",
)
@groupsource_option()
@connection_options()
@push_options()
def push_command(
    paths: tuple[str, ...],
    allow_full: bool,
    groupsource: str | None,
    as_json: bool,
    **options: Any,
) -> int:
    from fastfeed.gsa.files import LoneHead, planned_files
    from fastfeed.gsa.groups import FULL_GROUPS_WARNING, full_groups

    # Before any lone file is validated whole: a feed among them is refused at once.
    planned = planned_files(paths, groupsource=groupsource)
    lone_feeds = [f.path for f in planned if isinstance(f, LoneHead) and f.kind != "groups"]
    if lone_feeds:
        raise PushError(
            f"{lone_feeds[0]} is a feed (<gsafeed>), not a groups feed: push it with `fastfeed "
            f"push {lone_feeds[0]}`",
            refused=True,
        )
    files = [f for f in planned if not isinstance(f, LoneHead)]
    feeds = sorted({str(f.directory) for f in files if f.entry.kind != "groups"})
    if feeds:
        raise PushError(
            f"{', '.join(feeds)}: not a groups set; push feed sets with `fastfeed push`",
            refused=True,
        )
    full = full_groups(files)
    if full and allow_full:
        names = ", ".join(str(f.path) for f in full)
        print(f"fastfeed groups push: WARNING: {names}: {FULL_GROUPS_WARNING}", file=sys.stderr)
    settings = push_settings("groups push", options)
    pushing(paths, settings.target)
    empty = options["allow_empty_full"]
    return push_sets(
        "groups push",
        paths,
        settings,
        as_json,
        allow_full_groups=allow_full,
        allow_empty_full=empty,
        groupsource=groupsource,
    )
