"""`fastfeed build` and `fastfeed validate`."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any

import orjson

from fastfeed.errors import ExitCode, FastfeedError, InputError, describe
from fastfeed.gsa.build import build
from fastfeed.progress import Progress, human_bytes, plural
from fastfeed.sets.writer import DEFAULT_LEVEL, DEFAULT_MAX_BYTES, HARD_MAX_BYTES
from fastfeed.thunderstone.build import build_thunderstone

BUILD_HELP = f"""\
Build GSA feed files from JSON Lines records or directories of documents.

Each INPUT is a JSON Lines file (one record per line, see the README for the fields), `-` for
standard input, or a directory whose files become records (with --base-url). The output
directory receives numbered feed files, each a complete, valid feed under --max-bytes, and
manifest.jsonl, which lists them in the order they must be pushed.

A full feed replaces every document of its datasource. When it must be split, only the first
file is `full`; the others are `incremental`, so that they add to it instead of replacing it.

examples:
  fastfeed build docs.jsonl --datasource docs --feedtype full --out feeds/
  cat changes.jsonl | fastfeed build - --datasource docs --out feeds-$(date +%s)/
  fastfeed build /srv/share --base-url http://files.example.com/share/ \\
      --datasource share --feedtype full --out feeds/

The default cap, {DEFAULT_MAX_BYTES // 1_000_000} MB, keeps each push quick to retry; the hard
ceiling is {HARD_MAX_BYTES // 1_000_000} MB, under the protocol's 1 GB limit.
"""

VALIDATE_HELP = """\
Check feed files against the gsafeed DTD and the protocol's rules (datasource name, URLs with a
fully qualified host, pagerank range, no content in metadata-and-url or web feeds, no empty
meta content, decodable base64 and zlib content). Prints file:line: problem for each problem
and exits with status 1 if there is any.

example:
  fastfeed validate feeds/*.xml
"""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type for whole numbers from `low` (to `high`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
            raise argparse.ArgumentTypeError(f"{value} is not a number {bounds}")
        return value

    return parse


def parse_size(text: str) -> int:
    """Sizes like 50MB, 64MiB or 1000000 (MB = 10**6 bytes, MiB = 2**20)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size like 50MB, 64MiB or 1000000")
    unit = (m.group(2) or "").lower().removesuffix("b")
    return int(float(m.group(1)) * _UNITS[unit])


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = commands.add_parser(
        "build", help="build feed files from records", description=BUILD_HELP, formatter_class=fmt
    )
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="JSON Lines file, - (stdin) or directory"
    )
    p.add_argument(
        "--datasource",
        help="datasource name, [a-zA-Z_][a-zA-Z0-9_-]* (required for GSA feeds)",
    )
    p.add_argument(
        "--feedtype",
        choices=("full", "incremental", "metadata-and-url"),
        default="incremental",
        help="full replaces the datasource; incremental adds and deletes (default); "
        "metadata-and-url feeds URLs and metadata for the crawler",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="new or empty output directory")
    set_options(p, "records")
    p.add_argument(
        "--compress",
        choices=("auto", "always", "never"),
        default="auto",
        help="auto: zlib content that shrinks: binary, and text of 2 KB or more (default); "
        "always: zlib every content; never: text as text and binary as plain base64 (appliances "
        "before 6.2)",
    )
    p.add_argument(
        "--level",
        type=count(1, 12),
        default=DEFAULT_LEVEL,
        help=f"zlib level, 1 to 12 (default {DEFAULT_LEVEL})",
    )
    p.add_argument(
        "--workers", type=count(0), default=0, help="encoding threads (default: one per core)"
    )
    p.add_argument(
        "--acl-format",
        choices=("per-url", "legacy"),
        default="per-url",
        help="per-url: <acl> elements (software 7.0 and later, default); legacy: google:acl* "
        "meta names, for older appliances (no namespaces, no standalone ACLs)",
    )
    p.add_argument("--base-url", metavar="URL", help="URL of a directory INPUT's root")
    p.add_argument(
        "--format",
        choices=("gsa", "thunderstone"),
        default="gsa",
        help="gsa: Google Search Appliance feeds (default); thunderstone: ThunderstoneReplication "
        "data for a Thunderstone Search Appliance profile (give --profile)",
    )
    p.add_argument("--profile", help="the Thunderstone profile that receives the data")
    allow_empty_full_option(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run_build)

    v = commands.add_parser(
        "validate", help="check feed files", description=VALIDATE_HELP, formatter_class=fmt
    )
    v.add_argument("files", nargs="+", metavar="FILE")
    v.set_defaults(func=run_validate)


def set_options(p: argparse.ArgumentParser, items: str) -> None:
    """How a set is split and what a refused line does: every command that writes a set."""
    p.add_argument(
        "--max-bytes",
        type=parse_size,
        default=DEFAULT_MAX_BYTES,
        metavar="SIZE",
        help=f"cap on each file (default {DEFAULT_MAX_BYTES // 1_000_000}MB, at most "
        f"{HARD_MAX_BYTES // 1_000_000}MB)",
    )
    p.add_argument(
        "--max-records", type=count(0), default=0, metavar="N", help=f"cap on {items} per file"
    )
    p.add_argument(
        "--on-error",
        choices=("stop", "skip"),
        default="stop",
        help="stop at the first refused line (default, no manifest written), or skip it into "
        "DIR/rejected.jsonl and go on",
    )


def allow_empty_full_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Every command that writes or sends a full feed: one with no records is refused."""
    p.add_argument(
        "--allow-empty-full",
        action="store_true",
        help="let a full feed with no records through; on the appliance it removes every document "
        "of its datasource (a groups feed: every group). Refused by default: an empty input is "
        "more often a broken export than an empty source",
    )


def run_build(args: argparse.Namespace) -> int:
    if args.format == "thunderstone" and not args.profile:
        raise FastfeedError("--format thunderstone needs --profile, the receiving profile's name")
    if args.format == "gsa":
        require_datasource(args)
    common: dict[str, Any] = {
        "base_url": args.base_url,
        "max_bytes": args.max_bytes,
        "max_records": args.max_records,
        "workers": args.workers,
        "on_error": args.on_error,
        "progress": Progress(),
    }
    try:
        if args.format == "thunderstone":
            summary = build_thunderstone(args.inputs, args.out, args.profile, **common)
        else:
            summary = build(
                args.inputs,
                args.out,
                args.datasource,
                args.feedtype,
                compress=args.compress,
                level=args.level,
                acl_format=args.acl_format,
                allow_empty_full=args.allow_empty_full,
                **common,
            )
    except (FastfeedError, OSError) as exc:  # OSError: writing the set (disk full, permissions)
        if args.json:
            error = {"ok": False, "out": args.out, "error": describe(exc)}
            sys.stdout.buffer.write(orjson.dumps(error) + b"\n")
        if not isinstance(exc, (InputError, OSError)):
            raise
        remedy = "the record (or use --on-error skip)" if isinstance(exc, InputError) else "it"
        print(f"fastfeed build: error: {describe(exc)}", file=sys.stderr)
        print(
            f"fastfeed build: stopped; {args.out} has no manifest and cannot be pushed. Fix "
            f"{remedy} and build again into an empty directory.",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    result: dict[str, Any] = {
        "ok": not summary.rejected,  # as the exit status: 1 when records were refused
        "out": summary.out_dir,
        "files": len(summary.manifest),
        "records": summary.records,
        "bytes": summary.bytes,
        "rejected": summary.rejected,
        "warnings": summary.warnings,
        "seconds": round(summary.seconds, 3),
    }
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    print(
        f"wrote {plural(summary.records, 'record')} into {plural(len(summary.manifest), 'file')} "
        f"({human_bytes(summary.bytes)}) in {summary.out_dir} in {summary.seconds:.1f} s",
        file=sys.stderr,
    )
    if summary.rejected:
        print(
            f"{summary.rejected} records were refused and saved to {summary.rejected_file} "
            "(reasons in rejected.log)",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    return ExitCode.OK


def require_datasource(args: argparse.Namespace) -> None:
    """GSA feeds need --datasource; it is optional to argparse only because Thunderstone data
    takes --profile instead."""
    if not args.datasource:
        raise FastfeedError(
            "--datasource is required (or FASTFEED_DATASOURCE, or datasource in fastfeed.toml)"
        )


def run_validate(args: argparse.Namespace) -> int:
    from fastfeed.gsa.validate import validate_file  # lxml and the DTD, only for this command

    bad = 0
    for file in args.files:
        problems = validate_file(file)
        for problem in problems:
            print(problem)
        bad += bool(problems)
    if bad:
        print(f"{bad} of {plural(len(args.files), 'file')} have problems", file=sys.stderr)
        return ExitCode.FAILED
    print(f"{plural(len(args.files), 'file')} valid", file=sys.stderr)
    return ExitCode.OK
