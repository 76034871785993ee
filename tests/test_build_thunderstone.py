"""`fastfeed build --format thunderstone`: ThunderstoneReplication data that parses strictly and
decodes to the input (bin.base64 fields included)."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest
from fastfeed import read_manifest
from fastfeed.cli import main
from fastfeed.thunderstone.writer import ThunderstoneWriter
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

DT = "{urn:schemas-microsoft-com:datatypes}dt"


def items(out: Path) -> list[dict[str, bytes]]:
    """Every item of a set, in manifest order, each field decoded (base64 where marked)."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
    decoded = []
    for entry in read_manifest(out):
        assert entry.kind == "thunderstone"
        root = etree.parse(str(out / entry.file), parser).getroot()
        assert root.tag == "ThunderstoneReplication"
        for item in root.iterfind("Item"):
            fields = {}
            for field in item:
                text = field.text or ""
                fields[field.tag] = (
                    base64.b64decode(text) if field.get(DT) == "bin.base64" else text.encode()
                )
            decoded.append(fields)
    return decoded


# Any text, control characters and U+FFFE included: those fields go base64.
text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1)
line = text.filter(lambda s: "\n" not in s and "\r" not in s)


@settings(max_examples=100, deadline=None)
@given(title=text, body=text, meta_value=line, blob=st.binary(min_size=1, max_size=500))
def test_fields_decode_to_the_input(tmp_path_factory, title, body, meta_value, blob) -> None:  # type: ignore[no-untyped-def]
    out = Path(tmp_path_factory.mktemp("ts")) / "set"
    with ThunderstoneWriter(out, "news") as w:
        w.add(
            {
                "url": "http://www.example.com/page",
                "content": body,
                "metadata": {"title": title, "x-owner": meta_value},
            }
        )
        w.add({"url": "http://www.example.com/blob", "content": blob})
    page, binary = items(out)
    assert page["Type"] == b"I"
    assert page["Title"] == title.encode()
    assert page["Body"] == body.encode()
    assert page["Meta"] == f"x-owner: {meta_value}\n".encode()
    assert page["Size"] == str(len(body.encode())).encode()
    assert binary["RawData"] == blob
    assert "Body" not in binary


def test_actions_become_item_types(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    records = [
        {
            "url": "http://www.example.com/a",
            "content": "a",
            "last_modified": "2005-10-25T11:21:07Z",
        },
        {"url": "http://www.example.com/b", "action": "update", "metadata": {"category": "News"}},
        {"url": "http://www.example.com/c", "action": "delete"},
        {"url": "http://www.example.com/dir/*", "action": "delete-pattern"},
    ]
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    out = tmp_path / "out"
    assert (
        main(
            ["build", str(src), "--format", "thunderstone", "--profile", "news", "--out", str(out)]
        )
        == 0
    )
    got = items(out)
    assert [i["Type"] for i in got] == [b"I", b"U", b"D", b"DP"]
    assert got[0]["Modified"] == b"2005-10-25 11:21:07"
    assert got[1] == {"Type": b"U", "Url": b"http://www.example.com/b", "Category": b"News"}
    assert got[3] == {"Type": b"DP", "Url": b"http://www.example.com/dir/*"}


@pytest.mark.parametrize(
    ("record", "words"),
    [
        (
            {"url": "http://www.example.com/a", "pagerank": 80},
            "in.jsonl:1: pagerank: has no counterpart",
        ),
        (
            {"url": "http://www.example.com/a", "metadata": {"title": ["a", "b"]}},
            "in.jsonl:1: metadata: 'title' fills one Thunderstone field",
        ),
        (
            {"url": "http://www.example.com/a", "metadata": {"keywords": ["a,b"]}},
            "would be split",
        ),
        ({"url": "http://www.example.com/a", "action": "delete", "content": "x"}, "only the URL"),
    ],
)
def test_what_an_item_cannot_hold_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: dict[str, object], words: str
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(orjson.dumps(record) + b"\n")
    argv = [
        "build",
        str(src),
        "--format",
        "thunderstone",
        "--profile",
        "p",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 1
    assert words in capsys.readouterr().err
    assert not (tmp_path / "o" / "manifest.jsonl").exists()


def test_gsa_feeds_refuse_thunderstone_actions_and_need_a_datasource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(orjson.dumps({"url": "http://www.example.com/a", "action": "update"}) + b"\n")
    assert main(["build", str(src), "--datasource", "d", "--out", str(tmp_path / "o")]) == 1
    assert "exists only in Thunderstone feeds" in capsys.readouterr().err
    # Missing settings are usage errors, status 2, as any missing option.
    for argv, words in [
        (["--out", str(tmp_path / "o2")], "--datasource is required"),
        (["--format", "thunderstone", "--out", str(tmp_path / "o3")], "needs --profile"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["build", str(src), *argv])
        assert exited.value.code == 2
        assert words in capsys.readouterr().err


def test_data_is_split_under_the_cap(tmp_path: Path) -> None:
    out = tmp_path / "set"
    with ThunderstoneWriter(out, "news", max_bytes=2_000) as w:
        w.add_batch(
            [{"url": f"http://www.example.com/{i}", "content": "x" * 300} for i in range(20)]
        )
    manifest = read_manifest(out)
    assert len(manifest) > 3
    assert all((out / e.file).stat().st_size <= 2_000 for e in manifest)
    assert [i["Url"] for i in items(out)] == [
        f"http://www.example.com/{i}".encode() for i in range(20)
    ]
