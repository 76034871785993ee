"""What every fastfeed command shares, on click: help printed as written, arguments and
options in sections, settings from FASTFEED_* and fastfeed.toml, and one place where errors
become messages and exit statuses."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from fastfeed.cli import settings
from fastfeed.cli.reports import ExitCode, describe
from fastfeed.errors import FastfeedError

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Option(click.Option):
    """An option shown under a section of the help (`appliance`, `pushing`...)."""

    def __init__(self, *args: Any, section: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section
        if self.metavar is None and not self.is_flag and not isinstance(self.type, click.Choice):
            self.metavar = (self.name or "").upper()  # --host HOST, not --host TEXT


def option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """`click.option` with sections."""
    return click.option(*decls, cls=Option, **kwargs)


def command(name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Command]:
    """`click.command` making a fastfeed `Command`."""
    return click.command(name, cls=Command, **kwargs)


def group(name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Group]:
    """`click.group` making a fastfeed `Group`."""
    return click.group(name, cls=Group, **kwargs)


def _write_as_written(formatter: click.HelpFormatter, text: str) -> None:
    """The help texts are laid out by hand (examples, lists): click would rewrap them."""
    formatter.write_paragraph()
    with formatter.indentation():
        for line in text.rstrip().splitlines():
            formatter.write(f"{'':>{formatter.current_indent}}{line}\n" if line else "\n")


class Command(click.Command):
    """A fastfeed command: takes --config and FASTFEED_* settings (see `settings`), and turns
    the errors of its work into a message on stderr and an exit status."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT)
        super().__init__(*args, **kwargs)
        self.params.append(settings.config_option())

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            _write_as_written(formatter, self.help)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Arguments and the general options first, then the sections in order of appearance.
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                if isinstance(param, click.Argument):
                    title = "Arguments"
                else:
                    title = getattr(param, "section", None) or "Options"
                sections.setdefault(title, []).append(record)
        for title, records in sections.items():
            if not records:
                continue
            with formatter.section(title):
                formatter.write_dl(records)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.MissingParameter as exc:
            if not isinstance(exc.param, click.Option) or exc.param.name is None:
                raise
            raise click.UsageError(settings.required_message(exc.param), ctx) from None

    def invoke(self, ctx: click.Context) -> Any:
        command = ctx.command_path
        try:
            return super().invoke(ctx)
        except (FastfeedError, OSError) as exc:
            print(f"{command}: error: {describe(exc)}", file=sys.stderr)
            return ExitCode.FAILED
        except KeyboardInterrupt:
            print(f"{command}: interrupted", file=sys.stderr)
            hint = _resume(ctx)
            if hint:
                print(f"{command}: {hint}", file=sys.stderr)
            return ExitCode.INTERRUPTED


class Group(click.Group):
    """A command with commands of its own (`fastfeed`, `fastfeed seedlist`): lists them in the
    order they were added, which is the order of a job, and prints its help as written."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT)
        super().__init__(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            _write_as_written(formatter, self.help)


Group.group_class = Group


def _resume(ctx: click.Context) -> str | None:
    """How to finish an interrupted command: pushes resume from their journals, syncs from
    their state."""
    argv: list[str] = ctx.find_root().obj or []
    words = ctx.command_path.split()[1:]
    if words[-1] in ("push", "replay"):
        again = ["push" if a == "replay" else a for a in argv]  # a replay resumes as a push
        return (
            "the files accepted so far are recorded in each set's push-journal.jsonl; to send "
            f"the rest: fastfeed {shlex.join(again)}"
        )
    if words[-1] == "sync":
        return (
            "the state holds what the appliance accepted; run the same sync again: it first "
            f"sends what this one left: fastfeed {shlex.join(argv)}"
        )
    if words == ["run"]:
        return (
            "the files built so far were pushed as far as the journal says; if the build had "
            "finished (the set has a manifest), send the rest with fastfeed push on its --out "
            "directory, else run again into a new --out"
        )
    return None
