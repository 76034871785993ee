"""fastfeed: build and push very large feeds to enterprise search appliances."""

from fastfeed.errors import FastfeedError, FeedError, RecordError
from fastfeed.manifest import ManifestEntry, read_manifest
from fastfeed.writer import FeedWarning, FeedWriter, Record

__all__ = [
    "FastfeedError",
    "FeedError",
    "FeedWarning",
    "FeedWriter",
    "ManifestEntry",
    "Record",
    "RecordError",
    "read_manifest",
]
__version__ = "0.1.0"
