"""What the feedergate takes and answers (Feeds Protocol guide): where each kind of set is
POSTed, the multipart form a file goes in, and what its answers mean."""

from __future__ import annotations

import enum
import uuid
from collections.abc import AsyncIterator, Callable

from fastfeed.delivery.body import file_chunks
from fastfeed.delivery.results import FeedFile

#: Where each kind of manifest entry is POSTed, and the form field that names its source.
ENDPOINTS = {"feed": ("/xmlfeed", "datasource"), "groups": ("/xmlgroups", "groupsource")}

#: The options that mend a TLS failure with the feedergate.
TLS_HINT = "--cacert (or --http for port 19900)"

EMPTY_ANSWER = "the appliance answered HTTP 200 with an empty body, not Success"

UNAUTHORIZED_HELP = (
    "add this machine's IP address in the appliance's Admin Console, under "
    "Crawl and Index > Feeds > List of Trusted IP Addresses, then push again"
)


class Answer(enum.Enum):
    SUCCESS = enum.auto()
    UNAUTHORIZED = enum.auto()
    DISK_FULL = enum.auto()
    INTERNAL_ERROR = enum.auto()
    OTHER = enum.auto()


def classify(text: str) -> Answer:
    """The feedergate's HTTP 200 answers, from the Feeds Protocol guide's troubleshooting.
    Success in any case, an assumption (the guide shows only "Success"): Google's own feed
    clients (the Connector Manager, the gsafeed library) take "success" too."""
    text = text.strip()
    if text.casefold() == "success":
        return Answer.SUCCESS
    if text.startswith("Error - Unauthorized Request"):
        return Answer.UNAUTHORIZED
    if text.startswith("Feed not accepted due to insufficient disk space"):
        return Answer.DISK_FULL
    if text == "Internal Error":
        return Answer.INTERNAL_ERROR
    return Answer.OTHER


def quote_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "")


class Multipart:
    """The `/xmlfeed` (or `/xmlgroups`) form, streamed from disk with a known length.

    Built by hand rather than with httpx's `files=`: this yields the fields in the order the
    guide shows (datasource or groupsource, feedtype, data), reads the file in large chunks
    (fewer, bigger writes), and stops with an error if the file is shorter than the manifest
    says, so a file changed after the check can never be sent cut short as if it were complete.
    """

    def __init__(self, feed: FeedFile, chunk_size: int, on_chunk: Callable[[int], None]) -> None:
        boundary = f"fastfeed-{uuid.uuid4().hex}"
        self.content_type = f"multipart/form-data; boundary={boundary}"
        entry = feed.entry
        source_field = ENDPOINTS[entry.kind][1]
        head = "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            for name, value in ((source_field, entry.datasource), ("feedtype", entry.feedtype))
        )
        head += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="data"; '
            f'filename="{quote_field(entry.file)}"\r\nContent-Type: text/xml\r\n\r\n'
        )
        self._head = head.encode()
        self._tail = f"\r\n--{boundary}--\r\n".encode()
        self._feed = feed
        self._chunk_size = chunk_size
        self._on_chunk = on_chunk
        self.length = len(self._head) + entry.bytes + len(self._tail)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._head
        async for chunk in file_chunks(self._feed, self._chunk_size):
            self._on_chunk(len(chunk))
            yield chunk
        yield self._tail
