"""`fastfeed build` and `fastfeed validate`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from fastfeed.cli.commands import command, option
from fastfeed.cli.options import (
    RECORDS,
    allow_empty_full,
    json_option,
    paths_argument,
    record_options,
    require_datasource,
    take_encoding,
)
from fastfeed.cli.reports import (
    ExitCode,
    Warnings,
    build_stopped,
    refused,
    skippable,
    stopped,
)
from fastfeed.errors import InputError
from fastfeed.gsa.build import build
from fastfeed.gsa.writer import FeedOptions, FeedType
from fastfeed.progress import Progress, human_bytes, plural
from fastfeed.sets.build import OnError
from fastfeed.sets.writer import DEFAULT_MAX_BYTES, HARD_MAX_BYTES, WriterOptions

if TYPE_CHECKING:
    from fastfeed.gsa.validate import Problem

BUILD_HELP = f"""\
Build GSA feed files from JSON Lines records, Parquet or Arrow tables, or directories of
documents.

Each INPUT is a JSON Lines file (one record per line, see the README for the fields), `-` for
standard input, a Parquet (.parquet) or Arrow IPC (.arrow, .feather, .ipc; file or stream
format) file whose columns are the record's fields, a dataset directory of such files (as
Spark, Dask or pyarrow write one: docs.parquet/part-*.parquet), a quoted glob of files
('exports/*.parquet'), or a directory whose files become records (with --base-url). The output
directory receives numbered feed files, each a complete, valid feed under --max-bytes, and
manifest.jsonl, which lists them in the order they must be pushed.

A full feed replaces every document of its datasource. When it must be split, only the first
file is `full`; the others are `incremental`, so that they add to it instead of replacing it.

examples:
  fastfeed build docs.jsonl --datasource docs --feedtype full --out feeds/
  cat changes.jsonl | fastfeed build - --datasource docs --out feeds-$(date +%s)/
  fastfeed build 'exports/*.parquet' --datasource docs --feedtype full --out feeds/
  fastfeed build /srv/share --base-url http://files.example.com/share/ \\
      --datasource share --feedtype full --out feeds/

The default cap, {DEFAULT_MAX_BYTES // 1_000_000} MB, keeps each push quick to retry; the hard
ceiling is {HARD_MAX_BYTES // 1_000_000} MB, under the protocol's 1 GB limit.
"""

VALIDATE_HELP = """\
Check feed files against the gsafeed DTD and the protocol's rules (datasource name, URLs with a
fully qualified host, pagerank range, no content in metadata-and-url or web feeds, no empty
meta content, decodable base64 and zlib content). Prints file:line: problem for each problem
(on stderr with --json, whose summary has stdout to itself).

Takes what `fastfeed push` takes: a feed set (a directory made by `fastfeed build`, every file
of its manifest, checked with the datasource and feed type it will be pushed with) or files of
one; any other feed file is checked by its own header.

examples:
  fastfeed validate feeds/
  fastfeed validate downloaded/*.xml --json

exit status: 0 all valid, 1 problems found, 2 bad command line, 3 nothing checked (a directory
without a manifest).
"""


# What a build leaves when it returns is on disk, its threads ended: its process need not be
# torn down (see `Command.quick_exit`).
@command("build", help=BUILD_HELP, short_help="build feed files from records", quick_exit=True)
@paths_argument("inputs", "INPUT", RECORDS)
@option("--out", required=True, metavar="DIR", help="new or empty output directory")
@record_options()
@option(
    "--format",
    "format_",
    type=click.Choice(["gsa", "thunderstone"]),
    default="gsa",
    help="gsa: Google Search Appliance feeds (default); thunderstone: ThunderstoneReplication "
    "data for a Thunderstone Search Appliance profile (give --profile)",
)
@option("--profile", help="the Thunderstone profile that receives the data")
@allow_empty_full()
@json_option()
def build_command(
    inputs: tuple[str, ...],
    out: str,
    datasource: str | None,
    feedtype: FeedType,
    on_error: OnError,
    format_: str,
    profile: str | None,
    allow_empty_full: bool,
    as_json: bool,
    **options: Any,
) -> int:
    if format_ == "thunderstone" and not profile:
        raise click.UsageError(
            "--format thunderstone needs --profile, the receiving profile's name"
        )
    encoding = take_encoding(options)
    progress = Progress()
    try:
        with Warnings("build") as warn:
            if format_ == "thunderstone":
                from fastfeed.thunderstone.build import build_thunderstone

                assert profile is not None
                # Thunderstone data is not compressed, nor has it ACLs.
                for gsa_only in FeedOptions.__optional_keys__ - WriterOptions.__optional_keys__:
                    del encoding[gsa_only]
                summary = build_thunderstone(
                    inputs,
                    out,
                    profile,
                    on_error=on_error,
                    on_warning=warn,
                    progress=progress,
                    **encoding,
                )
            else:
                summary = build(
                    inputs,
                    out,
                    require_datasource(datasource),
                    feedtype,
                    allow_empty_full=allow_empty_full,
                    on_error=on_error,
                    on_warning=warn,
                    progress=progress,
                    **encoding,
                )
    # OSError: writing the set (disk full, permissions). The command's own errors (settings, an
    # empty full feed) are Command.invoke's.
    except (InputError, OSError) as exc:
        can_skip = skippable(exc, on_error)
        return build_stopped("build", exc, as_json, out=out, item="record", skippable=can_skip)
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
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    print(
        f"wrote {plural(summary.records, 'record')} into {plural(len(summary.manifest), 'file')} "
        f"({human_bytes(summary.bytes)}) in {summary.out_dir} in {summary.seconds:.1f} s",
        file=sys.stderr,
    )
    if summary.rejected:
        print(
            f"{refused(summary.rejected, 'record')} and saved to {summary.rejected_file} "
            "(reasons in rejected.log)",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    return ExitCode.OK


@command(
    "validate", help=VALIDATE_HELP, short_help="check feed sets and feed files", errors=stopped
)
@paths_argument("paths", "DIR|FILE", "feed set directory, or a feed file")
@json_option()
def validate_command(paths: tuple[str, ...], as_json: bool) -> int:
    # lxml and the DTD, only for this command.
    from fastfeed.gsa.files import files_to_validate
    from fastfeed.gsa.validate import validate_file

    started = time.monotonic()
    files = files_to_validate(paths)
    total = sum(_size(path) for path, _ in files)
    problems: list[Problem] = []
    checked = bad = done = read = 0
    with Progress().stage("validate", total) as line:

        def on_read(n: int) -> None:
            nonlocal read
            read += n
            line.update(
                done + read, f"{checked:,}/{len(files):,} files checked, {bad:,} with problems"
            )

        for path, entry in files:
            found = validate_file(
                path,
                datasource=entry.datasource if entry else None,
                feedtype=entry.feedtype if entry else None,
                kind=entry.kind if entry else None,
                on_read=on_read if line.live else None,
            )
            for problem in found:
                # With --json, stdout holds the summary alone.
                print(problem, file=sys.stderr if as_json else sys.stdout)
            problems += found
            checked += 1
            bad += bool(found)
            # Checked, even if a problem stopped the reading before the end.
            done, read = done + _size(path), 0
            on_read(0)
    seconds = time.monotonic() - started
    if as_json:
        result = {
            "ok": not bad,  # as the exit status: 1 when any file has a problem
            "files": len(files),
            "invalid": bad,
            "bytes": total,
            "seconds": round(seconds, 3),
            "problems": [
                {"file": p.file, "line": p.line, "message": p.message, "fatal": p.fatal}
                for p in problems
            ],
        }
        sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    if bad:
        have = "has" if bad == 1 else "have"
        print(
            f"fastfeed validate: {bad:,} of {plural(len(files), 'file')} {have} problems",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    print(f"fastfeed validate: {plural(len(files), 'file')} valid", file=sys.stderr)
    return ExitCode.OK


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # validate_file reports it
