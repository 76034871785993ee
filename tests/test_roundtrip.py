"""What a receiver decodes equals what the user gave, for any input (hypothesis)."""

from __future__ import annotations

import base64
import json
import unicodedata
from pathlib import Path

import fastfeed
from fastfeed import FeedWriter
from fastfeed.gsa.validate import validate_file
from feeds import decode_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Text weighted towards what breaks XML writers, plus anything Unicode can hold except lone
# surrogates (a Python str may hold them, but UTF-8 cannot: see test_build for that refusal).
nasty = st.sampled_from(
    ["]]>", "&<>\"'", "\r\n", "\r", "\t", "\n", "\x00\x01\x1f", "\ufffe\uffff", "😀𝄞", " "]
)
text = st.lists(
    st.one_of(nasty, st.text(st.characters(blacklist_categories=["Cs"]))), max_size=6
).map("".join)
nonempty = text.filter(bool)
metadata = st.dictionaries(
    nonempty, st.one_of(nonempty, st.lists(nonempty, min_size=1, max_size=3)), max_size=4
)
# Clean prose beside markup makes some segments escaped and others sections; characters of 2,
# 3 and 4 bytes then fall across the edges where one turns into the other.
markup_piece = st.sampled_from(
    ["<b>", "</b>", "&", "]]>", "]]", "]", ">", "\r", "\r\n", "\n", "x", "日本語", "  "]
    + ["é", "😀", "plain words of prose, plain words of prose "]
)


def markup(repeats: int) -> st.SearchStrategy[str]:
    """Text dense with markup, which goes in CDATA sections, now and then with what a section
    must write apart (`]]>`, CR): a run of pieces repeated up to `repeats` times (a few hundred
    cross the 4 KB segments of its writing at any offset), then hostile ones."""
    return st.tuples(
        st.lists(markup_piece, max_size=30).map("".join),
        st.integers(1, repeats),
        st.lists(st.one_of(markup_piece, nasty), max_size=8).map("".join),
    ).map(lambda t: t[0] * t[1] + t[2])


content = st.one_of(
    st.none(),
    text.map(lambda t: ("content", t)),
    # Short enough for the feeds of 3,000 bytes the tests cut.
    markup(20).map(lambda t: ("content", t)),
    st.binary(max_size=2000).map(lambda b: ("content", b)),
    st.binary(max_size=2000).map(lambda b: ("content_base64", base64.b64encode(b).decode())),
)


def xml_char(c: str) -> bool:
    return c in "\t\n\r" or (c >= " " and c not in "\ufffe\uffff")


# URLs cannot fall back to base64, so they hold only what XML can carry (tabs and CRs included);
# a record's own URL holds no control character at all (refused: no URL has one).
safe_attr = text.map(lambda s: "".join(filter(xml_char, s)) or "x")
url_path = text.map(
    lambda s: "".join(c for c in s if xml_char(c) and unicodedata.category(c) != "Cc") or "x"
)


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, object]]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        rec: dict[str, object] = {"url": f"http://host.example.com/{i}/" + draw(url_path)}
        if draw(st.booleans()):
            rec["displayurl"] = draw(safe_attr)
        rec["metadata"] = draw(metadata)
        c = draw(content)
        if c is not None:
            rec[c[0]] = c[1]
        out.append(rec)
    return out


def expected_metadata(meta: dict[str, str | list[str]]) -> list[tuple[bytes, bytes]]:
    pairs = [
        (k.encode(), v.encode())
        for k, vs in meta.items()
        for v in ([vs] if isinstance(vs, str) else vs)
    ]
    return sorted(pairs, key=lambda p: p[0])


def expected_content(rec: dict[str, object]) -> bytes | None:
    if "content_base64" in rec:
        return base64.b64decode(rec["content_base64"])  # type: ignore[arg-type]
    c = rec.get("content")
    return c.encode() if isinstance(c, str) else c  # type: ignore[return-value]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=records(), compress=st.sampled_from(["auto", "always", "never"]))
def test_every_character_and_byte_round_trips(tmp_path_factory, batch, compress) -> None:  # type: ignore[no-untyped-def]
    out = Path(tmp_path_factory.mktemp("feeds"))
    with FeedWriter(out, "ds", "incremental", max_bytes=3000, compress=compress) as w:
        w.add_batch(batch)
    for entry in w.manifest:
        assert validate_file(out / entry.file) == []
    fed = decode_set(out)
    assert [f.url for f in fed] == [r["url"] for r in batch]
    for f, rec in zip(fed, batch, strict=True):
        assert f.attrs.get("displayurl") == rec.get("displayurl")
        assert f.metadata == expected_metadata(rec["metadata"])  # type: ignore[arg-type]
        assert f.content == expected_content(rec)


def test_text_dense_with_markup_goes_in_cdata_sections_and_shrinks(tmp_path: Path) -> None:
    """A section carries markup as it is; `]]>` is split across two, and a CR goes between two
    as `&#13;` (a parser reads a raw CR as LF, in a section too)."""
    words = "<b>content</b> & naïve " * 300
    recs = [
        {"url": "http://h.example.com/dense", "content": words + "]]>\r\n" + words},
        {"url": "http://h.example.com/plain", "content": "no markup but one & in it"},
    ]
    with FeedWriter(tmp_path, "ds", compress="never") as w:
        w.add_batch(recs)
    feed = tmp_path / w.manifest[0].file
    assert validate_file(feed) == []
    xml = feed.read_bytes()
    assert b"<![CDATA[<b>content</b> & " in xml
    assert b"]]]]><![CDATA[>]]>&#13;<![CDATA[\n" in xml
    assert b"<content>no markup but one &amp; in it</content>" in xml
    escapes = {"<": 3, ">": 3, "&": 4, "\r": 4}
    escaped = sum(
        len(r["content"].encode()) + sum(n * r["content"].count(c) for c, n in escapes.items())
        for r in recs
    )
    # Smaller than the escaped contents alone, the feed's own markup included.
    assert len(xml) < escaped
    assert [f.content for f in decode_set(tmp_path)] == [r["content"].encode() for r in recs]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(contents=st.lists(markup(600), min_size=1, max_size=4))
def test_markup_end_markers_and_crs_reach_the_index_as_given(
    tmp_path_factory, emulator, push_settings, contents
) -> None:  # type: ignore[no-untyped-def]
    """Content in CDATA sections and escaped text, mixed, through a push to the emulator (lxml)."""
    from fastfeed.gsa.push import push

    out = Path(tmp_path_factory.mktemp("cdata"))
    recs = [{"url": f"http://h.example.com/{i}", "content": c} for i, c in enumerate(contents)]
    with FeedWriter(out, "ds", "full", compress="never") as w:
        w.add_batch(recs)
    for entry in w.manifest:
        assert validate_file(out / entry.file) == []
    assert push(out, push_settings(emulator)).ok
    emulator.wait_idle()
    documents = emulator.documents("ds")
    assert {url: d.content for url, d in documents.items()} == {
        r["url"]: r["content"].encode() for r in recs
    }


long_text = st.tuples(st.integers(0, 600), text).map(lambda t: "p" * t[0] + t[1])


@st.composite
def json_lines_records(draw: st.DrawFn) -> list[dict[str, object]]:
    """Records as JSON Lines carry them: long contents too, which the core reads apart from the
    rest of the line (escapes included)."""
    out = []
    for i in range(draw(st.integers(1, 6))):
        rec: dict[str, object] = {"url": f"http://host.example.com/{i}/" + draw(url_path)}
        rec["metadata"] = draw(metadata)
        kind = draw(st.sampled_from(["content", "content_base64", None]))
        if kind == "content":
            rec["content"] = draw(long_text)
        elif kind == "content_base64":
            rec["content_base64"] = base64.b64encode(draw(st.binary(max_size=900))).decode()
        out.append(rec)
    return out


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=json_lines_records(), ascii_only=st.booleans())
def test_every_character_round_trips_through_json_lines(
    tmp_path_factory, batch, ascii_only
) -> None:  # type: ignore[no-untyped-def]
    from fastfeed.gsa.build import build

    work = Path(tmp_path_factory.mktemp("jsonl"))
    src = work / "in.jsonl"
    src.write_text(
        "".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in batch), encoding="utf-8"
    )
    build([str(src)], work / "out", "ds", max_bytes=3000)
    fed = decode_set(work / "out")
    assert [f.url for f in fed] == [r["url"] for r in batch]
    for f, rec in zip(fed, batch, strict=True):
        assert f.metadata == expected_metadata(rec["metadata"])  # type: ignore[arg-type]
        assert f.content == expected_content(rec)


# Principal names: anything XML carries, without the edge white space the appliance strips.
principal_name = text.map(lambda s: "".join(filter(xml_char, s)).strip() or "x")
principals = st.lists(
    st.fixed_dictionaries(
        {
            "name": principal_name,
            "scope": st.sampled_from(["user", "group"]),
            "access": st.sampled_from(["permit", "deny"]),
        },
        optional={"namespace": principal_name, "case_sensitive": st.booleans()},
    ),
    # At least one: the groups DTD has no group without members.
    min_size=1,
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(principals=principals, group_name=principal_name)
def test_principal_names_round_trip_in_acls_and_groups_feeds(
    tmp_path_factory, principals, group_name
) -> None:  # type: ignore[no-untyped-def]
    from fastfeed.gsa.groups import GroupsWriter
    from lxml import etree

    out = Path(tmp_path_factory.mktemp("acl"))
    acl = {"principals": principals, "inheritance_type": "and-both-permit"}
    with FeedWriter(out / "feed", "ds") as w:
        w.add({"url": "http://h.example.com/doc", "content": "x", "acl": acl})
        w.add({"kind": "acl", "url": "http://h.example.com/dir/", "acl": acl})
    feed = out / "feed" / w.manifest[0].file
    assert validate_file(feed) == []
    root = etree.parse(str(feed)).getroot()
    for element in (root.find("group/record/acl"), root.find("group/acl")):
        assert element.get("inheritance-type") == "and-both-permit"
        got = [
            {k: v for k, v in p.attrib.items()} | {"name": p.text or ""}
            for p in element.iterfind("principal")
        ]
        want = []
        for p in principals:
            attrs = {"scope": p["scope"], "access": p["access"], "name": p["name"]}
            if "namespace" in p:
                attrs["namespace"] = p["namespace"]
            if "case_sensitive" in p:
                sensitive = "sensitive" if p["case_sensitive"] else "insensitive"
                attrs["case-sensitivity-type"] = f"everything-case-{sensitive}"
            want.append(attrs)
        assert got == want
    assert root.find("group/acl").get("url") == "http://h.example.com/dir/"

    members = [{k: v for k, v in p.items() if k != "access"} for p in principals]
    with GroupsWriter(out / "groups", "ldap") as g:
        g.add({"group": group_name, "members": members})
    groups = etree.parse(str(out / "groups" / g.manifest[0].file))
    dtd = etree.DTD(str(Path(fastfeed.__file__).parent / "sets" / "xmlgroups.dtd"))
    assert dtd.validate(groups), dtd.error_log
    membership = groups.getroot().find("membership")
    assert membership.find("principal").text == group_name
    assert [p.text for p in membership.iterfind("members/principal")] == [
        p["name"] for p in principals
    ]
    assert [p.get("scope") for p in membership.iterfind("members/principal")] == [
        p["scope"].upper() for p in principals
    ]
