"""Which files a push of GSA sets takes, from command-line style arguments: whole sets, or
files of them, checked against their manifests before anything is sent, or lone feed files,
validated whole before anything is sent; and which files `fastfeed validate` checks, the same
way."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fastfeed import _core
from fastfeed._core import FEED_MAX_BYTES, Xxh3
from fastfeed.delivery.results import FeedFile
from fastfeed.errors import FastfeedError, PushError
from fastfeed.gsa.feedergate import ENDPOINTS
from fastfeed.progress import Progress, Stage, stage
from fastfeed.sets.manifest import MANIFEST, ManifestEntry, read_manifest

if TYPE_CHECKING:
    from fastfeed.sets.validate import Readable

#: What a user must know before pushing a lone file a second time.
NOT_JOURNALLED = "a lone file is not journalled: pushing it again sends it again"

#: How far into a lone file its header is looked for: the DTD puts it first, after the root.
HEAD_BYTES = 1 << 20

#: A gsafeed header, as a refusal shows it.
HEADER = (
    "<header><datasource>NAME</datasource><feedtype>full|incremental|metadata-and-url"
    "</feedtype></header>"
)


class LoneFile(FeedFile):
    """A feed file with no manifest beside it (written by another tool, or by hand): its entry
    comes from its header and its validation (see `LoneHead.validated`). Its directory is not a
    feed set's, so no journal is kept there: see `NOT_JOURNALLED`."""

    CHANGED = "differs from that of the bytes validated: it changed since it was validated"


@dataclass(frozen=True)
class LoneHead:
    """A lone file as its head shows it (`lone_head`), before it is validated whole
    (`LoneHead.validated`)."""

    path: Path
    #: "feed" (<gsafeed>) or "groups" (<xmlgroups>).
    kind: str
    #: The groupsource a groups feed is pushed with; None for a feed, which names its own.
    groupsource: str | None = None

    def validated(self, progress: Progress | None = None) -> LoneFile:
        """The lone file as a push takes it, once validated whole; refused if it is not valid.

        A feed (<gsafeed>) is pushed with the datasource and feed type of its <header>; a
        groups feed (<xmlgroups>), which names neither, with `groupsource`, as an incremental
        feed (adding groups: a full one would replace every groupsource's). The whole file is
        validated against its DTD and the protocol's rules, streaming (`progress` shows it), and
        refused at its first problem; the header it is pushed by is the one read in that pass
        (the file may have been replaced since its head was read), and the bytes validated are
        hashed, so that what is sent is checked to be those bytes (as a set's files are checked
        against their manifest's digest).
        """
        from fastfeed.sets.validate import validate_stream  # lxml: only for lone files

        path = self.path
        digest = Xxh3()
        try:
            with open(path, "rb") as f, stage(progress, "validate", path.stat().st_size) as line:
                stream = _Hashing(path, f, digest, line)
                found = validate_stream(
                    stream,
                    str(path),
                    datasource=self.groupsource,
                    feedtype="incremental" if self.kind == "groups" else None,
                    kind=self.kind,
                )
                fatal = [p for p in found.problems if p.fatal]
                if fatal:
                    more = f" (and more: fastfeed validate {path} lists them)" if fatal[1:] else ""
                    raise PushError(
                        f"{fatal[0]}{more}. The appliance would drop this file; nothing was sent",
                        refused=True,
                    )
                # What the parser left unread (after the root element) is sent too: hash it.
                while stream.read(1 << 20):
                    pass
        except OSError as exc:
            raise _unreadable(path, exc) from None
        entry = ManifestEntry(
            file=path.name,
            datasource=found.datasource,
            feedtype=found.feedtype,
            records=found.records,
            bytes=stream.size,
            digest=f"xxh3:{digest.hexdigest()}",
            kind=self.kind,
        )
        return LoneFile(path.parent, entry)


def feed_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    groupsource: str | None = None,
    progress: Progress | None = None,
) -> list[FeedFile]:
    """The files to push for command-line style arguments, in push order: those of
    `planned_files`, each lone file then validated whole (`LoneHead.validated`; `progress`
    shows it).
    """
    return [
        f if isinstance(f, FeedFile) else f.validated(progress)
        for f in planned_files(paths, groupsource=groupsource)
    ]


def planned_files(
    paths: Iterable[str | os.PathLike[str]], *, groupsource: str | None = None
) -> list[FeedFile | LoneHead]:
    """The files a push of command-line style arguments takes, in push order, checked as far as
    they can be without reading a lone file whole: a bad argument is refused before any lone
    file is validated.

    A directory means every file of its feed set; a file means that file of the set in its
    directory (found in the manifest, so that its datasource and feed type are the built ones),
    or, in a directory without a manifest, a lone file (`lone_head`: `groupsource` is that of a
    lone groups feed, refused if none is given). Sets and lone files come in argument order;
    within a set, manifest order.
    """
    if groupsource is not None and (problem := _core.datasource_problem(groupsource)):
        raise PushError(
            f"groupsource '{groupsource}': {problem} (a groupsource is named as a datasource "
            "is). Nothing was sent",
            refused=True,
        )
    # A set's directory and the names of its files given (None: all), or a lone file (None).
    selected: dict[Path, set[str] | None] = {}
    lone: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise PushError(f"{path} does not exist", refused=True)
        if path.is_dir():
            selected[path] = None
        elif _looks_like_records(path):
            raise PushError(
                f"{path} holds JSON Lines records, not a feed set: build it first "
                f"(fastfeed build {path} --datasource NAME --out DIR, then fastfeed push DIR), "
                f"or build and push at once (fastfeed run {path} --datasource NAME --host ...)",
                refused=True,
            )
        elif is_lone(path):
            selected[path] = None
            lone.add(path)
        else:
            names = selected.setdefault(path.parent, set())
            if names is not None:
                names.add(path.name)
    files: list[FeedFile | LoneHead] = []
    for directory, names in selected.items():
        if directory in lone:  # the file itself
            files.append(lone_head(directory, groupsource=groupsource))
            continue
        try:
            entries = read_manifest(directory)
        except FastfeedError as exc:
            raise PushError(str(exc), refused=True) from None
        unknown = {e.kind for e in entries} - ENDPOINTS.keys()
        if unknown == {"thunderstone"}:
            raise PushError(
                f"{directory} is a Thunderstone set: push it with fastfeed thunderstone push "
                f"{directory} --url https://HOST/texis/dowalk/recvdata.xml",
                refused=True,
            )
        if unknown:
            raise PushError(
                f"{directory}/manifest.jsonl has entries of kind {', '.join(sorted(unknown))}, "
                f"which this version cannot push (known: {', '.join(ENDPOINTS)})",
                refused=True,
            )
        if names is not None:
            missing = sorted(names - {e.file for e in entries})
            if missing:
                them = "them" if missing[1:] else "it"
                raise PushError(
                    f"{', '.join(missing)} not in {directory}/manifest.jsonl: of a feed set, "
                    "only the files it lists can be pushed. To push a feed file of your own, "
                    f"move {them} out of {directory} (a directory without a manifest) and push "
                    f"{them} as a lone file",
                    refused=True,
                )
        files.extend(FeedFile(directory, e) for e in entries if names is None or e.file in names)
    if groupsource is not None and not any(
        isinstance(f, LoneHead) and f.kind == "groups" for f in files
    ):
        raise PushError(
            f"groupsource '{groupsource}' is given, but no lone groups feed (<xmlgroups>) is, "
            "the only file it is for (a groups set names its groupsource in its manifest): "
            "leave it out. Nothing was sent",
            refused=True,
        )
    return files


def files_to_validate(
    paths: Iterable[str | os.PathLike[str]],
) -> list[tuple[Path, ManifestEntry | None]]:
    """The files `fastfeed validate` checks for command-line style arguments, in their order.

    A feed set (a directory) and a file of one are taken as `fastfeed push` takes them
    (`feed_files`: a directory without a manifest is refused), each with its manifest entry,
    whose datasource, feed type and kind the rules then follow; any other file is checked as it
    is, by its header (no entry).
    """
    given = [Path(p) for p in paths]
    listed: dict[Path, set[str]] = {}

    def in_set(path: Path) -> bool:
        if path.parent not in listed:
            try:
                listed[path.parent] = {e.file for e in read_manifest(path.parent)}
            except FastfeedError:
                listed[path.parent] = set()
        return path.name in listed[path.parent]

    of_sets = [p for p in given if p.is_dir() or in_set(p)]
    entries: dict[Path, dict[Path, ManifestEntry]] = {}
    for feed in feed_files(of_sets):
        entries.setdefault(feed.directory, {})[feed.path] = feed.entry
    files: dict[Path, ManifestEntry | None] = {}
    for path in given:
        if path.is_dir():
            files.update(entries.get(path, {}))
        else:
            files.setdefault(path, entries.get(path.parent, {}).get(path))
    return list(files.items())


def is_lone(path: Path) -> bool:
    """Whether `path` is a lone feed file: a file in a directory that holds no feed set."""
    return path.is_file() and not (path.parent / MANIFEST).exists()


def _within_the_limit(path: Path, size: int) -> None:
    """Refuses a lone file of `size` bytes, if the appliance's limit or more."""
    if size >= FEED_MAX_BYTES:
        raise PushError(
            f"{path} holds {size} bytes: the appliance takes a feed file of less than "
            f"{FEED_MAX_BYTES} bytes (1 GB). Split its records into smaller feeds; nothing "
            "was sent",
            refused=True,
        )


def lone_head(path: Path, *, groupsource: str | None = None) -> LoneHead:
    """What a lone file is, from its size and its head, refused if it cannot be pushed: one of
    the appliance's limit or more, a compressed one, one that is neither a feed with a
    <header> that names its datasource and feed type nor a groups feed (with a `groupsource`).
    """
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _unreadable(path, exc) from None
    _within_the_limit(path, size)
    if path.suffix == ".gz" or _head_bytes(path, 2) == b"\x1f\x8b":
        raise PushError(
            f"{path} is gzip-compressed: the appliance takes feed files uncompressed. Gunzip it "
            f"first (gunzip -k {path}) and push the .xml",
            refused=True,
        )
    root, header = _head(path)
    if root == "xmlgroups":
        if groupsource is None:
            raise PushError(
                f"{path} is a groups feed (<xmlgroups>), which does not name its groupsource: "
                f"push it with `fastfeed push {path} --groupsource NAME` (Python: "
                "groupsource=NAME)",
                refused=True,
            )
        return LoneHead(path, "groups", groupsource)
    if root == "gsafeed":
        fields = header or {}
        missing = [name for name in ("datasource", "feedtype") if not fields.get(name)]
        if missing:
            what = (
                "no <header>"
                if header is None
                else f"no <{'> or <'.join(missing)}> in its <header>"
            )
            raise PushError(
                f"{path} has {what}: a lone feed file gives the datasource and feed type it is "
                f"pushed with there, first in <gsafeed>: {HEADER}",
                refused=True,
            )
        return LoneHead(path, "feed")
    raise PushError(
        f"{path}: the root element is <{root}>, not <gsafeed> (a feed) or <xmlgroups> "
        "(a groups feed): not a feed file",
        refused=True,
    )


class _Hashing:
    """The file at `path`, whose bytes are hashed, counted and shown as they are read, and
    refused once they reach the appliance's limit: a file that grew since its size was taken
    (one still being written) is not read to its end first."""

    def __init__(self, path: Path, stream: Readable, digest: Xxh3, line: Stage) -> None:
        self._path = path
        self._stream = stream
        self._digest = digest
        self._line = line
        self.size = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        self._digest.update(data)
        self.size += len(data)
        self._line.update(self.size)
        _within_the_limit(self._path, self.size)
        return data


class _Head:
    """The first `HEAD_BYTES` of a file, then an end."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self.left = HEAD_BYTES

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(data)
        return data


def _head(path: Path) -> tuple[str, dict[str, str] | None]:
    """A lone file's root element and the fields of its <header> (None: it has none), read from
    the file's first `HEAD_BYTES` at most."""
    from lxml import etree

    from fastfeed.sets.validate import iterparse  # lxml: only for lone files

    root = ""
    depth = 0
    try:
        with open(path, "rb") as f:
            head = _Head(f)
            for event, elem in iterparse(head):
                if event == "end":
                    depth -= 1
                    if depth == 1 and elem.tag == "header":
                        return root, {child.tag: (child.text or "").strip() for child in elem}
                    continue
                depth += 1
                if depth == 1:
                    root = elem.tag
                    if root != "gsafeed":
                        return root, None
                elif depth == 2 and elem.tag != "header":
                    return root, None  # the header comes first, or not at all
    except etree.XMLSyntaxError as exc:
        if root and not head.left:
            raise PushError(
                f"{path} has no <header> in its first {HEAD_BYTES >> 20} MiB: a feed's header "
                f"comes first in <gsafeed>: {HEADER}",
                refused=True,
            ) from None
        raise PushError(
            f"{path}:{exc.lineno}: not well-formed XML: {exc.msg}. Nothing was sent",
            refused=True,
        ) from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    return root, None


def _unreadable(path: Path, exc: OSError) -> PushError:
    return PushError(f"{path}: cannot read it: {exc.strerror or exc}", refused=True)


def _head_bytes(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""  # the reading that follows says why


def _looks_like_records(path: Path) -> bool:
    """JSON Lines given where a feed file is expected: by its name, or a first `{`."""
    if path.suffix in (".jsonl", ".ndjson", ".json"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4096).lstrip()[:1] == b"{"
    except OSError:
        return False
