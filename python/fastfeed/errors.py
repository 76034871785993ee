"""The Python layer's errors and the CLI's exit statuses.

Errors raised by the Rust core (`FeedError`, `RecordError`) are created in its bindings module;
they are re-exported here so that users import every fastfeed error from one place.
"""

from __future__ import annotations

from enum import IntEnum

from fastfeed._core import FeedError, RecordError

__all__ = ["EmptyFullFeed", "ExitCode", "FastfeedError", "FeedError", "RecordError"]


class ExitCode(IntEnum):
    OK = 0
    #: Some of the work failed (bad records, files the appliance did not accept, invalid feeds).
    FAILED = 1
    #: The command line was wrong (argparse's own status).
    USAGE = 2
    #: Nothing was done because the setup is wrong: not a trusted IP, bad TLS, missing manifest.
    REFUSED = 3


class FastfeedError(Exception):
    """A problem in the Python layer (input files, configuration, pushing) the user can act on."""


class EmptyFullFeed(FastfeedError):
    """A full feed with nothing in it. Sent, it would remove every document of its datasource
    (a full groups feed: every group) from the appliance; an empty input is far more often a
    broken export than an empty source, so it takes the user's explicit word
    (`allow_empty_full=True`, `--allow-empty-full`)."""


def describe(exc: Exception) -> str:
    """An error as the CLI shows it: an OSError as "file: what the system said", without
    Python's "[Errno N]" and quotes."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)
