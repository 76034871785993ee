"""fastfeed: build and push very large feeds to enterprise search appliances.

Everything a user imports is here; the modules behind it (`fastfeed.sets`, `fastfeed.delivery`,
`fastfeed.gsa`, `fastfeed.thunderstone`, ...) are its implementation. What needs a heavy
dependency (httpx for pushing, lxml for validating, aiohttp for the emulator, SQLite for the
seedlist store) is imported on first use, so that building a feed does not pay for them.
"""

from __future__ import annotations

import importlib
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from fastfeed.delivery.results import FileResult, Outcome, PushSummary
from fastfeed.delivery.settings import PushSettings, Secret
from fastfeed.errors import (
    BacklogError,
    EmptyFullFeed,
    FastfeedError,
    FeedError,
    FileChanged,
    InputError,
    JournalError,
    LoadError,
    MassDelete,
    PushError,
    RecordError,
    ReplyError,
    SettingsError,
    StateError,
)
from fastfeed.gsa.build import build
from fastfeed.gsa.groups import GroupsWriter, Membership, build_groups
from fastfeed.gsa.partitions import PartitionedBuild
from fastfeed.gsa.writer import FeedWriter
from fastfeed.sets.build import BuildSummary
from fastfeed.sets.manifest import ManifestEntry, read_manifest
from fastfeed.sets.records import Acl, Principal, Record
from fastfeed.sets.writer import FeedWarning
from fastfeed.thunderstone.build import build_thunderstone
from fastfeed.thunderstone.writer import ThunderstoneWriter

if TYPE_CHECKING:
    from fastfeed.emulator import Emulator, Fault
    from fastfeed.gsa.push import push, push_async
    from fastfeed.gsa.run import build_and_push, build_and_push_async
    from fastfeed.gsa.sync import sync
    from fastfeed.gsa.validate import Problem, validate_file
    from fastfeed.seedlist.store import LoadSummary, SeedlistStore
    from fastfeed.sets.sync import SyncSummary
    from fastfeed.thunderstone.push import ThunderstoneSummary
    from fastfeed.thunderstone.push import push as push_thunderstone
    from fastfeed.thunderstone.push import url_settings as thunderstone_settings

#: Name: (module, attribute), imported on first access.
_LAZY = {
    "push": ("fastfeed.gsa.push", "push"),
    "push_async": ("fastfeed.gsa.push", "push_async"),
    "build_and_push": ("fastfeed.gsa.run", "build_and_push"),
    "build_and_push_async": ("fastfeed.gsa.run", "build_and_push_async"),
    "push_thunderstone": ("fastfeed.thunderstone.push", "push"),
    "ThunderstoneSummary": ("fastfeed.thunderstone.push", "ThunderstoneSummary"),
    "thunderstone_settings": ("fastfeed.thunderstone.push", "url_settings"),
    "sync": ("fastfeed.gsa.sync", "sync"),
    "SyncSummary": ("fastfeed.sets.sync", "SyncSummary"),
    "validate_file": ("fastfeed.gsa.validate", "validate_file"),
    "Problem": ("fastfeed.gsa.validate", "Problem"),
    "SeedlistStore": ("fastfeed.seedlist.store", "SeedlistStore"),
    "LoadSummary": ("fastfeed.seedlist.store", "LoadSummary"),
    "Emulator": ("fastfeed.emulator", "Emulator"),
    "Fault": ("fastfeed.emulator", "Fault"),
}

__all__ = [
    "Acl",
    "BacklogError",
    "BuildSummary",
    "Emulator",
    "EmptyFullFeed",
    "FastfeedError",
    "Fault",
    "FeedError",
    "FeedWarning",
    "FeedWriter",
    "FileChanged",
    "FileResult",
    "GroupsWriter",
    "InputError",
    "JournalError",
    "LoadError",
    "LoadSummary",
    "ManifestEntry",
    "MassDelete",
    "Membership",
    "Outcome",
    "PartitionedBuild",
    "Principal",
    "Problem",
    "PushError",
    "PushSettings",
    "PushSummary",
    "Record",
    "RecordError",
    "ReplyError",
    "Secret",
    "SeedlistStore",
    "SettingsError",
    "StateError",
    "SyncSummary",
    "ThunderstoneSummary",
    "ThunderstoneWriter",
    "build",
    "build_and_push",
    "build_and_push_async",
    "build_groups",
    "build_thunderstone",
    "push",
    "push_async",
    "push_thunderstone",
    "read_manifest",
    "sync",
    "thunderstone_settings",
    "validate_file",
]

__version__ = version("fastfeed")


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'fastfeed' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
