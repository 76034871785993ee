"""`fastfeed push`, `run`, `replay` and `backlog`: the command line over the GSA pusher."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fastfeed.cli.build import allow_empty_full_option, require_datasource
from fastfeed.delivery.settings import HTTP_PORT, HTTPS_PORT, PushSettings, Secret
from fastfeed.errors import BacklogError, ExitCode, FastfeedError, InputError, PushError
from fastfeed.gsa.build import build
from fastfeed.progress import Progress

if TYPE_CHECKING:
    from fastfeed.delivery.results import PushSummary

# The uploader (httpx) is imported by the commands that push, not here: every command pays for
# what this module imports, `fastfeed build` and `validate` included.

PUSH_HELP = f"""\
Push feed sets (directories made by `fastfeed build`) or some of their files to an appliance.

Each file is POSTed to /xmlfeed with the datasource and feed type its manifest gives, after
checking that it is still the file that was built (sha256). Only the answer `Success` counts:
an untrusted IP stops the push (status 3); "insufficient disk space" is retried later; 5xx,
timeouts, dropped connections and `Internal Error` are retried with backoff; any other answer
fails that file. Files of different datasources go side by side (--concurrency); within one
datasource they go in manifest order, one after the other, and a `full` file always alone.
Sending pauses while the appliance's backlog is above --backlog-high.

Accepted files are recorded in DIR/push-journal.jsonl: running the same push again sends only
what was not accepted, even after kill -9 (the file in flight then may be sent twice).

HTTPS on port {HTTPS_PORT} by default, verifying the certificate (--cacert for a private CA);
--http for port {HTTP_PORT}.

examples:
  fastfeed push feeds/ --host gsa.example.com --cacert corp-ca.pem
  fastfeed push feeds/docs-000003.xml --host gsa.example.com --http
  FASTFEED_HOST=gsa.example.com fastfeed push feeds-a/ feeds-b/ --concurrency 8 --json

exit status: 0 every file accepted, 1 some not accepted, 3 nothing could be done (untrusted IP,
TLS failure, missing manifest, bad settings).
"""

RUN_HELP = """\
Build a feed set and push it as one pipeline: each feed file is pushed as soon as it is built,
and the builder waits when it is --max-ahead files ahead of the pusher, so a slow appliance
never makes unpushed feeds pile up. Takes the options of `fastfeed build` and `fastfeed push`.

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


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = commands.add_parser(
        "push", help="push feed sets to an appliance", description=PUSH_HELP, formatter_class=fmt
    )
    p.add_argument(
        "paths", nargs="+", metavar="DIR|FILE", help="feed set directory, or a feed file of one"
    )
    connection_options(p)
    push_options(p)
    p.set_defaults(func=run_push)

    r = commands.add_parser(
        "run", help="build and push in one pipeline", description=RUN_HELP, formatter_class=fmt
    )
    _build_options(r, commands.choices["build"])
    r.add_argument(
        "--out", metavar="DIR", help="where to keep the feed set (default: ./fastfeed-feeds/...)"
    )
    r.add_argument(
        "--max-ahead",
        type=int,
        default=4,
        metavar="K",
        help="built files not yet pushed before the builder waits (default 4)",
    )
    connection_options(r)
    push_options(r)
    r.set_defaults(func=run_run)

    y = commands.add_parser(
        "replay", help="push saved feed sets again", description=REPLAY_HELP, formatter_class=fmt
    )
    y.add_argument("paths", nargs="+", metavar="DIR", help="feed set directory")
    connection_options(y)
    push_options(y)
    y.set_defaults(func=run_replay)

    b = commands.add_parser(
        "backlog",
        help="print the appliance's feed backlog",
        description=BACKLOG_HELP,
        formatter_class=fmt,
    )
    connection_options(b)
    b.add_argument("--json", action="store_true", help='print {"backlog": N} on stdout')
    b.set_defaults(func=run_backlog)


def connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("appliance")
    g.add_argument("--host", required=True, help="the appliance's host name or IP address")
    g.add_argument(
        "--port",
        type=int,
        help=f"feedergate port (default {HTTPS_PORT}, or {HTTP_PORT} with --http)",
    )
    g.add_argument("--http", action="store_true", help=f"plain HTTP (port {HTTP_PORT})")
    tls_options(g)


def tls_options(g: argparse._ArgumentGroup) -> None:
    """How to trust the appliance and how long to wait for it: every command that talks to
    one takes these."""
    defaults = PushSettings(host="-")
    g.add_argument("--cacert", metavar="PEM", help="CA certificate(s) to verify the appliance with")
    g.add_argument("--client-cert", metavar="PEM", help="client certificate, if the appliance asks")
    g.add_argument("--client-key", metavar="PEM", help="its private key (if not in --client-cert)")
    g.add_argument(
        "--client-key-password",
        metavar="SECRET",
        help="password of the key; prefer FASTFEED_CLIENT_KEY_PASSWORD, as flags show in `ps`",
    )
    g.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify the appliance's certificate (test appliances only)",
    )
    g.add_argument(
        "--connect-timeout",
        type=float,
        default=defaults.connect_timeout,
        metavar="S",
        help=f"(default {defaults.connect_timeout:g} s)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=defaults.timeout,
        metavar="S",
        help="seconds without progress while sending or awaiting an answer "
        f"(default {defaults.timeout:g})",
    )
    g.add_argument(
        "--deadline",
        type=float,
        default=defaults.deadline,
        metavar="S",
        help="seconds one request may take in all, however steadily the appliance answers "
        f"(default {defaults.deadline:g})",
    )


def push_options(p: argparse.ArgumentParser) -> None:
    defaults = PushSettings(host="-")
    g = p.add_argument_group("pushing")
    g.add_argument(
        "--concurrency",
        type=int,
        default=defaults.concurrency,
        metavar="N",
        help=f"files in flight at once, across datasources (default {defaults.concurrency})",
    )
    g.add_argument(
        "--overlap-incremental",
        action="store_true",
        help="let incremental files of one datasource overlap (only if no URL is in two files)",
    )
    allow_empty_full_option(g)
    retry_options(g)
    g.add_argument(
        "--disk-full-delay",
        type=float,
        default=defaults.disk_full_delay,
        metavar="S",
        help="wait after 'insufficient disk space' before sending again "
        f"(default {defaults.disk_full_delay} s)",
    )
    g.add_argument(
        "--disk-full-retries",
        type=int,
        default=defaults.disk_full_retries,
        metavar="N",
        help=f"how many such waits for one file (default {defaults.disk_full_retries})",
    )
    g.add_argument(
        "--backlog-high",
        type=int,
        default=defaults.backlog_high,
        metavar="N",
        help=f"pause while the appliance's backlog is above N files (default "
        f"{defaults.backlog_high})",
    )
    g.add_argument(
        "--backlog-low",
        type=int,
        default=defaults.backlog_low,
        metavar="N",
        help=f"resume once it is at or below N (default {defaults.backlog_low})",
    )
    g.add_argument(
        "--backlog-interval",
        type=float,
        default=defaults.backlog_interval,
        metavar="S",
        help=f"seconds between backlog polls (default {defaults.backlog_interval})",
    )
    g.add_argument("--json", action="store_true", help="print a JSON summary on stdout")


def retry_options(g: argparse._ArgumentGroup) -> None:
    """How often and how patiently a failed request is sent again."""
    defaults = PushSettings(host="-")
    g.add_argument(
        "--retries",
        type=int,
        default=defaults.retries,
        metavar="N",
        help="retries of a file after HTTP 5xx, timeouts, dropped connections, Internal Error "
        f"(default {defaults.retries})",
    )
    g.add_argument(
        "--backoff-base",
        type=float,
        default=defaults.backoff_base,
        metavar="S",
        help=f"first retry delay, doubling each time (default {defaults.backoff_base:g} s)",
    )
    g.add_argument(
        "--backoff-max",
        type=float,
        default=defaults.backoff_max,
        metavar="S",
        help=f"longest retry delay (default {defaults.backoff_max:g} s)",
    )


def _build_options(run: argparse.ArgumentParser, build_parser: argparse.ArgumentParser) -> None:
    """Gives `run` the options of `build`, shared rather than copied so they never drift."""
    g = run.add_argument_group("building (as `fastfeed build`)")
    for action in build_parser._actions:
        # `run` pushes GSA feeds: Thunderstone data goes through `fastfeed thunderstone push`.
        # --allow-empty-full comes with the push options.
        if action.dest in ("help", "out", "json", "format", "profile", "allow_empty_full"):
            continue
        if action.option_strings:
            g._add_action(action)
        else:
            run._add_action(action)


def settings_from_args(args: argparse.Namespace) -> PushSettings:
    """The push settings of a command line; options a command lacks keep their defaults."""
    values: dict[str, Any] = {
        f.name: getattr(args, f.name) for f in fields(PushSettings) if hasattr(args, f.name)
    }
    values["https"] = not args.http
    if args.client_key_password:
        values["client_key_password"] = Secret(args.client_key_password)
    if args.insecure:
        print(
            f"fastfeed {args.command}: warning: --insecure: the appliance's certificate is not "
            "verified; anyone on the network path can read and alter the feeds",
            file=sys.stderr,
        )
    return PushSettings(**values)


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


def _push_command(args: argparse.Namespace, *, replay: bool) -> int:
    from fastfeed.gsa.push import push

    try:
        settings = settings_from_args(args)
        summary = push(
            args.paths,
            settings,
            progress=Progress(),
            replay=replay,
            allow_empty_full=args.allow_empty_full,
        )
    except FastfeedError as exc:
        return stopped(args.command, exc, args.json)
    return report(args.command, summary, args.json)


def run_push(args: argparse.Namespace) -> int:
    return _push_command(args, replay=False)


def run_replay(args: argparse.Namespace) -> int:
    return _push_command(args, replay=True)


def run_run(args: argparse.Namespace) -> int:
    from fastfeed.gsa.run import build_and_push

    require_datasource(args)
    out = args.out or str(
        Path("fastfeed-feeds") / f"{args.datasource}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    options = {
        name: getattr(args, name)
        for name in inspect.signature(build).parameters
        if hasattr(args, name) and name not in ("inputs", "datasource", "feedtype")
    }
    try:
        settings = settings_from_args(args)
        _, pushed = build_and_push(
            args.inputs,
            out,
            args.datasource,
            args.feedtype,
            settings,
            max_ahead=args.max_ahead,
            progress=Progress(),
            **options,
        )
    except InputError as exc:
        print(f"fastfeed run: error: {exc}", file=sys.stderr)
        print(
            f"fastfeed run: the build stopped; the files built before were pushed. {out} has no "
            "manifest: fix the input (or use --on-error skip) and run again with a new --out.",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    except FastfeedError as exc:
        return stopped("run", exc, args.json)
    print(f"fastfeed run: the feed set is kept in {out}", file=sys.stderr)
    return report("run", pushed, args.json)


def run_backlog(args: argparse.Namespace) -> int:

    try:
        settings = settings_from_args(args)
        count = asyncio.run(_backlog(settings))
    except BacklogError as exc:
        print(f"fastfeed backlog: error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    except FastfeedError as exc:
        return stopped("backlog", exc, False)
    if count is None:
        print(
            f"fastfeed backlog: {settings.base_url} does not support /getbacklogcount (HTTP 404)",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    if args.json:
        sys.stdout.buffer.write(orjson.dumps({"backlog": count}) + b"\n")
    else:
        print(count)
    return ExitCode.OK


async def _backlog(settings: PushSettings) -> int | None:
    from fastfeed.delivery.settings import http_client
    from fastfeed.gsa.backlog import fetch_backlog

    async with http_client(settings) as client:
        return await fetch_backlog(client, settings)
