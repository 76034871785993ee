"""fastfeed: build and push very large feeds to enterprise search appliances.

Everything a user imports is here; the modules behind it (`fastfeed.sets`, `fastfeed.delivery`,
`fastfeed.gsa`, `fastfeed.thunderstone`, ...) are its implementation. Each name but the errors
is imported on first use, so that building a feed does not pay for what pushing (httpx),
validating (lxml), the emulator (aiohttp) or a sync's state (SQLite) need, nor does any
`fastfeed` command for the parts it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from fastfeed.delivery.results import FileResult, Outcome, PushSummary
    from fastfeed.delivery.settings import PushSettings, Secret
    from fastfeed.emulator import Emulator, Fault
    from fastfeed.gsa.build import build
    from fastfeed.gsa.groups import GroupsWriter, Membership, build_groups
    from fastfeed.gsa.partitions import PartitionedBuild
    from fastfeed.gsa.push import push, push_async
    from fastfeed.gsa.run import build_and_push, build_and_push_async
    from fastfeed.gsa.sync import sync
    from fastfeed.gsa.validate import Problem, validate_file
    from fastfeed.gsa.writer import FeedWriter
    from fastfeed.seedlist.store import LoadSummary, SeedlistStore
    from fastfeed.sets.build import BuildSummary
    from fastfeed.sets.manifest import ManifestEntry, read_manifest
    from fastfeed.sets.records import Acl, Principal, Record
    from fastfeed.sets.sync import SyncSummary
    from fastfeed.sets.writer import FeedWarning
    from fastfeed.thunderstone.build import build_thunderstone
    from fastfeed.thunderstone.push import ThunderstoneSummary
    from fastfeed.thunderstone.push import push as push_thunderstone
    from fastfeed.thunderstone.push import url_settings as thunderstone_settings
    from fastfeed.thunderstone.writer import ThunderstoneWriter

#: The installed distribution's version, read from its metadata on first access (importing
#: importlib.metadata takes longer than the rest of a build's imports of the standard library).
__version__: str

#: Name: (module, attribute), imported on first access, so that a program (and every
#: `fastfeed` command) pays only for the parts it uses.
_LAZY = {
    "FileResult": ("fastfeed.delivery.results", "FileResult"),
    "Outcome": ("fastfeed.delivery.results", "Outcome"),
    "PushSummary": ("fastfeed.delivery.results", "PushSummary"),
    "PushSettings": ("fastfeed.delivery.settings", "PushSettings"),
    "Secret": ("fastfeed.delivery.settings", "Secret"),
    "Emulator": ("fastfeed.emulator", "Emulator"),
    "Fault": ("fastfeed.emulator", "Fault"),
    "build": ("fastfeed.gsa.build", "build"),
    "GroupsWriter": ("fastfeed.gsa.groups", "GroupsWriter"),
    "Membership": ("fastfeed.gsa.groups", "Membership"),
    "build_groups": ("fastfeed.gsa.groups", "build_groups"),
    "PartitionedBuild": ("fastfeed.gsa.partitions", "PartitionedBuild"),
    "push": ("fastfeed.gsa.push", "push"),
    "push_async": ("fastfeed.gsa.push", "push_async"),
    "build_and_push": ("fastfeed.gsa.run", "build_and_push"),
    "build_and_push_async": ("fastfeed.gsa.run", "build_and_push_async"),
    "sync": ("fastfeed.gsa.sync", "sync"),
    "Problem": ("fastfeed.gsa.validate", "Problem"),
    "validate_file": ("fastfeed.gsa.validate", "validate_file"),
    "FeedWriter": ("fastfeed.gsa.writer", "FeedWriter"),
    "LoadSummary": ("fastfeed.seedlist.store", "LoadSummary"),
    "SeedlistStore": ("fastfeed.seedlist.store", "SeedlistStore"),
    "BuildSummary": ("fastfeed.sets.build", "BuildSummary"),
    "ManifestEntry": ("fastfeed.sets.manifest", "ManifestEntry"),
    "read_manifest": ("fastfeed.sets.manifest", "read_manifest"),
    "Acl": ("fastfeed.sets.records", "Acl"),
    "Principal": ("fastfeed.sets.records", "Principal"),
    "Record": ("fastfeed.sets.records", "Record"),
    "SyncSummary": ("fastfeed.sets.sync", "SyncSummary"),
    "FeedWarning": ("fastfeed.sets.writer", "FeedWarning"),
    "build_thunderstone": ("fastfeed.thunderstone.build", "build_thunderstone"),
    "ThunderstoneSummary": ("fastfeed.thunderstone.push", "ThunderstoneSummary"),
    "push_thunderstone": ("fastfeed.thunderstone.push", "push"),
    "thunderstone_settings": ("fastfeed.thunderstone.push", "url_settings"),
    "ThunderstoneWriter": ("fastfeed.thunderstone.writer", "ThunderstoneWriter"),
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


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        value: Any = version("fastfeed")
    elif name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
    else:
        raise AttributeError(f"module 'fastfeed' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
