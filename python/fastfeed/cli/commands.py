"""What every fastfeed command shares, on click: help wrapped to the terminal with examples kept as
written, options in sections, settings from FASTFEED_* and fastfeed.toml, and one place where errors
become messages and exit statuses."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from fastfeed.cli import settings
from fastfeed.cli.reports import NOTHING_PUSHED, ExitCode, describe, emit, failed
from fastfeed.errors import FastfeedError
from fastfeed.progress import plural

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


def _write_help(formatter: click.HelpFormatter, text: str) -> None:
    """A help text: prose paragraphs wrapped to the terminal's width; paragraphs laid out by hand
    (examples and lists: a line indented or starting with `- `) kept as written, since
    rewrapping them would join their lines."""
    with formatter.indentation():
        for paragraph in text.strip().split("\n\n"):
            lines = paragraph.splitlines()
            formatter.write_paragraph()
            if any(line.startswith((" ", "- ")) for line in lines):
                for line in lines:
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")
            else:
                formatter.write_text(" ".join(line.strip() for line in lines))


#: How a command reports a `FastfeedError` of its work: given the command's name, the error
#: and --json, says it and returns the exit status.
Report = Callable[[str, FastfeedError, bool], int]


def _failed(command: str, exc: FastfeedError, as_json: bool) -> int:
    return failed(command, describe(exc), as_json)


#: Set in the context's `meta` by a command with `quick_exit` once it has returned.
QUICK_EXIT = "fastfeed.quick_exit"


class Command(click.Command):
    """A fastfeed command: takes --config and FASTFEED_* settings (see `settings`), and turns
    the errors of its work into a message on stderr and an exit status: a `FastfeedError` as
    `errors` reports it (default: `failed`, status 1; the commands that push give `stopped`),
    an `OSError` as `failed`.

    `quick_exit`: once the command has returned, the `fastfeed` program ends at once, without
    the interpreter's teardown (see `cli.run`); only for a command that leaves nothing to
    finish when it returns: no thread running, no file open, nothing buffered but stdout and
    stderr."""

    def __init__(
        self, *args: Any, errors: Report = _failed, quick_exit: bool = False, **kwargs: Any
    ) -> None:
        kwargs.setdefault("context_settings", CONTEXT)
        super().__init__(*args, **kwargs)
        self.params.append(settings.config_option())
        self.errors = errors
        self.quick_exit = quick_exit

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            _write_help(formatter, self.help)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The general options first, then the sections in order of appearance (click lists the
        # arguments before, under a heading of their own).
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):
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
        command = " ".join(ctx.command_path.split()[1:])
        as_json = bool(ctx.params.get("as_json"))
        try:
            if "-" in ctx.params.get("inputs", ()):
                _check_stdin(command)
            with warnings.catch_warnings():
                warnings.showwarning = functools.partial(_show_warning, warnings.showwarning)
                status = super().invoke(ctx)
            ctx.meta[QUICK_EXIT] = self.quick_exit
            return status
        except FastfeedError as exc:
            return self.errors(command, exc, as_json)
        except BrokenPipeError:
            raise  # stdout's reader went away: answered once for the whole command line (cli)
        except OSError as exc:
            return failed(command, describe(exc), as_json)
        except KeyboardInterrupt:
            print(f"fastfeed {command}: interrupted", file=sys.stderr)
            hint = _resume(ctx)
            if hint:
                print(f"fastfeed {command}: {hint}", file=sys.stderr)
            emit({"ok": False, "error": "interrupted"}, as_json)
            return ExitCode.INTERRUPTED


def _show_warning(
    others: Callable[..., None],
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Says fastfeed's own warnings that its API issues (a push journal's ignored lines) as the
    command's other warnings are said: Python's way names the file and line of fastfeed's code
    that issued it, and quotes that line, which tell the user nothing. Others go as Python
    says them (`others`)."""
    if category.__module__.partition(".")[0] != "fastfeed":
        others(message, category, filename, lineno, file, line)
        return
    # Here: the writer's module loads the core, which a push does not need.
    from fastfeed.sets.writer import print_warning

    print_warning(str(message))


def _check_stdin(command: str) -> None:
    """Standard input, given as `-`, is there to read (`fastfeed build - <&-` closed it), and
    read from a terminal says so: else the command waits for the keyboard, saying nothing."""
    if sys.stdin is None:
        raise FastfeedError(
            "standard input is closed, so - has nothing to read: pipe the records in, or give a "
            "file instead of -"
        )
    if sys.stdin.isatty():
        print(
            f"fastfeed {command}: reading JSON Lines from the terminal until Ctrl-D; pipe "
            "the records in, or give a file instead of -",
            file=sys.stderr,
        )


def drop_output(fd: int) -> None:
    """Points `fd` (stdout's, stderr's) at /dev/null, once its reader went away: what is left
    in its buffer, and what is written after, goes nowhere instead of raising again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class QuietStderr:
    """stderr, whose reader going away (`fastfeed build ... 2>&1 | head`, a closed terminal)
    stops nothing: a warning or a summary that has nowhere to go is dropped, and the work (a
    build, a push) goes on to its end and its exit status."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            drop_output(self._stream.fileno())
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            drop_output(self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Group(click.Group):
    """A command with commands of its own (`fastfeed`, `fastfeed seedlist`): lists them in the
    order they were added, which is the order of a job, and writes its help as commands do."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT)
        super().__init__(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            _write_help(formatter, self.help)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click resolves it; a mistyped command is told the one it is closest to."""
        name = args[0] if args else ""
        if name and self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            close = settings.closest(name, self.list_commands(ctx))
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {close!r}?")
        return super().resolve_command(ctx, args)


Group.group_class = Group


def pushing(paths: Iterable[str | os.PathLike[str]], target: str) -> None:
    """Tells the running command which sets it pushes, and the journals' key for the appliance:
    if it is interrupted, it says how many of their files the appliance has accepted."""
    click.get_current_context().meta[_PUSHING] = (list(paths), target)


_PUSHING = "fastfeed.pushing"


def _accepted(paths: list[str | os.PathLike[str]], target: str) -> tuple[int, int]:
    """(accepted, all): the files of these sets (or set files) that their journals say the
    target accepted; a set without a manifest (a build that did not finish) counts for none."""
    from fastfeed.sets.journal import Journal
    from fastfeed.sets.manifest import MANIFEST, read_manifest

    accepted = total = 0
    for raw in paths:
        path = Path(raw)
        directory = path if path.is_dir() else path.parent
        if not (directory / MANIFEST).is_file():
            continue
        entries = [e for e in read_manifest(directory) if path.is_dir() or e.file == path.name]
        with Journal(directory, target) as journal:
            accepted += sum(journal.is_accepted(e) for e in entries)
        total += len(entries)
    return accepted, total


def _command_line(ctx: click.Context, rename: dict[str, str] | None = None) -> tuple[str, str]:
    """The command line again, to copy: the command word renamed as `rename` says, and secrets
    (passwords) left out, since the line is printed; returns it with a note on what was left."""
    import shlex  # here: only an interrupted command prints its line again

    argv: list[str] = list(ctx.find_root().obj or [])
    word = ctx.command_path.split()[-1]
    if rename and word in rename and word in argv:
        argv[argv.index(word)] = rename[word]  # the command word, not an argument equal to it
    secrets = {
        flag: f"{settings.ENV_PREFIX}{(p.name or '').upper()}"
        for p in ctx.command.params
        if isinstance(p, click.Option) and (p.name or "").endswith("password")
        for flag in p.opts
    }
    kept: list[str] = []
    left: dict[str, str] = {}
    items = iter(argv)
    for item in items:
        flag = item.split("=", 1)[0]
        if flag in secrets:
            left[flag] = secrets[flag]
            if "=" not in item:
                next(items, None)
        else:
            kept.append(item)
    note = "".join(f" ({flag} left out: set {env})" for flag, env in left.items())
    return f"fastfeed {shlex.join(kept)}", note


def _resume(ctx: click.Context) -> str | None:
    """How to finish an interrupted command: pushes resume from their journals, syncs from
    their state."""
    words = ctx.command_path.split()[1:]
    pushed = ctx.meta.get(_PUSHING)
    tally = ""
    try:
        accepted, total = _accepted(*pushed) if pushed is not None else (0, 0)
    except (FastfeedError, OSError):  # a journal still held or unreadable: say the rest
        accepted = total = 0
    if total:
        tally = f"{accepted} of {plural(total, 'file')} accepted; "
    if words[-1] in ("push", "replay"):
        again, note = _command_line(ctx, {"replay": "push"})  # a replay resumes as a push
        return (
            f"{tally}the files accepted are recorded in each set's push-journal.jsonl; to "
            f"send the rest: {again}{note}"
        )
    if words[-1] == "sync":
        again, note = _command_line(ctx)
        return (
            "the state holds what the appliance accepted; run the same sync again: it first "
            f"sends what this one left: {again}{note}"
        )
    if words == ["run"] and pushed is not None:
        from fastfeed.sets.manifest import MANIFEST

        out = str(pushed[0][0])
        if (Path(out) / MANIFEST).is_file():
            return (
                f"{tally}the build had finished: send the rest with fastfeed push {out}, "
                "giving it this run's appliance options (--host...)"
            )
        pushed = (
            NOTHING_PUSHED
            if ctx.params.get("feedtype") == "full"
            else "the files built so far were pushed as far as its push-journal.jsonl says"
        )
        return (
            f"the build had not finished ({out} has no manifest); {pushed}; run again with a "
            "new --out"
        )
    return None
