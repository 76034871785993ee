"""One request to an appliance, bounded both ways: a total deadline besides httpx's idle
timeouts (a server that drips one byte every few seconds never trips an idle timeout), and a cap
on how much of the answer is read (an answer is a word or a short document; a huge one is
cut, never held whole)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from fastfeed.errors import FastfeedError

#: What is kept of an answer by default: the feedergate answers a sentence.
ANSWER_BYTES = 64 * 1024


class DeadlineExceeded(httpx.TimeoutException, FastfeedError):
    """The request took longer than its total deadline: a timeout of httpx's, retried like any,
    and a fastfeed error like every other."""


@dataclass(frozen=True)
class Answer:
    status: int
    #: The answer's first bytes, at most the cap given.
    body: bytes
    #: The answer was longer than the cap: `body` is its beginning.
    cut: bool

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


async def exchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    deadline: float,
    limit: int = ANSWER_BYTES,
    content: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """Sends the request and reads at most `limit` bytes of its answer, all within `deadline`
    seconds; raises `DeadlineExceeded` past it, and httpx's errors as they come."""
    try:
        async with asyncio.timeout(deadline):
            # Asked unencoded: the answer is read raw, so that a compressed one cannot inflate
            # past the cap in one piece.
            headers = {**(headers or {}), "Accept-Encoding": "identity"}
            request = client.build_request(method, url, content=content, headers=headers)
            response = await client.send(request, stream=True)
            try:
                body = bytearray()
                async for piece in response.aiter_raw():
                    body += piece
                    if len(body) > limit:
                        return Answer(response.status_code, bytes(body[:limit]), True)
                return Answer(response.status_code, bytes(body), False)
            finally:
                await response.aclose()
    except TimeoutError:
        raise DeadlineExceeded(
            f"no complete answer within the deadline of {deadline:g} s (--deadline)"
        ) from None
