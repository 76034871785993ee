"""Layered settings: command-line flags win over FASTFEED_* variables, which win over TOML.

Every option of every command can be set in three places besides its flag:

* a TOML file, `--config PATH` or else `fastfeed.toml` in the working directory. Top-level keys
  apply to every command that has the option; a table named for a command (`[push]`, `[build]`,
  `[run]`...) applies to that command only and wins over the top level; a command with actions
  of its own takes a table per action (`[seedlist.serve]`), which wins over the command's
  table (`[seedlist]`). Keys are the long option names, with `-` or `_`:
  `max-bytes = "50MB"`, `concurrency = 8`, `insecure = true`.
* environment variables `FASTFEED_` + the option name in capitals with `_`: `FASTFEED_HOST`,
  `FASTFEED_MAX_BYTES=50MB`, `FASTFEED_INSECURE=1` (booleans: 1/0, true/false, yes/no, on/off;
  lists: comma-separated).
* the option's default.

The layering is click's own: the variables and the file fill the command's `default_map`, which
click consults for every option not given on the command line. This module only reads them,
checks them against the commands' options (so a misspelt key is an error naming where it is),
and converts each value with the option's own type, naming its source when it is wrong. It is
generic: a new option of any command is configurable without touching it. Positional arguments
(inputs) are not configurable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

DEFAULT_FILE = "fastfeed.toml"
ENV_PREFIX = "FASTFEED_"
#: Options that belong to the command line's machinery, not to the user's settings.
_INTERNAL = {"help", "config", "version"}


@dataclass
class _File:
    path: str
    top: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)


def config_option() -> click.Option:
    """`--config PATH`, which every command takes. Eager: it is read before the other options,
    so that their values can come from it."""
    return click.Option(
        ["--config"],
        metavar="PATH",
        is_eager=True,
        expose_value=False,
        callback=_apply,
        help=f"TOML settings file (default: ./{DEFAULT_FILE} if present); flags win over "
        f"{ENV_PREFIX}* variables, which win over the file",
    )


def required_message(option: click.Option) -> str:
    name = option.name or ""
    return (
        f"{_flag(option)} is required (or {ENV_PREFIX}{name.upper()}, or {name} in {DEFAULT_FILE})"
    )


def _apply(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    """Fills the command's default_map from the environment and the TOML file."""
    if ctx.resilient_parsing:  # shell completion: no errors, no files
        return
    name = " ".join(_words(ctx))
    settings = _load(path)
    if settings.top or settings.tables:
        _check(ctx, settings)
    # The command's own table wins over the table of the command it is an action of.
    section: dict[str, Any] = {}
    words = name.split()
    for depth in range(1, len(words) + 1):
        section.update(settings.tables.get(" ".join(words[:depth]), {}))
    defaults: dict[str, Any] = {}
    for option in _options(ctx.command):
        assert option.name is not None
        env = ENV_PREFIX + option.name.upper()
        if env in os.environ:
            value, source = os.environ[env], env
        elif option.name in section:
            value, source = section[option.name], f"{settings.path}: [{name}] {_key(option.name)}"
        elif option.name in settings.top:
            value, source = settings.top[option.name], f"{settings.path}: {_key(option.name)}"
        else:
            continue
        defaults[option.name] = _convert(ctx, option, value, source)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def _check(ctx: click.Context, settings: _File) -> None:
    """Refuses a key or a table that no command takes. The file serves every command, so this
    imports every command's module: only when there is a file, so that a build without one
    does not."""
    commands = dict(_commands(ctx, ctx.find_root().command))
    known = set().union(*(_names(c) for c in commands.values()))
    for key in settings.top:
        if key not in known:
            hint = _did_you_mean(key, known)
            raise click.UsageError(f"{settings.path}: unknown setting {_key(key)!r}{hint}", ctx)
    for table, keys in settings.tables.items():
        # A table names a command, or a command with actions (its keys apply to all of them).
        scope = [c for n, c in commands.items() if n == table or n.startswith(table + " ")]
        where = f"{settings.path}: [{table.replace(' ', '.')}]"
        if not scope:
            raise click.UsageError(f"{where} is not a fastfeed command", ctx)
        for key in keys:
            names = set().union(*(_names(c) for c in scope))
            if key not in names:
                hint = _did_you_mean(key, names)
                raise click.UsageError(f"{where} has no setting {_key(key)!r}{hint}", ctx)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one of `choices` a mistyped `word` is closest to, if one is close."""
    import difflib  # here: only a mistyped word needs it

    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return close[0] if close else None


def _did_you_mean(key: str, names: Iterable[str]) -> str:
    close = closest(key, names)
    return f" (did you mean {_key(close)!r}?)" if close else ""


def _key(name: str) -> str:
    """An option's name as a key of the file, as the README writes it: `max-bytes`."""
    return name.replace("_", "-")


def _words(ctx: click.Context) -> list[str]:
    """The words of the command below `fastfeed`: ["seedlist", "load"]."""
    words = []
    while ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return words[::-1]


def _commands(
    ctx: click.Context, group: click.Command, prefix: str = ""
) -> Iterator[tuple[str, click.Command]]:
    """The commands under `group` that take options, by their words: `build`, `seedlist load`."""
    if not isinstance(group, click.Group):
        return
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(ctx, command, f"{prefix}{name} ")
        elif command is not None:
            yield f"{prefix}{name}", command


def _options(command: click.Command) -> Iterator[click.Option]:
    for param in command.params:
        if isinstance(param, click.Option) and param.name and param.name not in _INTERNAL:
            yield param


def _names(command: click.Command) -> set[str]:
    return {o.name for o in _options(command) if o.name}


def _flag(option: click.Option) -> str:
    return max(option.opts, key=len)


def _load(path: str | None) -> _File:
    """The file's settings, keys normalised to option names (`max-bytes`: max_bytes)."""
    if path is None:
        if not Path(DEFAULT_FILE).is_file():
            return _File("")
        path = DEFAULT_FILE
    import tomllib  # here, so that a command without a settings file does not import it

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise click.UsageError(
            f"cannot read the settings file {path}: {exc.strerror or exc}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise click.UsageError(f"{path} is not valid TOML: {exc}") from None
    loaded = _File(path)
    for key, value in data.items():
        if not isinstance(value, dict):
            loaded.top[key.replace("-", "_")] = value
            continue
        table = loaded.tables.setdefault(key, {})
        for k, v in value.items():
            if isinstance(v, dict):  # [seedlist.serve]: a table of one action of a command
                loaded.tables[f"{key} {k}"] = {k2.replace("-", "_"): v2 for k2, v2 in v.items()}
            else:
                table[k.replace("-", "_")] = v
    return loaded


def _convert(ctx: click.Context, option: click.Option, value: Any, source: str) -> Any:
    """The value as the flag would have given it, by the option's own type; a wrong one is a
    usage error naming where it came from."""
    if option.is_flag and not isinstance(value, bool):
        text = str(value).strip().lower() if isinstance(value, str) else None
        if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise click.UsageError(
                f"{source}: expected true or false for {_flag(option)}, got {value!r}", ctx
            )
        value = text in ("1", "true", "yes", "on")
    if option.multiple:
        value = value.split(",") if isinstance(value, str) else value
        if not isinstance(value, list):
            raise click.UsageError(
                f"{source}: expected a list for {_flag(option)}, got {value!r}", ctx
            )
    elif isinstance(value, (dict, list)):
        raise click.UsageError(
            f"{source}: expected a single value for {_flag(option)}, got {value!r}", ctx
        )
    try:
        return option.type_cast_value(ctx, value)
    except click.BadParameter as exc:
        raise click.UsageError(
            f"{source}: invalid value {value!r} for {_flag(option)}: {exc.message}", ctx
        ) from None
