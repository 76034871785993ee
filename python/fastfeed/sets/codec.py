"""Content encodings as receivers read them: base64 (as the protocols' examples write it) and
zlib, inflated with a bound."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator


def decode_base64(text: str) -> bytes:
    """Base64 as receivers read it: strict alphabet, white space ignored, padding optional (the
    guide's own examples leave it out). Raises `binascii.Error` (a `ValueError`)."""
    compact = "".join(text.split())
    return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)


#: The protocol's bound on a feed, and so on what one content can hold once inflated.
MAX_INFLATED_BYTES = 10**9
_INFLATE_STEP = 1 << 20


def inflated(raw: bytes, limit: int) -> Iterator[bytes]:
    """The inflated bytes of a zlib stream, a step at a time, refusing (`ValueError`) a stream
    that inflates to more than `limit` bytes before making more than a step past it: a small
    content can inflate a thousandfold (a zlib bomb). Raises `zlib.error` for a broken stream."""
    inflater = zlib.decompressobj()
    made = 0
    data = raw
    while not inflater.eof:
        step = inflater.decompress(data, _INFLATE_STEP)
        made += len(step)
        if made > limit:
            raise ValueError(f"it inflates to more than {limit:,} bytes")
        data = inflater.unconsumed_tail
        if not (step or data or inflater.eof):
            raise zlib.error("incomplete or truncated stream")
        yield step


def inflate(raw: bytes, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """`zlib.decompress`, bounded: see `inflated`."""
    return b"".join(inflated(raw, limit))
