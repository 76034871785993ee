"""Streams the fields of a POST /xmlfeed to disk, whether sent as multipart or urlencoded.

The `data` field can approach 1 GB, so it is never held in memory: it goes chunk by chunk into a
file, hashed on the way so tests can compare exactly what arrived with what was sent.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import unquote_to_bytes

from aiohttp import BodyPartReader, web

from fastfeed._core import FEED_MAX_BYTES
from fastfeed.errors import FastfeedError

#: The guide: "An XML feed must be less than 1 GB in size." (A name of its own: tests lower it.)
MAX_FEED_BYTES = FEED_MAX_BYTES
#: The short fields (datasource, feedtype) are names; anything longer is not one.
MAX_FIELD_BYTES = 4096
CHUNK = 1 << 16


class UploadError(FastfeedError):
    """The request cannot be taken as a feed; the message tells the client why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def too_large(size: int) -> UploadError:
    return UploadError(
        f"Feed refused: {size} bytes is over the appliance's limit of {MAX_FEED_BYTES} bytes"
        " (1 GB); split it into smaller feeds.",
        413,
    )


class DataFile:
    """The `data` field on its way to disk, with its size and SHA-256."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self.received = False
        #: The file name of the multipart `data` part, if the client gave one.
        self.filename: str | None = None
        self._hash = hashlib.sha256()
        self._file = path.open("wb")

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def write(self, chunk: bytes) -> None:
        self.received = True
        self.size += len(chunk)
        if self.size > MAX_FEED_BYTES:
            raise too_large(self.size)
        self._hash.update(chunk)
        self._file.write(chunk)

    def close(self) -> None:
        self._file.close()

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self.close()
        if exc_type is not None:
            self.path.unlink(missing_ok=True)


async def receive(request: web.Request, data: DataFile) -> dict[str, str]:
    """Reads the request's fields, writing `data` to the file; returns the other fields."""
    ctype = request.content_type
    if ctype == "multipart/form-data" and "boundary" in request.headers.get("Content-Type", ""):
        return await _multipart(request, data)
    if ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        # Without a boundary, "multipart" is the guide's own sample request: a urlencoded body.
        return await _urlencoded(request, data)
    raise UploadError(
        f"Content-Type '{ctype or 'none'}' is not a form: POST the fields datasource, feedtype and"
        " data as multipart/form-data (or application/x-www-form-urlencoded)."
    )


async def _multipart(request: web.Request, data: DataFile) -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise UploadError("nested multipart bodies are not form fields")
            if part.name == "data":
                data.filename = part.filename
                while chunk := await part.read_chunk(CHUNK):
                    data.write(chunk)
                data.received = True
            else:
                value = bytearray()
                while chunk := await part.read_chunk(CHUNK):
                    value += chunk
                    if len(value) > MAX_FIELD_BYTES:
                        raise UploadError(
                            f"form field '{part.name}' is over {MAX_FIELD_BYTES} bytes"
                        )
                fields[part.name or ""] = value.decode("utf-8", "replace")
    except ValueError as exc:
        raise UploadError(f"malformed multipart/form-data body: {exc}") from exc
    return fields


async def _urlencoded(request: web.Request, data: DataFile) -> dict[str, str]:
    decoder = _UrlencodedDecoder(data)
    async for chunk in request.content.iter_chunked(CHUNK):
        decoder.feed(chunk)
    decoder.end_field()
    return decoder.fields


class _UrlencodedDecoder:
    """Splits name=value&... as it streams, percent-decoding `data` straight into the file."""

    def __init__(self, data: DataFile) -> None:
        self.data = data
        self.fields: dict[str, str] = {}
        self._name = bytearray()
        self._value = bytearray()
        self._in_value = False
        self._carry = b""

    def feed(self, chunk: bytes) -> None:
        start = 0
        for match in re.finditer(rb"[=&]", chunk):
            self._take(chunk[start : match.start()])
            start = match.end()
            if match.group() == b"&":
                self.end_field()
            elif not self._in_value:
                self._in_value = True
                self.data.received |= self._name == b"data"
            else:
                self._take(b"=")  # a literal '=' inside a value
        self._take(chunk[start:])

    def _take(self, raw: bytes) -> None:
        if not self._in_value:
            self._name += raw
            if len(self._name) > MAX_FIELD_BYTES:
                raise UploadError(f"a form field name is over {MAX_FIELD_BYTES} bytes")
        elif self._name == b"data":
            self._write_data(raw)
        else:
            self._value += raw
            if len(self._value) > MAX_FIELD_BYTES:
                raise UploadError(
                    f"form field '{self._name.decode()}' is over {MAX_FIELD_BYTES} bytes"
                )

    def _write_data(self, raw: bytes, final: bool = False) -> None:
        raw = self._carry + raw
        # Keep an escape cut by the chunk boundary ("%" or "%4") for the next chunk.
        cut = raw.rfind(b"%", max(0, len(raw) - 2))
        if cut >= 0 and not final:
            raw, self._carry = raw[:cut], raw[cut:]
        else:
            self._carry = b""
        if raw:
            self.data.write(unquote_to_bytes(raw.replace(b"+", b" ")))

    def end_field(self) -> None:
        name = unquote_to_bytes(bytes(self._name).replace(b"+", b" ")).decode("utf-8", "replace")
        if name == "data" and self._in_value:
            self._write_data(b"", final=True)
        elif name:
            value = unquote_to_bytes(bytes(self._value).replace(b"+", b" "))
            self.fields[name] = value.decode("utf-8", "replace")
        self._name.clear()
        self._value.clear()
        self._in_value = False
