"""IBM Connections seedlists served from a store of fastfeed records, for crawlers that pull.

`SeedlistStore` (SQLite) keeps the documents and their changes; `fastfeed.seedlist.server` serves
them as seedlist pages over HTTP(S). The server is not imported here: it needs aiohttp, which
loading records does not.
"""

from fastfeed.errors import LoadError
from fastfeed.seedlist.store import LoadSummary, SeedlistStore

__all__ = ["LoadError", "LoadSummary", "SeedlistStore"]
