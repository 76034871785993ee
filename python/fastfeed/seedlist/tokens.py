"""The opaque `Timestamp` and `State` values a crawler carries from one request to the next.

Both are base64url JSON. A Timestamp is a store's identity and a change number: "everything up
to this change has been seen". A State is where a crawl stands: the changes it reports (after
`since`, up to `upto`, fixed when the crawl began, so pages do not shift while documents are
loaded), the last change already served and how many entries were served (the next `Start`).
The store identity makes a value from another store (one recreated since) stale, not wrong.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson

from fastfeed.errors import FastfeedError


class TokenError(FastfeedError):
    """A Timestamp or State that is not one this server made."""


@dataclass(frozen=True)
class Timestamp:
    store: str
    change: int


@dataclass(frozen=True)
class State:
    store: str
    since: int
    upto: int
    after: int
    start: int


def _encode(values: list[object]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(values)).decode().rstrip("=")


def _decode(name: str, text: str, count: int) -> tuple[str, list[int]]:
    """The store identity and the `count - 1` numbers of a value; raises TokenError."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        values = orjson.loads(raw)
    except (binascii.Error, ValueError):
        values = None
    if (
        not isinstance(values, list)
        or len(values) != count
        or not isinstance(values[0], str)
        or not all(type(v) is int and v >= 0 for v in values[1:])
    ):
        raise TokenError(f"{name} {text[:80]!r} is not a value this server gave")
    return values[0], values[1:]


def encode_timestamp(value: Timestamp) -> str:
    return _encode([value.store, value.change])


def decode_timestamp(text: str) -> Timestamp:
    store, (change,) = _decode("Timestamp", text, 2)
    return Timestamp(store, change)


def encode_state(value: State) -> str:
    return _encode([value.store, value.since, value.upto, value.after, value.start])


def decode_state(text: str) -> State:
    store, (since, upto, after, start) = _decode("State", text, 5)
    state = State(store, since, upto, after, start)
    if not state.since <= state.after <= state.upto:
        raise TokenError(f"State {text[:80]!r} is not a value this server gave")
    return state
