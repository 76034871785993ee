"""`fastfeed thunderstone push`: the command line over `fastfeed.thunderstone`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import orjson

from fastfeed.cli.push import retry_options, tls_options
from fastfeed.delivery.settings import PushSettings
from fastfeed.errors import ExitCode, FastfeedError, PushError

if TYPE_CHECKING:
    from fastfeed.thunderstone.push import ThunderstoneSummary

# The uploader (httpx, lxml) is imported by the handler, not here: every fastfeed command pays
# for what this module imports.

HELP = """\
Push Thunderstone sets (directories made by `fastfeed build --format thunderstone --profile
NAME`) to a Thunderstone Search Appliance.

Each file is POSTed to --url, the profile's data receiving URL (the admin URL ending in
/dowalk, with /recvdata.xml appended), as the url-encoded form fields `profile` (the set's
profile) and `data` (the file, streamed), after checking that it is still the file that was
built (sha256). The appliance loads the items during the request and answers a status per
item: items it did not load are listed with their URLs. Files of a set go one at a time, in
order; once every file of a set was delivered, a UI item asks the appliance to update its
search indexes, so the new data becomes searchable at once.

`Not Allowed` (this machine is not in the appliance's Cluster Members), `No Profile` (no such
profile on the appliance), a TLS failure or a wrong URL stop the push (status 3), with what to
fix. HTTP 5xx, timeouts and dropped connections are retried with backoff (--retries). Files
whose items were all loaded are recorded in DIR/push-journal.jsonl: running the same push again
sends only the rest, even after kill -9.

The action comes first (`push` is the only one) so that every option can also be set as
FASTFEED_* variables or in a [thunderstone] table of fastfeed.toml.

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


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "thunderstone",
        help="push Thunderstone sets to a Thunderstone Search Appliance",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=["push"], help="push: send the sets to the appliance")
    p.add_argument("paths", nargs="+", metavar="DIR", help="a set made by fastfeed build")
    g = p.add_argument_group("appliance")
    g.add_argument(
        "--url",
        required=True,
        help="the profile's data receiving URL, e.g. "
        "https://search.example.com/texis/dowalk/recvdata.xml",
    )
    tls_options(g)
    retry_options(g)
    g.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run_push)


def _settings(args: argparse.Namespace) -> PushSettings:
    """The URL's host, port and scheme, with the TLS and retry options of the command line
    (through `fastfeed push`'s own reading of them, so both commands treat them alike)."""
    from fastfeed.cli.push import settings_from_args
    from fastfeed.thunderstone.push import url_settings

    target = url_settings(args.url)
    args.host, args.port, args.http = target.host, target.port, not target.https
    return settings_from_args(args)


def run_push(args: argparse.Namespace) -> int:
    from fastfeed.progress import Progress
    from fastfeed.thunderstone.push import ThunderstoneSummary, push

    try:
        summary = push(args.paths, args.url, _settings(args), progress=Progress())
    except PushError as exc:
        print(f"fastfeed thunderstone: error: {exc}", file=sys.stderr)
        if isinstance(exc.summary, ThunderstoneSummary) and exc.summary.results:
            print("fastfeed thunderstone: before stopping:", file=sys.stderr)
            report(exc.summary, as_json=False)
        if args.json:
            data: dict[str, object] = (
                exc.summary.to_dict() if exc.summary is not None else {"ok": False}
            )
            data["error"] = str(exc)
            sys.stdout.buffer.write(orjson.dumps(data) + b"\n")
        return ExitCode.REFUSED if exc.refused else ExitCode.FAILED
    except FastfeedError as exc:  # bad settings or URL, an unusable journal
        print(f"fastfeed thunderstone: error: {exc}", file=sys.stderr)
        if args.json:
            sys.stdout.buffer.write(orjson.dumps({"ok": False, "error": str(exc)}) + b"\n")
        return ExitCode.REFUSED
    return report(summary, as_json=args.json)


def report(summary: ThunderstoneSummary, *, as_json: bool) -> int:
    for result in summary.results:
        if result.outcome.value in ("failed", "blocked"):
            print(f"{result.feed.path}: {result.outcome.value}: {result.message}", file=sys.stderr)
    for failure in summary.failed_items[:SHOWN_FAILURES]:
        print(failure.describe(), file=sys.stderr)
    hidden = len(summary.failed_items) - SHOWN_FAILURES
    if hidden > 0:
        print(f"... and {hidden} more failed items (--json lists them all)", file=sys.stderr)
    print(f"fastfeed thunderstone: {summary.describe()}", file=sys.stderr)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(summary.to_dict()) + b"\n")
    return ExitCode.OK if summary.ok else ExitCode.FAILED
