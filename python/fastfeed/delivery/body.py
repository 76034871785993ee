"""A feed file as a request body: read from disk in large chunks, checked against its
manifest entry before anything is sent and again while it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastfeed.delivery.results import FeedFile
from fastfeed.errors import FileChanged


def check_file(feed: FeedFile) -> None:
    """Hashes the whole file before sending: a feed edited or truncated since it was built is
    refused rather than replacing a datasource with something nobody validated."""
    entry = feed.entry
    digest = entry.hasher()
    try:
        with open(feed.path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise FileChanged(f"cannot read it: {exc.strerror or exc}") from None
    if entry.digest_of(digest) != entry.digest:
        raise FileChanged(f"its {entry.algorithm} digest {feed.CHANGED}")


async def file_chunks(feed: FeedFile, chunk_size: int) -> AsyncIterator[bytes]:
    """The file's bytes, as many as its manifest entry says, in chunks of `chunk_size`.

    The file is hashed on the way and its last chunk is held back until the hash matches the
    manifest's: a file changed while it is sent (after `check_file`) raises `FileChanged`
    before the request is complete, so the appliance never receives bytes nobody built. The
    same for a file that became shorter or unreadable.
    """
    digest = feed.entry.hasher()
    remaining = feed.entry.bytes
    held = b""
    # Each chunk is hashed on a worker thread (every kind of digest lets go of the GIL) while the
    # one before it is sent: hashing on the event loop, in turn with TLS, cost a tenth of the
    # throughput.
    hashing: asyncio.Future[None] | None = None
    loop = asyncio.get_running_loop()
    # Plain reads on the event loop: a page-cache read of a chunk takes well under a
    # millisecond, and a thread hop per chunk would cost more than it saves.
    try:
        with open(feed.path, "rb") as f:
            while remaining:
                chunk = f.read(min(chunk_size, remaining))
                if not chunk:
                    raise FileChanged("it became shorter while being sent")
                remaining -= len(chunk)
                if hashing is not None:
                    await hashing  # in file order
                hashing = loop.run_in_executor(None, digest.update, chunk)
                if held:
                    yield held
                held = chunk
    except OSError as exc:  # removed or unreadable since its check
        raise FileChanged(f"cannot read it: {exc.strerror or exc}") from None
    finally:
        if hashing is not None:
            await hashing
    if feed.entry.digest_of(digest) != feed.entry.digest:
        raise FileChanged("it changed while being sent: the request was abandoned before its end")
    if held:
        yield held
