"""The `fastfeed` command: a thin argparse front over the Python API, a module per command
group."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from fastfeed import __version__
from fastfeed.cli import build, config, emulator, groups, push, seedlist, thunderstone
from fastfeed.errors import ExitCode, FastfeedError, describe

DESCRIPTION = """\
Build search appliance feeds from a corpus and push them, fast and without losing a record.

A typical job:
  fastfeed build docs.jsonl --datasource docs --feedtype full --out feeds/
  fastfeed validate feeds/*.xml
  fastfeed push feeds/ --host gsa.example.com

New here? `fastfeed demo` runs the whole job on a local emulated appliance.
Run `fastfeed COMMAND --help` for the options of each command.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastfeed",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fastfeed {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    build.register(commands)
    emulator.register(commands)
    seedlist.register(commands)
    thunderstone.register(commands)
    groups.register(commands)
    push.register(commands)  # after build: `run` takes build's options
    # Settings files and FASTFEED_* variables apply to every command.
    for command in commands.choices.values():
        config.prepare(command)
    return parser


def _resume(command: str, argv: list[str]) -> str | None:
    """How to finish an interrupted command: pushes resume from their journals."""
    if command in ("push", "replay", "groups", "thunderstone"):
        again = ["push" if a == "replay" else a for a in argv]  # a replay resumes as a push
        return (
            "the files accepted so far are recorded in each set's push-journal.jsonl; to send "
            f"the rest: fastfeed {shlex.join(again)}"
        )
    if command == "run":
        return (
            "the files built so far were pushed as far as the journal says; if the build had "
            "finished (the set has a manifest), send the rest with fastfeed push on its --out "
            "directory, else run again into a new --out"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:  # a newcomer's first try: the help, not an error
        parser.print_help()
        return ExitCode.OK
    args = parser.parse_args(argv)
    config.apply(parser, args, argv)
    try:
        status: int = args.func(args)
    except (FastfeedError, OSError) as exc:
        print(f"fastfeed {args.command}: error: {describe(exc)}", file=sys.stderr)
        return ExitCode.FAILED
    except KeyboardInterrupt:
        print(f"fastfeed {args.command}: interrupted", file=sys.stderr)
        resume = _resume(args.command, argv)
        if resume:
            print(f"fastfeed {args.command}: {resume}", file=sys.stderr)
        return 130
    return status
