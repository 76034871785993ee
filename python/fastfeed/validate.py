"""Checks feed files against the gsafeed DTD and the protocol's rules (`fastfeed validate`).

Files are streamed: each record is DTD-validated as its subtree ends and then freed, so a feed
near the protocol's 1 GB limit is checked in little memory.
"""

from __future__ import annotations

import base64
import binascii
import os
import zlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from importlib import resources

from lxml import etree

from fastfeed import _core

PUBLIC_ID = "-//Google//DTD GSA Feeds//EN"
FEEDTYPES = ("full", "incremental", "metadata-and-url")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


def _load_dtd() -> etree.DTD:
    with resources.files("fastfeed").joinpath("gsafeed.dtd").open("rb") as f:
        return etree.DTD(f)


_DTD = _load_dtd()


def _b64decode(text: str) -> bytes:
    """Strict alphabet, but padding optional: the guide's own examples leave it out."""
    compact = "".join(text.split())
    return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)


class _Checker:
    def __init__(
        self, file: str, max_problems: int, datasource: str | None, feedtype: str | None
    ) -> None:
        self.file = file
        self.max_problems = max_problems
        self.problems: list[Problem] = []
        # The appliance goes by the datasource and feed type of the POST, not by the header.
        self.pushed_as = (datasource, feedtype)
        self.datasource = datasource
        self.feedtype = feedtype

    def report(self, line: int | None, message: str) -> None:
        if len(self.problems) < self.max_problems:
            self.problems.append(Problem(self.file, line, message))

    @property
    def carries_content(self) -> bool:
        return self.datasource != "web" and self.feedtype != "metadata-and-url"

    def dtd(self, elem: etree._Element) -> None:
        if not _DTD.validate(elem):
            for err in _DTD.error_log:
                self.report(err.line, err.message)

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
        self.dtd(elem)
        line = elem.sourceline
        url = elem.get("url", "")
        problem = _core.url_problem(url)
        if problem:
            self.report(line, f"url: {problem}")
        rank = elem.get("pagerank")
        if rank is not None:
            if not self.carries_content:
                self.report(line, "pagerank applies to content feeds only")
            elif not (rank.isdigit() and 68 <= int(rank) <= 100):
                self.report(line, f"pagerank '{rank}' is not an integer from 68 to 100")
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
        metas = elem.findall("metadata/meta")
        for meta in metas:
            self.meta(meta)
        delete = elem.get("action") == "delete" or elem.getparent().get("action") == "delete"
        if (
            self.feedtype == "full"
            and self.carries_content
            and metas
            and not contents
            and not delete
        ):
            self.report(line, "a full feed cannot push metadata alone: the record needs content")

    def content(self, elem: etree._Element) -> None:
        encoding = elem.get("encoding")
        if encoding is None:
            return
        try:
            raw = _b64decode(elem.text or "")
            if encoding == "base64compressed":
                zlib.decompress(raw)
        except (binascii.Error, ValueError) as exc:
            self.report(elem.sourceline, f"content is not valid {encoding}: {exc}")
        except zlib.error as exc:
            self.report(elem.sourceline, f"base64compressed content does not inflate: {exc}")

    def meta(self, elem: etree._Element) -> None:
        name, content = elem.get("name", ""), elem.get("content", "")
        if elem.get("encoding") == "base64binary":
            try:
                name = _b64decode(name).decode("utf-8", "surrogateescape")
                content = _b64decode(content).decode("utf-8", "surrogateescape")
            except (binascii.Error, ValueError) as exc:
                self.report(elem.sourceline, f"meta is not valid base64: {exc}")
                return
        if content == "":
            self.report(
                elem.sourceline,
                f"meta '{name}' has empty content, which makes the appliance reject the record",
            )


def validate_file(
    path: str | os.PathLike[str],
    *,
    datasource: str | None = None,
    feedtype: str | None = None,
    max_problems: int = 100,
) -> list[Problem]:
    """Returns the problems of one feed file (empty when it is valid), at most `max_problems`.

    `datasource` and `feedtype` are those the file is (or will be) pushed with; the rules follow
    them rather than the header, as the appliance does. By default the header's are used.
    """
    file = os.fspath(path)
    checker = _Checker(file, max_problems, datasource, feedtype)
    context = etree.iterparse(
        file,
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=True,
    )
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
                    if elem.tag != "gsafeed":
                        checker.report(
                            elem.sourceline, f"the root element is <{elem.tag}>, not <gsafeed>"
                        )
                        return checker.problems
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
                if elem.get("action") not in (None, "add", "delete"):
                    checker.report(
                        elem.sourceline, f"group action '{elem.get('action')}' is not add or delete"
                    )
            elif elem.tag == "record":
                checker.record(elem)
            elif elem.tag == "acl":
                checker.dtd(elem)
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
