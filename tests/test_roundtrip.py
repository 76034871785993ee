"""What a receiver decodes equals what the user gave, for any input (hypothesis)."""

from __future__ import annotations

import base64
from pathlib import Path

from fastfeed import FeedWriter
from fastfeed.validate import validate_file
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
content = st.one_of(
    st.none(),
    text.map(lambda t: ("content", t)),
    st.binary(max_size=2000).map(lambda b: ("content", b)),
    st.binary(max_size=2000).map(lambda b: ("content_base64", base64.b64encode(b).decode())),
)


def xml_char(c: str) -> bool:
    return c in "\t\n\r" or (c >= " " and c not in "\ufffe\uffff")


# URLs cannot fall back to base64, so they hold only what XML can carry (tabs and CRs included).
safe_attr = text.map(lambda s: "".join(filter(xml_char, s)) or "x")


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, object]]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        rec: dict[str, object] = {"url": f"http://host.example.com/{i}/" + draw(safe_attr)}
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
