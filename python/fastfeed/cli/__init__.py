"""The `fastfeed` command: a thin click front over the Python API, a module per command group.
`commands` holds what every command shares; `settings` layers FASTFEED_* and fastfeed.toml."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from fastfeed import __version__
from fastfeed.cli import (
    build,
    demo,
    emulator,
    groups,
    push,
    seedlist,
    state,
    sync,
    thunderstone,
)
from fastfeed.cli.commands import group
from fastfeed.cli.reports import ExitCode, emit

DESCRIPTION = """\
Build search appliance feeds from a corpus and push them, fast and without losing a record.

A typical job:
  fastfeed build docs.jsonl --datasource docs --feedtype full --out feeds/
  fastfeed validate feeds/*.xml
  fastfeed push feeds/ --host gsa.example.com

New here? `fastfeed demo` runs the whole job on a local emulated appliance.
Run `fastfeed COMMAND --help` for the options of each command.
"""


@group("fastfeed", help=DESCRIPTION)
@click.version_option(__version__, prog_name="fastfeed", message="%(prog)s %(version)s")
def fastfeed() -> None:
    pass


for _command in (
    build.build_command,
    build.validate_command,
    push.push_command,
    push.run_command,
    sync.sync_command,
    state.state,
    push.replay_command,
    push.backlog_command,
    groups.groups,
    thunderstone.thunderstone,
    seedlist.seedlist,
    emulator.emulator_command,
    demo.demo_command,
):
    fastfeed.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a command line and returns its exit status; a usage error exits with status 2 after
    saying what is wrong, as click does."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:  # a newcomer's first try: the help, not an error
        with click.Context(fastfeed, info_name="fastfeed") as ctx:
            click.echo(fastfeed.get_help(ctx))
        return ExitCode.OK
    try:
        # `obj`: the command line, for the hint that resumes an interrupted push.
        with fastfeed.make_context("fastfeed", args, obj=args) as ctx:
            status: int = fastfeed.invoke(ctx)
    except click.exceptions.Exit as done:  # --help, --version
        return done.exit_code
    except click.ClickException as exc:
        exc.show()
        # A script reading --json gets its answer on stdout even when the line was wrong.
        emit({"ok": False, "error": exc.format_message()}, "--json" in args)
        raise SystemExit(exc.exit_code) from None
    return status
