"""`sync`: keeps an appliance's datasource equal to a snapshot of the source, sending only the
difference.

The snapshot (every record of the source) is fingerprinted and compared with the state, which
holds the fingerprint of each record the appliance accepted. New and changed records, and a
`delete` for each URL the state holds and the snapshot has not, go as an incremental feed set
(never a full feed: split, a full feed deletes its own parts), built and pushed as `fastfeed
build` and `fastfeed push` do. The state moves only as the push journal says files were
accepted: the records of each accepted file, in one transaction. So a sync killed at any point
and run again sends every change not accepted (it first finishes the set it left), at most
re-sends the file that was in flight, and never records a change that did not arrive.

Deleting much of a datasource takes the user's word: a snapshot that would delete more than
`DEFAULT_ALLOWED_DELETES` of what the state holds, or an empty snapshot, is refused before
anything is sent (`MassDelete`) unless `allow_deletes` allows it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from fastfeed import _core
from fastfeed.delivery.results import PushSummary
from fastfeed.delivery.settings import PushSettings
from fastfeed.errors import InputError, MassDelete, PushError, SettingsError
from fastfeed.gsa.build import build
from fastfeed.gsa.push import push
from fastfeed.gsa.writer import AclFormat, Compress
from fastfeed.progress import Progress, plural
from fastfeed.sets.journal import Journal
from fastfeed.sets.manifest import MANIFEST, read_manifest
from fastfeed.sets.snapshot import Snapshot
from fastfeed.sets.state import Diff, SyncState
from fastfeed.sets.writer import DEFAULT_LEVEL, DEFAULT_MAX_BYTES

#: The share of a datasource a sync may delete without `allow_deletes`.
DEFAULT_ALLOWED_DELETES = 0.10

#: How many deletes a sync may send: a share of what the state holds (a float up to 1), or a
#: number of documents (an int).
AllowDeletes = float | int


@dataclass
class SyncSummary:
    """What a sync found and did."""

    state: str
    diff: Diff
    #: The feed set sent, if anything was to be sent (and not a dry run).
    out_dir: str | None
    pushed: PushSummary | None
    #: Records of an earlier, interrupted sync's set accepted by this one before comparing.
    resumed: int
    dry_run: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.pushed is None or self.pushed.ok

    def describe(self) -> str:
        d = self.diff
        counts = (
            f"{d.new:,} new, {d.changed:,} changed, {d.deleted:,} deleted, "
            f"{d.unchanged:,} unchanged"
        )
        if self.dry_run:
            return f"would send {counts} (dry run: nothing sent)"
        if self.pushed is None:
            return f"nothing to send ({counts})"
        return f"sent {counts}; {self.pushed.describe()}"

    def to_dict(self) -> dict[str, object]:
        d = self.diff
        return {
            "ok": self.ok,
            "state": self.state,
            "new": d.new,
            "changed": d.changed,
            "deleted": d.deleted,
            "unchanged": d.unchanged,
            "held": d.held,
            "examples": d.examples,
            "dry_run": self.dry_run,
            "resumed": self.resumed,
            "out": self.out_dir,
            "push": None if self.pushed is None else self.pushed.to_dict(),
            "seconds": round(self.seconds, 3),
        }


def sync(
    inputs: Sequence[str],
    state: str | os.PathLike[str],
    datasource: str,
    settings: PushSettings,
    *,
    allow_deletes: AllowDeletes | None = None,
    resend_all: bool = False,
    dry_run: bool = False,
    out_dir: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_records: int = 0,
    compress: Compress = "auto",
    level: int = DEFAULT_LEVEL,
    workers: int = 0,
    acl_format: AclFormat = "per-url",
    progress: Progress | None = None,
) -> SyncSummary:
    """Makes the appliance's `datasource` equal to the snapshot `inputs` (JSON Lines files, `-`,
    directories with `base_url`), sending only what differs from `state` (a file, made if
    missing: one per appliance and datasource). `resend_all` sends every record again (after
    an index reset); `dry_run` compares and sends nothing. Raises `MassDelete` before sending
    anything when the snapshot would delete too much (see `allow_deletes`)."""
    started = time.monotonic()
    problem = _core.datasource_problem(datasource)
    if problem:
        raise SettingsError(problem)
    state_path = Path(state)
    target = f"{settings.target} datasource {datasource}"
    out = Path(out_dir) if out_dir is not None else _default_out(datasource)
    with _locked(state_path), SyncState(state_path, target) as st:
        resumed = 0 if dry_run else _finish_pending(st, settings, progress)
        work = Path(tempfile.mkdtemp(prefix=".fastfeed-sync-", dir=state_path.parent))
        snapshot = Snapshot(inputs, base_url, work, skip=os.fspath(out))
        try:
            snapshot.read(st, progress)
            diff = snapshot.compare(st, resend_all=resend_all)
            _check_deletes(diff, snapshot.records, allow_deletes, datasource)

            def summary(out_dir: str | None, pushed: PushSummary | None) -> SyncSummary:
                return SyncSummary(
                    str(state_path),
                    diff,
                    out_dir,
                    pushed,
                    resumed,
                    dry_run,
                    time.monotonic() - started,
                )

            if dry_run:
                return summary(None, None)
            if diff.to_send == 0:
                st.synced()
                return summary(None, None)
            changes, deletes = work / "changes.jsonl", work / "deletes.jsonl"
            st.set_pending(out, _write_changes(st, snapshot, changes, deletes))
            try:
                build(
                    [os.fspath(changes), os.fspath(deletes)],
                    out,
                    datasource,
                    "incremental",
                    base_url=base_url,
                    max_bytes=max_bytes,
                    max_records=max_records,
                    compress=compress,
                    level=level,
                    workers=workers,
                    acl_format=acl_format,
                    progress=progress,
                )
            except InputError as exc:
                st.clear_pending()  # nothing of it was sent
                raise _as_given(exc, changes, st, snapshot) from None
            except BaseException:
                st.clear_pending()
                raise
            pushed = _push_pending(st, out, settings, progress)
            if pushed.ok:
                st.clear_pending()
                st.synced()
            return summary(os.fspath(out), pushed)
        finally:
            snapshot.close()
            st.end_snapshot()
            shutil.rmtree(work, ignore_errors=True)


def _default_out(datasource: str) -> Path:
    return Path("fastfeed-feeds") / f"{datasource}-sync-{time.strftime('%Y%m%d-%H%M%S')}"


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    """One sync at a time on a state: two would send the same changes and commit each other's."""
    with open(f"{state}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SettingsError(f"another sync is using {state}; wait for it to end") from None
        yield


def _check_deletes(diff: Diff, records: int, allow: AllowDeletes | None, datasource: str) -> None:
    if not diff.deleted:
        return
    if allow is None:
        limit = int(diff.held * DEFAULT_ALLOWED_DELETES)
        allowed = f"the default, {DEFAULT_ALLOWED_DELETES:.0%} of it"
        if records == 0:
            limit, allowed = 0, "none when the snapshot is empty"
    elif isinstance(allow, float):
        limit, allowed = int(diff.held * allow), f"{allow:.0%} of it"
    else:
        limit, allowed = allow, f"{allow:,} documents"
    if diff.deleted <= limit:
        return
    share = diff.deleted / diff.held if diff.held else 1.0
    empty = " The snapshot is empty." if records == 0 else ""
    raise MassDelete(
        f"the snapshot would delete {diff.deleted:,} of the {diff.held:,} documents of "
        f"{datasource!r} ({share:.0%}), more than allowed ({allowed}); nothing was sent.{empty} "
        "A partial or empty export is likelier than a source that lost that much: check the "
        f"input, and if the documents are really gone, sync again with --allow-deletes "
        f"{diff.deleted} (Python: allow_deletes={diff.deleted})",
        deleted=diff.deleted,
        held=diff.held,
    )


def _write_changes(
    st: SyncState, snapshot: Snapshot, changes: Path, deletes: Path
) -> Iterator[tuple[str, str | None]]:
    """Writes the records to send, the changed ones then the deletes, and yields each one's
    URL and fingerprint (None for a delete) in that order: the order of the feed set."""
    with changes.open("wb") as out:
        for record in st.changed():
            out.write(snapshot.line(record) + b"\n")
            yield record.url, record.fingerprint
    with deletes.open("wb") as out:
        for url in st.deleted():
            out.write(orjson.dumps({"url": url, "action": "delete"}) + b"\n")
            yield url, None


def _as_given(exc: InputError, changes: Path, st: SyncState, snapshot: Snapshot) -> InputError:
    """A record the build refused, named where the user gave it rather than in the work file."""
    path, _, line = exc.location.rpartition(":")
    if path != os.fspath(changes) or not line.isdigit():
        return exc
    for n, record in enumerate(st.changed(), 1):
        if n == int(line):
            return InputError(snapshot.where(record.seq), exc.reason)
    return exc


def _push_pending(
    st: SyncState, feed_set: Path, settings: PushSettings, progress: Progress | None
) -> PushSummary:
    """Pushes the pending set (what its journal says was accepted is skipped) and commits the
    records of every file accepted, whatever stopped the push."""
    try:
        return push([feed_set], settings, progress=progress)
    finally:
        _commit(st, feed_set, settings.target)


def _commit(st: SyncState, feed_set: Path, target: str) -> None:
    entries = read_manifest(feed_set)
    with Journal(feed_set, target) as journal:
        first = 0
        for entry in entries:
            if journal.is_accepted(entry):
                st.commit_records(first, first + entry.records)
            first += entry.records


def _finish_pending(st: SyncState, settings: PushSettings, progress: Progress | None) -> int:
    """Sends what an interrupted sync left unaccepted, before comparing anew: its records are
    changes the appliance may not hold. Returns how many records it held."""
    feed_set = st.pending_set
    if feed_set is None:
        return 0
    if not (feed_set / MANIFEST).exists():
        st.clear_pending()  # killed while building: nothing of it was sent
        return 0
    held = st.pending_count()
    pushed = _push_pending(st, feed_set, settings, progress)
    left = st.pending_count()
    if left:
        raise PushError(
            f"{plural(left, 'record')} of the set {feed_set}, left by an interrupted sync, were "
            "not accepted; fix what the push reports and sync again",
            summary=pushed,
        )
    st.clear_pending()
    return held
