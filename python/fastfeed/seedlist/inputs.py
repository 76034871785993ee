"""JSON Lines inputs read as `fastfeed build` reads them: files or `-` (standard input), blank
lines skipped, each record located by file and line for messages."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

import orjson

from fastfeed import _core
from fastfeed.errors import FastfeedError, LoadError
from fastfeed.sets.inputs import cut_short


def read_jsonl(inputs: Sequence[str]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(location, record) for every record of `inputs`; raises LoadError on a line that is not
    a JSON object, FastfeedError on a file that cannot be read."""
    for name in inputs:
        if name == "-":
            yield from _lines(sys.stdin.buffer, "<stdin>")
            continue
        try:
            stream = open(name, "rb")  # noqa: SIM115 - closed below, after the generator's use
        except OSError as exc:
            # Nothing of the load is kept: a snapshot missing an input would delete its documents.
            raise FastfeedError(
                f"cannot read {name}: {exc.strerror}; nothing was loaded (a missing input is "
                "never taken for an empty source)"
            ) from None
        with stream:
            yield from _lines(stream, name)


def _lines(stream: IO[bytes], name: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    read = 0
    for number, line in enumerate(stream, 1):
        read += len(line)
        if not line.strip():
            continue
        location = f"{name}:{number}"
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.endswith(b"\n") and _core.cut_short(line):
                raise LoadError(location, None, cut_short(read)) from None
            raise LoadError(location, None, f"invalid JSON: {exc}") from None
        _refuse_repeated_names(line, location)
        if not isinstance(record, dict):
            raise LoadError(location, None, f"expected a JSON object, got {type(record).__name__}")
        yield location, record


def _refuse_repeated_names(line: bytes, location: str) -> None:
    """orjson keeps the last of a name given twice in an object (a metadata name, a field): the
    line is read again by a parser that sees every pair, and refused as `fastfeed build`
    refuses it, rather than a value lost in silence."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in items]
        for name in names:
            if names.count(name) > 1:
                raise LoadError(
                    location,
                    None,
                    f"the name '{name}' is given twice in one object: give its values as one list",
                )
        return dict(items)

    json.loads(line, object_pairs_hook=pairs)
