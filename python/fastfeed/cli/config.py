"""Layered settings: command-line flags win over FASTFEED_* variables, which win over TOML.

Every option of every command can be set in three places besides its flag:

* a TOML file, `--config PATH` or else `fastfeed.toml` in the working directory. Top-level keys
  apply to every command that has the option; a table named for a command (`[push]`, `[build]`,
  `[run]`...) applies to that command only and wins over the top level; a command with actions
  of its own takes a table per action (`[seedlist.serve]`), which wins over the command's
  table (`[seedlist]`). Keys are the long option names, with `-` or `_`:
  `max-bytes = "50MB"`, `concurrency = 8`, `insecure = true`.
* environment variables `FASTFEED_` + the option name in capitals with `_`: `FASTFEED_HOST`,
  `FASTFEED_MAX_BYTES=50MB`, `FASTFEED_INSECURE=1` (booleans: 1/0, true/false, yes/no, on/off).
* the option's default.

This is generic on purpose: it reads the options from the parser, so a new option of any
command is configurable without touching this module. Positional arguments (inputs) are not.
"""

from __future__ import annotations

import argparse
import os
import tomllib
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_FILE = "fastfeed.toml"
ENV_PREFIX = "FASTFEED_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: Destinations that belong to the parser's machinery, not to the user.
_INTERNAL = {"help", "command", "func", "config"}
_UNSET = object()
#: Options argparse must not insist on, since their value may come from the file or environment.
_REQUIRED: weakref.WeakSet[argparse.Action] = weakref.WeakSet()


@dataclass
class _File:
    path: str
    top: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)


def prepare(command: argparse.ArgumentParser) -> None:
    """Makes a command configurable: adds `--config`, and lets required options be satisfied by
    the environment or the file (`apply` checks them once every layer is known). A command with
    actions of its own (`seedlist load`) has each of them prepared instead."""
    actions = _commands(command)
    if actions:
        for action_parser in actions.values():
            prepare(action_parser)
        return
    if any("--config" in a.option_strings for a in command._actions):
        return
    command.add_argument(
        "--config",
        metavar="PATH",
        help=f"TOML settings file (default: ./{DEFAULT_FILE} if present); flags win over "
        f"{ENV_PREFIX}* variables, which win over the file",
    )
    for action in _options(command):
        if action.required:
            action.required = False
            _REQUIRED.add(action)


def apply(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str]) -> None:
    """Fills the options not given on the command line from the environment and the TOML file."""
    commands = _commands(parser)
    name = _chosen(parser, args)
    command = commands.get(name)
    if command is None:
        return
    given = _given(parser, command, argv)
    settings = _load(command, getattr(args, "config", None))
    known = set().union(*(_dests(c) for c in commands.values()))
    for key in settings.top:
        if key not in known:
            command.error(f"{settings.path}: unknown setting {key!r}")
    for table, keys in settings.tables.items():
        # A table names a command, or a command with actions (its keys apply to all of them).
        scope = [c for n, c in commands.items() if n == table or n.startswith(table + " ")]
        where = f"{settings.path}: [{table.replace(' ', '.')}]"
        if not scope:
            command.error(f"{where} is not a fastfeed command")
        for key in keys:
            if not any(key in _dests(c) for c in scope):
                command.error(f"{where} has no setting {key!r}")
    # The command's own table wins over the table of the command it is an action of.
    section: dict[str, Any] = {}
    words = name.split()
    for depth in range(1, len(words) + 1):
        section.update(settings.tables.get(" ".join(words[:depth]), {}))
    for action in _options(command):
        if action.dest in given:
            continue
        env = ENV_PREFIX + action.dest.upper()
        if env in os.environ:
            value = _convert(command, action, os.environ[env], env)
        elif action.dest in section:
            source = f"{settings.path}: [{name}] {action.dest}"
            value = _convert(command, action, section[action.dest], source)
        elif action.dest in settings.top:
            source = f"{settings.path}: {action.dest}"
            value = _convert(command, action, settings.top[action.dest], source)
        else:
            continue
        setattr(args, action.dest, value)
    for action in _options(command):
        if action in _REQUIRED and getattr(args, action.dest, None) is None:
            command.error(
                f"{_flag(action)} is required (or {ENV_PREFIX}{action.dest.upper()}, "
                f"or {action.dest} in {DEFAULT_FILE})"
            )


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands under `parser` that take options, by their words: `build`, `seedlist load`."""
    sub = _subcommands(parser)
    found: dict[str, argparse.ArgumentParser] = {}
    for name, command in sub.choices.items() if sub else ():
        nested = _commands(command)
        if nested:
            found.update({f"{name} {inner}": c for inner, c in nested.items()})
        else:
            found[name] = command
    return found


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The words of the command the arguments chose."""
    words = []
    sub = _subcommands(parser)
    while sub is not None:
        word = getattr(args, sub.dest, None)
        if word is None:
            break
        words.append(word)
        sub = _subcommands(sub.choices[word])
    return " ".join(words)


def _options(command: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in command._actions:
        if action.option_strings and action.dest not in _INTERNAL:
            yield action


def _dests(command: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in _options(command)}


def _flag(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def _given(
    parser: argparse.ArgumentParser, command: argparse.ArgumentParser, argv: Sequence[str]
) -> set[str]:
    """The options present on the command line, found by parsing again with every default
    replaced by a marker: this follows argparse's own rules (abbreviations, `--opt=value`)."""
    saved = [(a, a.default) for a in _options(command)]
    try:
        for action, _ in saved:
            action.default = _UNSET
        probe = parser.parse_args(argv)
    finally:
        for action, default in saved:
            action.default = default
    return {a.dest for a, _ in saved if getattr(probe, a.dest, _UNSET) is not _UNSET}


def _load(command: argparse.ArgumentParser, path: str | None) -> _File:
    """The file's settings, keys normalised to option destinations (`max-bytes`: max_bytes)."""
    if path is None:
        if not Path(DEFAULT_FILE).is_file():
            return _File("")
        path = DEFAULT_FILE
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        command.error(f"cannot read the settings file {path}: {exc.strerror or exc}")
    except tomllib.TOMLDecodeError as exc:
        command.error(f"{path} is not valid TOML: {exc}")
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


def _convert(
    command: argparse.ArgumentParser, action: argparse.Action, value: Any, source: str
) -> Any:
    """Turns a TOML value or an environment string into what the flag would have produced."""
    if action.nargs == 0:  # store_true, store_false, store_const
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            value = value.strip().lower() in _TRUE
        if not isinstance(value, bool):
            command.error(f"{source}: expected true or false for {_flag(action)}, got {value!r}")
        if isinstance(action, argparse._StoreFalseAction):
            return not value
        return action.const if value else action.default
    if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list):
            command.error(f"{source}: expected a list for {_flag(action)}, got {value!r}")
        return [_one(command, action, item, source) for item in items]
    return _one(command, action, value, source)


def _one(command: argparse.ArgumentParser, action: argparse.Action, value: Any, source: str) -> Any:
    if isinstance(value, (bool, dict, list)):
        command.error(f"{source}: expected a single value for {_flag(action)}, got {value!r}")
    convert = action.type if callable(action.type) else str
    if convert is float and isinstance(value, (int, float)):
        value = float(value)
    elif not (convert is int and isinstance(value, int)):
        try:
            value = convert(str(value))
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            command.error(f"{source}: invalid value {value!r} for {_flag(action)}: {exc}")
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        command.error(f"{source}: {value!r} is not one of {choices} ({_flag(action)})")
    return value
