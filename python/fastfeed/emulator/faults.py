"""Scripted misbehaviour of the emulated feedergate, so uploader tests can meet every failure.

Faults wait in a FIFO queue; each /xmlfeed (or /xmlgroups) request takes the head fault, which
stays at the head until it has been used `times` times.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass, replace
from http import HTTPStatus
from typing import Any

#: The appliance's answers that come with HTTP 200 (the guide's Troubleshooting section).
DISK_FULL = "Feed not accepted due to insufficient disk space. Contact Google Enterprise Support."
INTERNAL_ERROR = "Internal Error"

KINDS = ("http_status", "answer", "slow", "drop_connection", "fail_in_feeder")

#: What the feed log says of a feed failed by `Fault.fail_in_feeder`.
FEEDER_FAILURE = "failed in error: the feeder could not process the feed (emulator fault)"


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour; build it with the class methods, not the constructor."""

    kind: str
    times: int = 1
    status: int = 200
    body: str = ""
    seconds: float = 0.0
    after_bytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind '{self.kind}' is not one of {KINDS}")
        if self.times < 1:
            raise ValueError(f"a fault must apply at least once, not times={self.times}")
        if self.kind == "http_status" and not 100 <= self.status <= 599:
            raise ValueError(f"HTTP status {self.status} is not between 100 and 599")
        if self.seconds < 0 or self.after_bytes < 0:
            raise ValueError("seconds and after_bytes cannot be negative")

    @classmethod
    def http_status(cls, status: int, times: int = 1) -> Fault:
        """Answers with this HTTP status (e.g. 503) after reading the upload."""
        return cls("http_status", times, status=status, body=_reason(status))

    @classmethod
    def answer(cls, body: str, times: int = 1) -> Fault:
        """Answers HTTP 200 with this body instead of `Success`, e.g. "Internal Error"."""
        return cls("answer", times, body=body)

    @classmethod
    def disk_full(cls, times: int = 1) -> Fault:
        """Refuses the feed with the appliance's insufficient-disk-space answer (HTTP 200)."""
        return cls("answer", times, body=DISK_FULL)

    @classmethod
    def slow(cls, seconds: float, times: int = 1) -> Fault:
        """Waits this long before reading the upload, then accepts it as usual."""
        return cls("slow", times, seconds=seconds)

    @classmethod
    def drop_connection(cls, after_bytes: int = 0, times: int = 1) -> Fault:
        """Closes the connection, without an answer, after reading this many body bytes."""
        return cls("drop_connection", times, after_bytes=after_bytes)

    @classmethod
    def fail_in_feeder(cls, times: int = 1) -> Fault:
        """Accepts the feed (`Success`), then its feeder fails it whole, applying none of its
        records: only the feed log (status page, Administrative API) tells."""
        return cls("fail_in_feeder", times)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        """Builds a fault from the JSON of POST /_emulator/faults; raises ValueError if invalid."""
        if not isinstance(data, dict):
            raise ValueError(
                'a fault is a JSON object such as {"kind": "http_status", "status": 503}'
            )
        kind = data.get("kind")
        known = {"kind", "times", "status", "body", "seconds", "after_bytes"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault fields {sorted(unknown)}; known: {sorted(known)}")
        if kind == "disk_full":
            data = {**data, "kind": "answer", "body": DISK_FULL}
        elif kind == "http_status" and "body" not in data:
            data = {**data, "body": _reason(data.get("status", 0))}
        try:
            return cls(**data)
        except TypeError as exc:
            raise ValueError(f"invalid fault {data}: {exc}") from exc

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _reason(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


class FaultQueue:
    """Thread-safe, because tests script faults from their own thread while the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def take(self) -> Fault | None:
        """The fault for the next request, if any, counting one use of it."""
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults.popleft()
            if fault.times > 1:
                self._faults.appendleft(replace(fault, times=fault.times - 1))
            return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)
