"""Groups feeds: the members of each group, pushed to the appliance's /xmlgroups so that it
resolves a user's groups without asking the directory at query time.

One group per JSON Lines line (see the README)::

    {"group": "eng", "namespace": "Default", "members": [{"name": "alice", "scope": "user"}]}
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypedDict, Unpack

import orjson

from fastfeed import _core
from fastfeed.delivery.results import FeedFile
from fastfeed.progress import Progress
from fastfeed.sets.build import BuildSummary, OnError, write_set
from fastfeed.sets.records import Principal
from fastfeed.sets.writer import ArrowData, FeedWarning, OnFile, SetWriter, WriterOptions

GroupsFeedType = Literal["full", "incremental"]


class _MembershipRequired(TypedDict):
    group: str


class Membership(_MembershipRequired, total=False):
    """A group (its name, namespace, case sensitivity) and its members (users and groups)."""

    namespace: str
    case_sensitive: bool
    principal_type: Literal["unqualified"]
    members: Sequence[Principal]


class GroupsWriter(SetWriter):
    """Writes memberships into numbered, size-capped groups feed files in `out_dir`, and
    `manifest.jsonl` (entries of kind `groups`, whose `datasource` is the groupsource).

    Used like `FeedWriter`; a table's columns are the fields of a membership (see `add_arrow`).
    A full groups feed replaces the groups of every source on the appliance; split, only its
    first file is full. A full groups feed with no membership has no form in the protocol
    (`xmlgroups (membership+)`): it is refused when closed (`EmptyFullFeed`)."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        groupsource: str,
        feedtype: GroupsFeedType = "incremental",
        *,
        on_file: OnFile | None = None,
        on_warning: Callable[[FeedWarning], None] | None = None,
        **options: Unpack[WriterOptions],
    ) -> None:
        core = _core.FeedWriter(os.fspath(out_dir), groupsource, feedtype, kind="groups", **options)
        super().__init__(core, out_dir, on_file, on_warning)

    def add(self, membership: Membership) -> None:
        self.add_batch((membership,))

    def add_batch(self, memberships: Iterable[Membership]) -> None:
        """Adds memberships in order; nothing of the batch is written if one is refused.

        They cross as JSON Lines: names are small, and so the core reads one schema."""
        self.add_jsonl(b"".join(orjson.dumps(m) + b"\n" for m in memberships))

    def add_arrow(self, data: ArrowData) -> None:
        """Adds the rows of Arrow data (a pyarrow Table, a Polars DataFrame, a DuckDB result...)
        as memberships, read in place by the Rust core, as `FeedWriter.add_arrow` reads records:
        columns `group`, `namespace`, `case_sensitive`, `principal_type` as in `Membership`, and
        `members` a list of structs with the fields of a `Principal` (`name`, `scope`,
        `namespace`, `case_sensitive`, `principal_type`), or that list as JSON text. The same
        memberships make the same files as `add_batch`; errors are those of
        `SetWriter.add_arrow`."""
        super().add_arrow(data)


def build_groups(
    inputs: Sequence[str],
    out_dir: str | os.PathLike[str],
    groupsource: str,
    feedtype: GroupsFeedType = "incremental",
    *,
    on_error: OnError = "stop",
    on_file: OnFile | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    **options: Unpack[WriterOptions],
) -> BuildSummary:
    """Builds a groups feed set from `inputs`: JSON Lines files (`-` for standard input), or
    Parquet or Arrow files, globs or dataset directories of them whose columns are the fields of
    a membership (see `GroupsWriter.add_arrow`), like `fastfeed.build`: refused lines stop the
    build, or with `on_error="skip"` go to `rejected.jsonl`."""

    def writer(warn: Callable[[FeedWarning], None]) -> SetWriter:
        return GroupsWriter(
            out_dir, groupsource, feedtype, on_file=on_file, on_warning=warn, **options
        )

    return write_set(inputs, out_dir, writer, None, on_error, on_warning, progress, documents=False)


FULL_GROUPS_WARNING = (
    "a full groups feed replaces the groups of EVERY groupsource on the appliance, not only of "
    "its own: groups fed by other sources (connectors, other groupsources) are deleted"
)


def full_groups(files: Iterable[FeedFile]) -> list[FeedFile]:
    """The full groups feeds among `files`: each replaces the groups of every groupsource."""
    return [f for f in files if f.entry.kind == "groups" and f.entry.feedtype == "full"]
