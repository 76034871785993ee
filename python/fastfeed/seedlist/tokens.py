"""The opaque `Timestamp` and `State` values a crawler carries from one request to the next.

Both are base64url JSON. A Timestamp is a store's identity and a change number: "everything up
to this change has been seen". A State is where a crawl stands: the changes it reports (after
`since`, up to `upto`, fixed when the crawl began, so pages do not shift while documents are
loaded), the last change already served and how many entries were served (the next `Start`).
The store identity makes a value from another store (one recreated since) stale, not wrong.

Each value is signed (HMAC-SHA256 with a key kept in the store): a crawler carries them, and
one altered or made up is refused rather than read as a position in the store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass, field

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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass(frozen=True)
class Signer:
    """Makes and reads the values of one store (`identity`), signed with its `key`.

    A value of another store (one recreated since) cannot be checked with this key, and needs
    no check: whatever it says, it is stale, and the crawler is told to crawl again in full. A
    value of this store whose signature does not match was altered or made up: refused."""

    identity: str
    key: bytes = field(repr=False)

    def _signature(self, payload: str) -> str:
        return _b64(hmac.digest(self.key, payload.encode(), hashlib.sha256)[:16])

    def _encode(self, values: list[object]) -> str:
        payload = _b64(orjson.dumps(values))
        return f"{payload}.{self._signature(payload)}"

    def _decode(self, name: str, text: str, count: int) -> tuple[str, list[int]]:
        """The store identity and the `count - 1` numbers of a value; raises TokenError."""
        payload, _, signature = text.partition(".")
        try:
            values = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (binascii.Error, ValueError):
            values = None
        if (
            not isinstance(values, list)
            or len(values) != count
            or not isinstance(values[0], str)
            or not all(type(v) is int and v >= 0 for v in values[1:])
            or (
                values[0] == self.identity
                and not hmac.compare_digest(signature.encode(), self._signature(payload).encode())
            )
        ):
            raise TokenError(f"{name} {text[:80]!r} is not a value this server gave")
        return values[0], values[1:]

    def encode_timestamp(self, value: Timestamp) -> str:
        return self._encode([value.store, value.change])

    def decode_timestamp(self, text: str) -> Timestamp:
        store, (change,) = self._decode("Timestamp", text, 2)
        return Timestamp(store, change)

    def encode_state(self, value: State) -> str:
        return self._encode([value.store, value.since, value.upto, value.after, value.start])

    def decode_state(self, text: str) -> State:
        store, (since, upto, after, start) = self._decode("State", text, 5)
        state = State(store, since, upto, after, start)
        if not state.since <= state.after <= state.upto:
            raise TokenError(f"State {text[:80]!r} is not a value this server gave")
        return state
