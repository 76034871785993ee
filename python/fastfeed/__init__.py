"""fastfeed: build and push very large feeds to enterprise search appliances."""

from fastfeed.errors import FastfeedError, FeedError, RecordError
from fastfeed.gsa.writer import FeedWriter
from fastfeed.sets.manifest import ManifestEntry, read_manifest
from fastfeed.sets.records import Record
from fastfeed.sets.writer import FeedWarning

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
