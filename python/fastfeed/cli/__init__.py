"""The `fastfeed` command: a thin click front over the Python API, a module per command group.
`commands` holds what every command shares; `settings` layers FASTFEED_* and fastfeed.toml."""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn, TextIO, cast

import click

from fastfeed.cli.commands import QUICK_EXIT, Group, QuietStderr, drop_output
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


#: Each command, in the order of a job: the module of `fastfeed.cli` that defines it and its name
#: there. A command's module is imported when the command runs (or the help lists them all), so
#: that a build does not start by importing what a sync, a push or the emulator need.
COMMANDS = {
    "build": ("build", "build_command"),
    "validate": ("build", "validate_command"),
    "push": ("push", "push_command"),
    "run": ("push", "run_command"),
    "sync": ("sync", "sync_command"),
    "state": ("state", "state"),
    "replay": ("push", "replay_command"),
    "backlog": ("push", "backlog_command"),
    "groups": ("groups", "groups"),
    "thunderstone": ("thunderstone", "thunderstone"),
    "seedlist": ("seedlist", "seedlist"),
    "emulator": ("emulator", "emulator_command"),
    "demo": ("demo", "demo_command"),
}


class Fastfeed(Group):
    """The `fastfeed` command: its commands are the ones of `COMMANDS`, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, attribute = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(f"fastfeed.cli.{module}"), attribute)
            self.add_command(command)
        return super().get_command(ctx, cmd_name)


@click.group("fastfeed", cls=Fastfeed, help=DESCRIPTION)
# The version is read from the installed package's metadata only when asked for.
@click.version_option(package_name="fastfeed", prog_name="fastfeed", message="%(prog)s %(version)s")
def fastfeed() -> None:
    pass


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a command line and returns its exit status; a usage error exits with status 2 after
    saying what is wrong, as click does."""
    return _invoke(list(sys.argv[1:] if argv is None else argv))[0]


def run() -> NoReturn:
    """The `fastfeed` program (its script, `python -m fastfeed`): runs the process's command line
    and ends the process with its exit status, at once after a command that leaves nothing to
    finish (see `Command.quick_exit`)."""
    status, quick = _invoke(sys.argv[1:])
    if quick:
        _exit_now(status)
    sys.exit(status)


def _invoke(args: list[str]) -> tuple[int, bool]:
    """The exit status of a command line, and whether its command asked for a quick exit. A
    closed stderr stops nothing (see `QuietStderr`); a closed stdout ends the command quietly
    with the status of a program killed by SIGPIPE, wherever it was written to: the result, or
    the error of a failed command with --json."""
    stderr = sys.stderr
    sys.stderr = cast(TextIO, QuietStderr(stderr))
    try:
        return _command_line(args)
    except BrokenPipeError:
        # The reader of stdout went away (`fastfeed state export ... | head`): what it
        # wanted, it has; the rest has nowhere to go, and saying so would be noise.
        drop_output(sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE, False
    finally:
        sys.stderr = stderr


def _command_line(args: list[str]) -> tuple[int, bool]:
    if not args:  # a newcomer's first try: the help, not an error
        with click.Context(fastfeed, info_name="fastfeed") as ctx:
            click.echo(fastfeed.get_help(ctx))
        return ExitCode.OK, False
    try:
        # `obj`: the command line, for the hint that resumes an interrupted push.
        with fastfeed.make_context("fastfeed", args, obj=args) as ctx:
            status: int = fastfeed.invoke(ctx)
    except click.exceptions.Exit as done:  # --help, --version
        return done.exit_code, False
    except click.ClickException as exc:
        exc.show()
        # A script reading --json gets its answer on stdout even when the line was wrong.
        emit({"ok": False, "error": exc.format_message()}, "--json" in args)
        raise SystemExit(exc.exit_code) from None
    return status, bool(ctx.meta.get(QUICK_EXIT))


def _exit_now(status: int) -> None:
    """Ends the process without the interpreter's teardown, which frees its modules and objects
    one by one for the kernel to take back their memory anyway: 6 ms of every `fastfeed build`
    (a tenth of a small one's time). What of the teardown matters is done first: the exit
    handlers run and stdout and stderr are flushed. Returns, for the usual exit, when a thread
    is still running (the usual exit waits for it) or flushing fails (the usual exit reports
    it: a closed pipe)."""
    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(status)
