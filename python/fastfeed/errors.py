"""Every error fastfeed raises, in one tree: catching `FastfeedError` catches them all.

    FastfeedError            the root (made in the Rust core, so that its errors are under it)
    ├── FeedError            a feed cannot be built as asked (writer settings, a closed writer)
    │   └── RecordError      a bad record: `.index`, `.field`, `.reason`, `.kind`, `.written`
    ├── InputError           an input record that cannot be read or is refused, where it came from
    ├── EmptyFullFeed        a full feed with no records, refused unless allowed (the core's)
    ├── StateError           a sync state file cannot be used (not a state, another's, too new)
    ├── MassDelete           a sync would delete more than allowed: `.deleted`, `.held`
    ├── SettingsError        a setting is missing or out of range
    ├── JournalError         the push journal cannot be used
    ├── FileChanged          a feed file is not the one its manifest describes
    ├── PushError            a push cannot go on: `.refused`, `.summary`
    ├── BacklogError         the appliance's backlog could not be read
    ├── ReplyError           a Thunderstone answer that is not a ThunderstoneReplicationResult
    └── LoadError            a seedlist load refused a record

The servers (emulator, seedlist) have private errors of their own, under the same root, that
become HTTP answers and never reach a caller; so has the sync state (`DuplicateUrl`), which
the sync turns into an `InputError` naming where the URL was given. Errors of the system (a
file that cannot be read or written) stay `OSError`, which `describe` words for the command
line; one that stops `add_jsonl` carries `.written` as a `RecordError` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastfeed._core import EmptyFullFeed, FastfeedError, FeedError, RecordError

if TYPE_CHECKING:
    from fastfeed.delivery.results import PushSummary

__all__ = [
    "BacklogError",
    "EmptyFullFeed",
    "FastfeedError",
    "FeedError",
    "FileChanged",
    "InputError",
    "JournalError",
    "LoadError",
    "MassDelete",
    "PushError",
    "RecordError",
    "ReplyError",
    "SettingsError",
    "StateError",
]


class InputError(FastfeedError):
    """An input record that cannot be read or is refused, with where it came from.
    `skippable`: a record refused where `on_error="skip"` would have set it aside; not an input
    that cannot be read whole (a truncated file, an endless line), which stops a build
    whatever `on_error` says."""

    def __init__(self, location: str, message: str, *, skippable: bool = False) -> None:
        super().__init__(f"{location}: {message}")
        self.location = location
        self.reason = message
        self.skippable = skippable


class StateError(FastfeedError):
    """A sync state file cannot be used: not a state, another appliance's or datasource's, or
    of a format this version does not read."""


class MassDelete(FastfeedError):
    """A sync would delete more of the datasource than allowed: an empty or partial snapshot is
    far more often a broken export than a source that lost its documents, so deleting that
    much takes the user's word (`allow_deletes`, `--allow-deletes`)."""

    def __init__(self, message: str, *, deleted: int, held: int) -> None:
        super().__init__(message)
        self.deleted = deleted
        self.held = held


class SettingsError(FastfeedError):
    """A setting is missing or out of range."""


class JournalError(FastfeedError):
    """The journal cannot be used: unwritable, or another push holds it."""


class FileChanged(FastfeedError):
    """The file on disk is not the one the manifest describes."""


class PushError(FastfeedError):
    """The push could not go on. `refused` means the setup is wrong (untrusted IP, TLS, missing
    manifest) rather than the feeds; `summary` tells what was done before it stopped."""

    def __init__(
        self, message: str, *, refused: bool = False, summary: PushSummary | None = None
    ) -> None:
        super().__init__(message)
        self.refused = refused
        self.summary = summary


class BacklogError(FastfeedError):
    """The backlog could not be read."""


class ReplyError(FastfeedError):
    """The appliance's answer is not a `ThunderstoneReplicationResult`."""


class LoadError(FastfeedError):
    """A refused record, with where it came from; nothing of its load was kept."""

    def __init__(self, location: str, field: str | None, reason: str) -> None:
        where = f"{location}: {field}" if field else location
        super().__init__(f"{where}: {reason}")
        self.location = location
        self.field = field
        self.reason = reason
