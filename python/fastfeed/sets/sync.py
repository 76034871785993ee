"""What every receiver's `sync` shares: keeping a receiver's collection (a GSA datasource, a
Thunderstone profile) equal to a snapshot of the source, sending only the difference.

The snapshot (every record of the source) is fingerprinted and compared with the state, which
holds the fingerprint of each record the receiver accepted. New and changed records, and a
`delete` for each URL the state holds and the snapshot has not, are built into a set by the
receiver's builder (incremental: never a full feed, which split across files deletes its own
parts) and sent by its pusher. The state moves only as the push journal says files were
accepted: the records of each accepted file, in one transaction. So a sync killed at any point
and run again sends every change not accepted (it first finishes the set it left, found by its
absolute path from any directory), at most re-sends the files that were in flight, and never
records a change that did not arrive. A set left that can no longer be read (removed, cut
short), or given up (`abandon_pending`), is not taken as never sent: the URLs of its records not
known to be accepted are sent again (`SyncState.unknown_pending`), with a warning.

A sync that sends every record anyway (the first of a collection, `resend_all`, a state whose
fingerprints are of another version) reads the snapshot once: the receiver's writer builds the
whole snapshot and fingerprints each record as it encodes it, into the same comparison; the
deletes follow once the comparison knows them. The set is complete before anything of it is
sent, so the guard against mass deletes still stops the sync before the push, and the state
learns of the set (`set_pending_snapshot`) before its first file goes.

The appliance's acceptance is not its processing: with `confirm`, a receiver that can tell
(GSA: its backlog, and the feed log of its Administrative API) waits after the last file until
the appliance processed what it accepted, and reports each file's outcome. A file its feeder
failed is undone in the state: its URLs are held as `UNKNOWN`, so the next sync sends them again.

Deleting much takes the user's word: a snapshot that would delete more than
`DEFAULT_ALLOWED_DELETES` of what the state holds, or an empty snapshot, is refused before
anything is sent (`MassDelete`) unless `allow_deletes` allows it (`fastfeed.sets.guard`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from fastfeed.delivery.results import Outcome, PushSummary
from fastfeed.errors import FastfeedError, InputError, MassDelete, PushError, SettingsError
from fastfeed.progress import Progress, plural
from fastfeed.sets.build import check_out_dir, expand, write_set
from fastfeed.sets.guard import AllowDeletes, check_deletes
from fastfeed.sets.journal import JOURNAL, Journal
from fastfeed.sets.manifest import MANIFEST, ManifestEntry, read_manifest
from fastfeed.sets.snapshot import Snapshot
from fastfeed.sets.state import BATCH, FINGERPRINT_VERSION, Diff, SyncState, in_use, work_prefix
from fastfeed.sets.writer import FeedWarning, SetWriter, print_warning


@dataclass(frozen=True)
class FileCheck:
    """What the appliance did with one file it accepted."""

    #: The file's name in the set.
    file: str
    #: "processed"; "failed" (the feeder failed the file, or records of it); "unreported"
    #: (processed, but no longer in the feed log, which keeps the latest few); "unconfirmed"
    #: (not processed when the wait ended).
    outcome: str
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "outcome": self.outcome, "message": self.message}


@dataclass
class Confirmation:
    """What the appliance did with the files a sync sent, once it processed them."""

    files: list[FileCheck]
    seconds: float
    #: Why some files are unconfirmed (the wait timed out, the feed log could not be read).
    problem: str = ""

    def count(self, outcome: str) -> int:
        return sum(1 for f in self.files if f.outcome == outcome)

    @property
    def ok(self) -> bool:
        return not self.problem and not any(
            f.outcome in ("failed", "unconfirmed") for f in self.files
        )

    def describe(self) -> str:
        outcomes = ("processed", "failed", "unreported", "unconfirmed")
        counts = ", ".join(f"{self.count(o)} {o}" for o in outcomes if self.count(o))
        problem = f"; {self.problem}" if self.problem else ""
        return f"confirmed in {self.seconds:.1f} s: {counts or 'no files'}{problem}"

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "problem": self.problem,
            "seconds": round(self.seconds, 3),
            "files": [f.to_dict() for f in self.files],
        }


#: Reads what it must before the push (a feed log's entries), and returns what waits, once
#: the push is over, for the appliance to process the files it accepted, in order.
StartConfirm = Callable[[], Callable[[list[ManifestEntry], Progress | None], Confirmation]]


@dataclass(frozen=True)
class Receiver:
    """What a sync needs of a receiver: how to build a set from records and send it."""

    #: The collection kept equal to the source, as messages name it: "datasource 'docs'".
    collection: str
    #: The state's key: the appliance and the collection.
    target: str
    #: The key under which the receiver's pusher journals accepted files.
    journal_target: str
    #: Makes the receiver's writer of an incremental set into a new directory, reporting its
    #: warnings to the function given.
    writer: Callable[[Path, Callable[[FeedWarning], None]], SetWriter]
    #: Sends a set, resuming from its journal.
    push: Callable[[Path, Progress | None], PushSummary]
    #: Confirms that the appliance processed what it accepted; None where an answer is the
    #: outcome (or the receiver offers no way to tell).
    confirm: StartConfirm | None = None


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
    #: What the appliance did with the files it accepted (`confirm`).
    confirmed: Confirmation | None = None
    #: Why the sync would be refused (a dry run that would delete too much: `MassDelete`).
    refused: str = ""
    #: The version of the fingerprints the state held, when it was another than this
    #: fastfeed's: every record was sent again.
    outdated: str = ""

    @property
    def ok(self) -> bool:
        pushed = self.pushed is None or self.pushed.ok
        return pushed and (self.confirmed is None or self.confirmed.ok) and not self.refused

    def describe(self) -> str:
        d = self.diff
        counts = (
            f"{d.new:,} new, {d.changed:,} changed, {d.deleted:,} deleted, "
            f"{d.unchanged:,} unchanged"
        )
        if d.unknown:
            counts += (
                f"; {plural(d.unknown, 'URL')} of them sent again, as the appliance may or may "
                "not hold them (of a set given up, or of a file its feeder failed)"
            )
        if self.outdated:
            counts += (
                f" (the state's fingerprints were {self.outdated}, this fastfeed makes "
                f"{FINGERPRINT_VERSION}: every record is sent once again)"
            )
        if self.dry_run:
            return f"would send {counts} (dry run: nothing sent)"
        if self.pushed is None:
            return f"nothing to send ({counts})"
        sent = f"sent {counts}; {self.pushed.describe()}"
        return sent if self.confirmed is None else f"{sent}; {self.confirmed.describe()}"

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
            "maybe_held": d.maybe_held,
            "unknown": d.unknown,
            "examples": d.examples,
            "dry_run": self.dry_run,
            "resumed": self.resumed,
            "out": self.out_dir,
            "push": None if self.pushed is None else self.pushed.to_dict(),
            "confirm": None if self.confirmed is None else self.confirmed.to_dict(),
            "refused": self.refused or None,
            "outdated_fingerprints": self.outdated or None,
            "seconds": round(self.seconds, 3),
        }


def run_sync(
    inputs: Sequence[str],
    state: str | os.PathLike[str],
    receiver: Receiver,
    *,
    out_dir: str | os.PathLike[str],
    base_url: str | None = None,
    allow_deletes: AllowDeletes | None = None,
    resend_all: bool = False,
    dry_run: bool = False,
    confirm: bool = False,
    progress: Progress | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> SyncSummary:
    """Makes the receiver's collection equal to the snapshot `inputs`, sending only what
    differs from `state` (see the module's description); `confirm` waits for the appliance to
    process what it accepted, where the receiver can tell. Each warning about a record goes to
    `on_warning`, naming its line (default: printed on stderr), as does one about a set an
    interrupted sync left that cannot be read (its records are sent again)."""
    started = time.monotonic()
    state_path = Path(state)
    out = Path(out_dir)
    inputs = expand(inputs, base_url, state=state_path)
    with (
        locked(state_path),
        SyncState(state_path, receiver.target) as st,
        st.rehearsal() if dry_run else contextlib.nullcontext(),
    ):
        warn = on_warning or print_warning
        resumed = _finish_pending(st, receiver, progress, warn, dry_run=dry_run)
        # A sync killed before cleaning up left its work (a copy of standard input, maybe
        # large; a new state not yet in place) beside the state; only a sync holding the
        # state's lock may take it away.
        prefix = work_prefix(state_path)
        for stale in state_path.parent.glob(prefix + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=prefix, dir=state_path.parent))
        snapshot = Snapshot(inputs, base_url, work, skip=os.fspath(out), on_warning=on_warning)
        outdated = st.outdated or ""
        # Every record is sent: built as it is read (see the module's description).
        writer, made = None, False
        if not dry_run and (resend_all or outdated or not st.count()):
            check_out_dir(out)
            made = not out.exists()
            writer = receiver.writer(out, snapshot.warn)
            writer.fingerprint_records()
        pending = False

        def release() -> None:
            """Lets go of what reading the snapshot left: the snapshot's table, a spooled
            input, where each record's line is."""
            snapshot.close()
            st.end_snapshot()
            shutil.rmtree(work, ignore_errors=True)

        try:
            snapshot.read(st, progress, writer)
            diff = snapshot.compare(st, resend_all=resend_all)
            refused = ""
            try:
                # URLs `MAYBE_HELD` count as held: the appliance may hold every one of them.
                check_deletes(
                    diff.deleted,
                    diff.held + diff.maybe_held,
                    snapshot.records,
                    allow_deletes,
                    receiver.collection,
                )
            except MassDelete as exc:
                if not dry_run:
                    raise
                refused = str(exc)  # a dry run shows what it found, then the refusal

            def summary(
                out_dir: str | None,
                pushed: PushSummary | None,
                confirmed: Confirmation | None = None,
            ) -> SyncSummary:
                seconds = time.monotonic() - started
                return SyncSummary(
                    str(state_path),
                    diff,
                    out_dir,
                    pushed,
                    resumed,
                    dry_run,
                    seconds,
                    confirmed,
                    refused,
                    outdated,
                )

            if dry_run:
                return summary(None, None)
            if diff.to_send == 0:
                st.synced()
                return summary(None, None)
            # Before anything is sent: a confirmation that cannot start (a refused login) stops
            # the sync with the state as it was.
            finish = receiver.confirm() if confirm and receiver.confirm is not None else None
            if writer is None:
                _build_changes(st, snapshot, receiver, work, out, diff.deleted, progress)
            else:
                _end_snapshot_set(st, writer, out, receiver.journal_target, diff.deleted)
            pending = True
            release()  # the set is built: none of it is needed to push it
            pushed = _push_pending(st, out, receiver, progress, confirming=finish is not None)
            if pushed.ok:
                st.clear_pending()
            confirmed = None
            if finish is not None:
                accepted = [r.feed.entry for r in pushed.results if r.outcome is Outcome.ACCEPTED]
                confirmed = finish(accepted, progress)
                _unconfirm(st, out, confirmed)
            if pushed.ok and (confirmed is None or confirmed.ok):
                st.synced()
            return summary(os.fspath(out), pushed, confirmed)
        finally:
            if writer is not None and not pending:
                # Built and not to be sent (nothing changed, refused, failed): not kept.
                writer.abort()
                shutil.rmtree(out, ignore_errors=True)
                if not made:
                    out.mkdir(exist_ok=True)
            release()


def _build_changes(
    st: SyncState,
    snapshot: Snapshot,
    receiver: Receiver,
    work: Path,
    out: Path,
    deleted: int,
    progress: Progress | None,
) -> None:
    """Builds the set of what changed (the snapshot's second pass), recorded as pending once
    built: a sync killed while building, or whose build fails, leaves no set."""
    changes, deletes = work / "changes.jsonl", work / "deletes.jsonl"
    records = _write_changes(st, snapshot, changes, deletes, deleted)
    try:
        with st.recording_pending(out, receiver.journal_target, records):
            write_set(
                [os.fspath(changes), os.fspath(deletes)],
                out,
                functools.partial(receiver.writer, out),
                None,
                "stop",
                None,
                progress,
            )
    except InputError as exc:
        raise _as_given(exc, changes, st, snapshot) from None


def _end_snapshot_set(
    st: SyncState, writer: SetWriter, out: Path, journal: str, deleted: int
) -> None:
    """Ends a set built as the snapshot was read: the deletes after its records, then the
    manifest; then the state learns what the set carries, before any of it is sent."""
    writer.fingerprint_records(False)
    lines: list[bytes] = []
    for url in st.deleted() if deleted else ():
        lines.append(_delete_line(url))
        if len(lines) >= BATCH:
            writer.add_jsonl(b"".join(lines))
            lines.clear()
    if lines:
        writer.add_jsonl(b"".join(lines))
    writer.close()
    st.set_pending_snapshot(out, journal, deletes=bool(deleted))


def _delete_line(url: str) -> bytes:
    return orjson.dumps({"url": url, "action": "delete"}) + b"\n"


def default_out(name: str) -> Path:
    """Where a sync keeps the set it sends, by default: beside `fastfeed run`'s; a new
    directory even for two syncs in the same second."""
    base = Path("fastfeed-feeds") / f"{name}-sync-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


@contextlib.contextmanager
def locked(state: str | os.PathLike[str]) -> Iterator[None]:
    """One sync at a time on a state: two would send the same changes and commit each other's;
    and no change to a state (`fastfeed state forget`) while a sync uses it."""
    with open(f"{os.fspath(state)}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SettingsError(in_use(state)) from None
        yield


def _write_changes(
    st: SyncState, snapshot: Snapshot, changes: Path, deletes: Path, deleted: int
) -> Iterator[tuple[str, str | None]]:
    """Writes the records to send, the changed ones then the deletes, and yields each one's
    URL and fingerprint (None for a delete) in that order: the order of the feed set."""
    with changes.open("wb") as out:
        for record in st.changed():
            out.write(snapshot.line(record) + b"\n")
            yield record.url, record.fingerprint
    with deletes.open("wb") as out:
        # Listing them indexes the snapshot's URLs: not done for nothing.
        for url in st.deleted() if deleted else ():
            out.write(_delete_line(url))
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
    st: SyncState,
    feed_set: Path,
    receiver: Receiver,
    progress: Progress | None,
    *,
    confirming: bool = False,
) -> PushSummary:
    """Pushes the pending set (what its journal says was accepted is skipped) and commits the
    records of every file accepted, whatever stopped the push."""
    try:
        return receiver.push(feed_set, progress)
    finally:
        _commit(st, feed_set, receiver.journal_target, confirming)


def _records(feed_set: Path) -> Iterator[tuple[ManifestEntry, int, int]]:
    """Each file of a set with the places, in the pending set, of its first record and of the
    one after its last."""
    first = 0
    for entry in read_manifest(feed_set):
        yield entry, first, first + entry.records
        first += entry.records


def _commit(st: SyncState, feed_set: Path, target: str, confirming: bool) -> None:
    with Journal(feed_set, target) as journal:
        accepted = [
            (first, end) for entry, first, end in _records(feed_set) if journal.is_accepted(entry)
        ]
        st.commit_records(accepted, confirming=confirming)


def _unconfirm(st: SyncState, feed_set: Path, confirmed: Confirmation) -> None:
    """Undoes, in the state, the files the appliance's feeder failed."""
    failed = {f.file for f in confirmed.files if f.outcome == "failed"}
    for entry, first, end in _records(feed_set):
        if entry.file in failed:
            st.unconfirm(first, end)
    st.end_confirming()


@dataclass(frozen=True)
class Abandoned:
    """What giving up a pending set did (`abandon_pending`)."""

    #: Its records the journal says the appliance accepted: now held.
    accepted: int
    #: The URLs of its other records, now held as unknown: the next sync sends them again.
    unknown: int
    #: Why which of its files the appliance accepted is not known ("" if its journal says):
    #: none of it is taken as accepted.
    unread: str = ""
    #: An earlier fastfeed's set whose build never finished: nothing of it was sent.
    unbuilt: bool = False


def abandon_pending(st: SyncState, feed_set: Path) -> Abandoned:
    """Gives up `feed_set`, the set an interrupted sync left (`SyncState.pending_set`): commits
    the records of the files its journal says the appliance accepted (a sync killed mid-push had
    no time to), and holds the URLs of the others as unknown (`SyncState.unknown_pending`): any
    file not journalled may have arrived. But an earlier fastfeed recorded its set before
    building it, and pushed it only once built, with its manifest: its set without one was
    never sent, and is dropped (as that fastfeed did)."""
    held, unread = st.pending_count(), ""
    journal = st.pending_journal
    if journal is None and feed_set.is_dir() and not (feed_set / MANIFEST).exists():
        st.clear_pending()
        return Abandoned(0, 0, unbuilt=True)
    if journal is None:
        unread = (
            "an earlier fastfeed made it and did not record which appliance it pushed it to, "
            "so its push journal cannot say which files that one accepted"
        )
    elif not (feed_set / JOURNAL).is_file():
        # Said so, and not opened: opening makes one, and a set given up (by a dry run too) is
        # looked at, never written to.
        unread = f"it has no {JOURNAL} (gone, or its push never started)"
    else:
        try:
            _commit(st, feed_set, journal, confirming=False)
        except FastfeedError as exc:
            unread = f"its push journal cannot be read ({exc})"
    accepted = held - st.pending_count()
    return Abandoned(accepted, st.unknown_pending(), unread)


def _lost(feed_set: Path, exc: FastfeedError) -> str:
    """Why the set an interrupted sync left cannot be finished, truly for a sync's set (built
    whole before any of it is sent) and for one an earlier fastfeed named relative to the
    directory it ran in."""
    if feed_set.is_dir():
        if (feed_set / MANIFEST).exists():
            return str(exc)
        return f"its {MANIFEST} is gone (the sync wrote it before sending any file; removed since?)"
    if feed_set.is_absolute():
        return "it no longer exists"
    return (
        "an earlier fastfeed named it relative to the directory that sync ran in, and it is "
        f"not found from this one ({Path.cwd()}): that sync ran elsewhere, or it was removed"
    )


def _finish_pending(
    st: SyncState,
    receiver: Receiver,
    progress: Progress | None,
    warn: Callable[[str], None],
    *,
    dry_run: bool = False,
) -> int:
    """Sends what an interrupted sync left unaccepted, before comparing anew: its records are
    changes the appliance may not hold. Returns how many records it held. A set that cannot be
    read is given up (`abandon_pending`), so that the comparison sends its records again. A dry
    run (in `SyncState.rehearsal`) sends nothing, but gives up such a set as the sync would."""
    st.unconfirm_left()
    feed_set = st.pending_set
    if feed_set is None:
        return 0
    try:
        read_manifest(feed_set)
    except FastfeedError as exc:
        why = _lost(feed_set, exc)
        given_up = abandon_pending(st, feed_set)
        if not given_up.unbuilt:
            warn(
                f"cannot finish the set {feed_set} an interrupted sync left: {why}. Which of "
                f"its files the appliance accepted is not known, so "
                f"{plural(given_up.unknown, 'URL')} it carried are compared as unknown, and "
                "sent again (records and deletes)"
            )
        return 0
    if dry_run:
        return 0  # its records not accepted are among the changes the comparison finds
    held = st.pending_count()
    pushed = _push_pending(st, feed_set, receiver, progress)
    left = st.pending_count()
    if left:
        raise PushError(
            f"{plural(left, 'record')} of the set {feed_set}, left by an interrupted sync, were "
            "not accepted; fix what the push reports and sync again. If the set itself is what "
            f"fails (a record the source has fixed since), `fastfeed state abandon {st.path}` "
            "gives it up: the next sync compares anew, and sends again what of it the journal "
            "does not say was accepted",
            summary=pushed,
        )
    st.clear_pending()
    return held
