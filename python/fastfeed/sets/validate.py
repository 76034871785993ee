"""Checks feed files against the gsafeed DTD and the protocol's rules (`fastfeed validate`),
and groups feed files (root `xmlgroups`) against the groups DTD.

Shared code, not the GSA receiver's: the emulated appliance checks what it receives with it,
and the emulator imports no receiver. `fastfeed.gsa.validate` is its public face.

Files are streamed: each record (or membership) is DTD-validated as its subtree ends and then
freed, so a feed near the protocol's 1 GB limit is checked in little memory.
"""

from __future__ import annotations

import binascii
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from importlib import resources
from typing import Protocol

from lxml import etree

from fastfeed import _core
from fastfeed.sets.codec import MAX_INFLATED_BYTES, decode_base64, inflated

PUBLIC_ID = "-//Google//DTD GSA Feeds//EN"
FEEDTYPES = ("full", "incremental", "metadata-and-url")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    message: str
    #: False for a mistake the appliance tolerates (it skips an empty principal): still
    #: reported, since the feed does not do what it says, but not a reason to refuse the feed.
    fatal: bool = True
    #: True for a fatal mistake for which the appliance skips the record, not the feed (its
    #: "Skipping the record, Line number: nn"), as the emulator does.
    skips_record: bool = False

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


def _load_dtd(name: str) -> etree.DTD:
    with resources.files("fastfeed.sets").joinpath(name).open("rb") as f:
        return etree.DTD(f)


_DTD = _load_dtd("gsafeed.dtd")
_GROUPS_DTD = _load_dtd("xmlgroups.dtd")

#: Entity declarations could pull in files or expand without bound: a feed declares none.
OWN_DTD = "the document declares a DTD of its own (<!DOCTYPE ... [...]>): a feed may not"


def declares(tree: etree._ElementTree) -> bool:
    """Whether the document's DOCTYPE declares anything itself (`[...]`), or points at a DTD
    file of its own (`SYSTEM "..."`), whose entities would go unread; a DOCTYPE that only names
    a public DTD, as the gsafeed one does, declares nothing."""
    dtd = tree.docinfo.internalDTD
    if dtd is None:
        return False
    return bool(dtd.entities() or dtd.elements() or (dtd.external_id is None and dtd.system_url))


#: The root element of each kind of file, as `ManifestEntry.kind` names the kinds.
ROOTS = {"feed": "gsafeed", "groups": "xmlgroups"}
INHERITANCE_TYPES = ("child-overrides", "parent-overrides", "and-both-permit", "leaf-node")
#: Legacy ACL meta names (guide: "Legacy Metadata Format"), the principals they give, and the
#: role suffix whose entry the appliance ignores: the core's, which writes them.
LEGACY_PRINCIPALS: dict[str, tuple[str, str]] = _core.LEGACY_PRINCIPALS
LEGACY_INHERIT_FROM: str = _core.LEGACY_INHERIT_FROM
LEGACY_INHERITANCE: str = _core.LEGACY_INHERITANCE
LEGACY_IGNORED: str = _core.LEGACY_IGNORED_ROLE
#: The role suffix the appliance strips from a legacy ACL meta's content, or None.
legacy_role = _core.legacy_role
#: Every meta name that gives a record a legacy ACL.
LEGACY_ACL_NAMES = frozenset({*LEGACY_PRINCIPALS, LEGACY_INHERIT_FROM, LEGACY_INHERITANCE})
#: The guide: "A per-URL ACL can be defined either in the metadata portion of the feed, or in
#: the document itself, but not in both places."
ACL_TWICE = "a per-URL ACL both in an <acl> element and in google:acl* metadata"


def metadata_ignored(datasource: str | None, feedtype: str | None) -> bool:
    """Whether a feed pushed so takes no metadata (legacy ACLs included): the guide's table of
    feed types allows none in an incremental feed of the 'web' datasource. Assumed, as the guide
    does not say: the appliance ignores it, rather than failing the record or the feed."""
    return datasource == "web" and feedtype != "metadata-and-url"


class _Checker:
    def __init__(
        self, file: str, max_problems: int, datasource: str | None, feedtype: str | None
    ) -> None:
        self.file = file
        self.max_problems = max_problems
        self.problems: list[Problem] = []
        #: The records of a feed, or the memberships of a groups feed, checked so far.
        self.records = 0
        # The appliance goes by the datasource and feed type of the POST, not by the header.
        self.pushed_as = (datasource, feedtype)
        self.datasource = datasource
        self.feedtype = feedtype

    def report(
        self, line: int | None, message: str, *, fatal: bool = True, skips_record: bool = False
    ) -> None:
        # Capped per severity, so that tolerated problems never crowd out fatal ones, nor records
        # to skip the problems that fail a feed.
        kind = (fatal, skips_record)
        if sum((p.fatal, p.skips_record) == kind for p in self.problems) < self.max_problems:
            self.problems.append(Problem(self.file, line, message, fatal, skips_record))

    @property
    def carries_content(self) -> bool:
        return self.datasource != "web" and self.feedtype != "metadata-and-url"

    def dtd(self, elem: etree._Element, dtd: etree.DTD = _DTD) -> None:
        if not dtd.validate(elem):
            for err in dtd.error_log:
                self.report(err.line, err.message)

    def acl(self, elem: etree._Element, *, standalone: bool) -> None:
        """The guide's "Approaches to Using the acl Element": a child of <group> names its URL
        (a folder or share, not a document); a child of <record> is the record's, so no url."""
        url = elem.get("url")
        if standalone and url is None:
            self.report(elem.sourceline, "an <acl> outside a record needs a url attribute")
        elif not standalone and url is not None:
            self.report(elem.sourceline, "an <acl> inside a record cannot have a url attribute")
        elif url is not None and (problem := _core.url_problem(url)):
            self.report(elem.sourceline, f"acl url: {problem}")
        self.principals(elem)

    def principals(self, elem: etree._Element) -> None:
        for principal in elem.iter("principal"):
            if not (principal.text or "").strip():
                self.report(
                    principal.sourceline,
                    "empty principal: the appliance skips it, so it grants or denies nothing",
                    fatal=False,
                )

    def header(self, elem: etree._Element) -> None:
        self.dtd(elem)
        self.datasource = self.pushed_as[0] or (elem.findtext("datasource") or "").strip()
        self.feedtype = self.pushed_as[1] or (elem.findtext("feedtype") or "").strip()
        problem = _core.datasource_problem(self.datasource)
        if problem:
            self.report(elem.sourceline, problem)
        if self.feedtype not in FEEDTYPES:
            self.report(elem.sourceline, f"feedtype '{self.feedtype}' is not one of {FEEDTYPES}")
        elif self.datasource == "web" and self.feedtype == "full":
            self.report(elem.sourceline, "the 'web' datasource is a web feed, always incremental")

    def record(self, elem: etree._Element) -> None:
        self.records += 1
        self.dtd(elem)
        line = elem.sourceline
        url = elem.get("url", "")
        problem = _core.url_problem(url)
        if problem:
            self.report(line, f"url: {problem}")
        self.pagerank(elem)
        date = elem.get("last-modified")
        if date is not None:
            try:
                parsedate_to_datetime(date)
            except (TypeError, ValueError):
                self.report(line, f"last-modified '{date}' is not an RFC 822 date")
        contents = elem.findall("content")
        if contents and not self.carries_content:
            self.report(
                line, f"a {self.feedtype} feed of datasource '{self.datasource}' carries no content"
            )
        for content in contents:
            self.content(content)
        acl = elem.find("acl")
        if acl is not None:
            self.acl(acl, standalone=False)
        metas = elem.findall("metadata/meta")
        names = {self.meta(meta) for meta in metas}
        if acl is not None and not names.isdisjoint(LEGACY_ACL_NAMES):
            self.report(line, ACL_TWICE, skips_record=True)
        if metas and metadata_ignored(self.datasource, self.feedtype):
            self.report(
                line,
                "an incremental feed of the 'web' datasource takes no metadata: the appliance"
                " ignores it (push metadata in a metadata-and-url feed)",
                fatal=False,
            )
        delete = elem.get("action") == "delete" or elem.getparent().get("action") == "delete"
        if (
            self.feedtype == "full"
            and self.carries_content
            and metas
            and not contents
            and not delete
        ):
            self.report(line, "a full feed cannot push metadata alone: the record needs content")

    def pagerank(self, elem: etree._Element) -> None:
        """A record's or a group's PageRank (the guide: content feeds only, 68 to 100)."""
        rank = elem.get("pagerank")
        if rank is None:
            return
        if not self.carries_content:
            self.report(elem.sourceline, "pagerank applies to content feeds only")
        elif not (rank.isdigit() and 68 <= int(rank) <= 100):
            self.report(elem.sourceline, f"pagerank '{rank}' is not an integer from 68 to 100")

    def content(self, elem: etree._Element) -> None:
        encoding = elem.get("encoding")
        if encoding is None:
            return
        try:
            raw = decode_base64(elem.text or "")
        except ValueError as exc:
            self.report(elem.sourceline, f"content is not valid {encoding}: {exc}")
            return
        try:
            if encoding == "base64compressed":
                # Only whether and how far it inflates matters here: nothing is kept.
                for _ in inflated(raw, MAX_INFLATED_BYTES):
                    pass
        except ValueError as exc:
            self.report(elem.sourceline, f"base64compressed content is too large: {exc}")
        except zlib.error as exc:
            self.report(elem.sourceline, f"base64compressed content does not inflate: {exc}")

    def meta(self, elem: etree._Element) -> str | None:
        """Checks a meta; returns its name (decoded), None if it does not decode."""
        name: str = elem.get("name", "")
        content: str = elem.get("content", "")
        if elem.get("encoding") == "base64binary":
            try:
                name = decode_base64(name).decode("utf-8", "surrogateescape")
                content = decode_base64(content).decode("utf-8", "surrogateescape")
            except (binascii.Error, ValueError) as exc:
                self.report(elem.sourceline, f"meta is not valid base64: {exc}")
                return None
        if content == "":
            self.report(
                elem.sourceline,
                f"meta '{name}' has empty content, which makes the appliance reject the record",
            )
        elif suffix := legacy_role(name, content):
            self.report(
                elem.sourceline,
                f"{name} '{content}' ends in the role suffix '{suffix}', which the appliance"
                " strips (and drops the entry for =peeker): write the ACL as an <acl> element",
                fatal=False,
            )
        elif name == LEGACY_INHERITANCE and content not in INHERITANCE_TYPES:
            self.report(
                elem.sourceline,
                f"{LEGACY_INHERITANCE} '{content}' is not one of {INHERITANCE_TYPES}",
            )
        return name


class Readable(Protocol):
    """A binary file, or anything read like one."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Validation:
    """What `validate_stream` found: the problems, how many records (feed) or memberships
    (groups feed) were checked, and the datasource and feed type the rules followed: those
    given, else those of the header read in the same pass ("" where it has none)."""

    problems: list[Problem]
    records: int
    datasource: str
    feedtype: str


def validate_file(
    path: str | os.PathLike[str],
    *,
    datasource: str | None = None,
    feedtype: str | None = None,
    max_problems: int = 100,
    kind: str | None = None,
    on_read: Callable[[int], None] | None = None,
) -> list[Problem]:
    """Returns the problems of one feed file (empty when it is valid), at most `max_problems`
    fatal ones and as many that the appliance tolerates (`Problem.fatal`).

    `datasource` and `feedtype` are those the file is (or will be) pushed with; the rules follow
    them rather than the header, as the appliance does. By default the header's are used.
    `kind` ("feed" or "groups") is what the file must be; by default its root element decides:
    <gsafeed> for a feed, <xmlgroups> for a groups feed. `on_read` is given the size of each
    block of the file as it is read (for progress).
    """
    file = os.fspath(path)
    try:
        stream = open(file, "rb")  # noqa: SIM115 - closed below, whichever way the check ends
    except OSError as exc:
        return [Problem(file, None, f"cannot read: {exc.strerror}")]
    with stream:
        source = stream if on_read is None else _Counted(stream, on_read)
        found = validate_stream(
            source,
            file,
            datasource=datasource,
            feedtype=feedtype,
            max_problems=max_problems,
            kind=kind,
        )
        return found.problems


def validate_stream(
    stream: Readable,
    name: str,
    *,
    datasource: str | None = None,
    feedtype: str | None = None,
    max_problems: int = 100,
    kind: str | None = None,
) -> Validation:
    """`validate_file` of what `stream` holds (`name` is the file its problems name), with the
    count of records it checked and the header's fields: for a caller that sees the bytes as
    they are read (`fastfeed push` of a lone file hashes them, so that it sends the very bytes
    validated, by the header validated). It may stop reading at a problem that ends the check
    (a wrong root element)."""
    checker = _Checker(name, max_problems, datasource, feedtype)
    problems = _validate(checker, stream, kind)
    return Validation(problems, checker.records, checker.datasource or "", checker.feedtype or "")


class _Counted:
    """A file that tells how much of it was read."""

    def __init__(self, stream: Readable, on_read: Callable[[int], None]) -> None:
        self._stream = stream
        self._on_read = on_read

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._on_read(len(data))
        return data


def iterparse(
    source: str | Readable, tag: str | tuple[str, ...] | None = None
) -> etree.iterparse[tuple[str, etree._Element]]:
    """The start and end events of the `tag` elements (None: all) of XML fastfeed did not write,
    parsed as all such XML is: no entity expanded, nothing fetched, no DTD loaded (entity bombs,
    external entities), and the deep trees and long texts of a large feed allowed."""
    return etree.iterparse(
        source,
        events=("start", "end"),
        tag=tag,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=True,
    )


def _validate(checker: _Checker, stream: Readable, kind: str | None) -> list[Problem]:
    expected = ROOTS.values() if kind is None else [ROOTS[kind]]
    context = iterparse(stream)
    depth = 0
    seen_header = False
    groups = 0
    root: etree._Element | None = None
    try:
        for event, elem in context:
            if event == "start":
                depth += 1
                if depth == 1:
                    root = elem
                    if declares(elem.getroottree()):
                        checker.report(elem.sourceline, OWN_DTD)
                        return checker.problems
                    if elem.tag not in expected:
                        roots = " or ".join(f"<{name}>" for name in expected)
                        checker.report(
                            elem.sourceline, f"the root element is <{elem.tag}>, not {roots}"
                        )
                        return checker.problems
                    if elem.tag == "xmlgroups":
                        return _validate_groups(context, checker)
                continue
            depth -= 1
            if depth != 1 and not (depth == 2 and elem.tag in ("record", "acl")):
                continue
            if elem.tag == "header":
                if seen_header or groups:
                    checker.report(elem.sourceline, "<header> must come once, first")
                seen_header = True
                checker.header(elem)
            elif elem.tag == "group":
                if not seen_header:
                    checker.report(elem.sourceline, "<group> before <header>")
                groups += 1
                checker.pagerank(elem)
                if elem.get("action") not in (None, "add", "delete"):
                    checker.report(
                        elem.sourceline, f"group action '{elem.get('action')}' is not add or delete"
                    )
            elif elem.tag == "record":
                checker.record(elem)
            elif elem.tag == "acl":
                checker.dtd(elem)
                checker.acl(elem, standalone=True)
            else:
                checker.report(elem.sourceline, f"<{elem.tag}> is not allowed here")
            # Free what has been checked; keep the element itself, which iterparse still holds.
            elem.clear(keep_tail=False)
            if depth == 2:
                parent = elem.getparent()
                while elem.getprevious() is not None:
                    del parent[0]
    except etree.XMLSyntaxError as exc:
        checker.report(exc.lineno, f"not well-formed XML: {exc.msg}")
        return checker.problems
    except OSError as exc:
        checker.report(None, f"cannot read: {exc}")
        return checker.problems
    if root is not None:
        info = root.getroottree().docinfo
        if info.public_id != PUBLIC_ID or info.root_name != "gsafeed":
            checker.report(1, f'the DOCTYPE must be <!DOCTYPE gsafeed PUBLIC "{PUBLIC_ID}" "">')
        if not seen_header:
            checker.report(None, "the feed has no <header>")
        if groups == 0:
            checker.report(None, "the feed has no <group> (the DTD requires at least one)")
    return checker.problems


def _validate_groups(
    context: etree.iterparse[tuple[str, etree._Element]], checker: _Checker
) -> list[Problem]:
    """The rest of a groups feed, its <xmlgroups> start already read: each <membership> is
    checked against the groups DTD as it ends, then freed."""
    depth = 1
    try:
        for event, elem in context:
            if event == "start":
                depth += 1
                continue
            depth -= 1
            if depth == 0:  # </xmlgroups>
                if not checker.records:
                    message = "<xmlgroups> holds no <membership> (groups DTD: membership+)"
                    checker.report(elem.sourceline, message)
                continue
            if depth != 1:
                continue
            if elem.tag == "membership":
                checker.records += 1
                checker.dtd(elem, _GROUPS_DTD)
                checker.principals(elem)
            else:
                checker.report(elem.sourceline, f"<{elem.tag}> is not allowed in <xmlgroups>")
            elem.clear(keep_tail=False)
            parent = elem.getparent()
            while parent is not None and elem.getprevious() is not None:
                del parent[0]
    except etree.XMLSyntaxError as exc:
        checker.report(exc.lineno, f"not well-formed XML: {exc.msg}")
    except OSError as exc:
        checker.report(None, f"cannot read: {exc}")
    return checker.problems
