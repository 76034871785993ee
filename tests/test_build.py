"""`fastfeed build` and the FeedWriter API: rules, errors, splitting, ordering, inputs."""

from __future__ import annotations

import base64
import os
import pickle
import random
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import BinaryIO

import orjson
import pytest
from fastfeed import FeedError, FeedWarning, FeedWriter, RecordError, read_manifest
from fastfeed._core import Blake3, Xxh3
from fastfeed.cli import main
from fastfeed.errors import EmptyFullFeed, FastfeedError
from fastfeed.gsa.validate import validate_file
from fastfeed.progress import stage
from fastfeed.sets.build import _Builder
from fastfeed.sets.manifest import ManifestEntry
from feeds import decode_file, decode_set


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def doc(i: int, **extra: object) -> dict[str, object]:
    return {"url": f"http://docs.example.com/{i}", "content": f"document {i}", **extra}


def build(tmp_path: Path, records: list[object], *args: str, out: str = "out") -> int:
    src = write_jsonl(tmp_path / "in.jsonl", records)
    return main(["build", str(src), "--datasource", "docs", "--out", str(tmp_path / out), *args])


@pytest.mark.parametrize(
    ("record", "feedtype", "field", "words"),
    [
        ({"content": "x"}, "incremental", "url", "is required"),
        ({"url": "http://localhost/a"}, "incremental", "url", "not fully qualified"),
        ({"url": "docs.example.com/a"}, "incremental", "url", "not an absolute URL"),
        (doc(1, action="remove"), "incremental", "action", "add or delete"),
        (doc(1, authmethod="kerberos"), "incremental", "authmethod", "httpsso"),
        (doc(1, pagerank=101), "incremental", "pagerank", "68 to 100"),
        (doc(1, pagerank=True), "incremental", "pagerank", "integer"),
        (
            {"url": "http://docs.example.com/1", "pagerank": 80},
            "metadata-and-url",
            "pagerank",
            "content feeds only",
        ),
        (doc(1), "metadata-and-url", "content", "metadata-and-url feed"),
        (
            {"url": "http://docs.example.com/1", "metadata": {"a": "b"}},
            "full",
            "metadata",
            "metadata alone",
        ),
        (doc(1, metadata={"tags": ""}), "incremental", "metadata", "empty value"),
        (doc(1, content_base64="aGk="), "incremental", "content", "at most one"),
        (
            {"url": "http://docs.example.com/1", "content_base64": "a$b"},
            "incremental",
            "content_base64",
            "not valid base64",
        ),
        (
            {"url": "http://docs.example.com/1", "content_path": "/no/such/file"},
            "incremental",
            "content_path",
            "cannot read",
        ),
        (doc(1, last_modified="yesterday"), "incremental", "last_modified", "not a date"),
        (doc(1, last_modified=-1e12), "incremental", "last_modified", "years 1 to 9999"),
        (
            doc(1, last_modified="Sat, 31 Dec 2016 23:59:60 GMT"),
            "incremental",
            "last_modified",
            "2016-12-31 23:59:60 UTC is a leap second",
        ),
        (
            doc(
                1,
                acl={"principals": [{"name": "ann", "scope": "user", "access": "permit"}]},
                metadata={"google:aclusers": "joe"},
            ),
            "incremental",
            "metadata",
            "'google:aclusers' gives the record a legacy ACL and acl gives it one too",
        ),
        (doc(1, lock="yes"), "incremental", "lock", "true or false"),
        (doc(1, action="delete"), "incremental", "content", "delete record carries no content"),
        ({"url": "http://docs.example.com/1\x01"}, "incremental", "url", "U+0001"),
        (doc(1, colour="red"), "incremental", None, "unknown field 'colour'"),
    ],
)
def test_a_refused_record_names_its_line_and_field_and_no_manifest_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record: dict[str, object],
    feedtype: str,
    field: str | None,
    words: str,
) -> None:
    status = (
        build(tmp_path, [doc(0), doc(1), record, doc(3)], "--feedtype", feedtype)
        if feedtype != "metadata-and-url"
        else build(tmp_path, [{"url": "http://docs.example.com/0"}, record], "--feedtype", feedtype)
    )
    err = capsys.readouterr().err
    assert status == 1
    line = 3 if feedtype != "metadata-and-url" else 2
    location = f"in.jsonl:{line}: " + (f"{field}: " if field else "")
    assert location in err and words in err, err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_bad_json_and_bad_utf8_name_their_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(
        orjson.dumps(doc(0)) + b"\n\n" + b'{"url": "http://a.example.com/\xff"}\n' + b"[1]\n"
    )
    status = main(
        ["build", str(src), "--datasource", "d", "--out", str(tmp_path / "o"), "--on-error", "skip"]
    )
    err = capsys.readouterr().err
    assert status == 1
    log = (tmp_path / "o" / "rejected.log").read_text()
    assert "in.jsonl:3: url: not valid UTF-8" in log
    assert "in.jsonl:4: expected a JSON object" in log
    assert "2 records were refused" in err
    # The refused lines are kept byte for byte, to be fixed and fed again.
    assert (
        tmp_path / "o" / "rejected.jsonl"
    ).read_bytes() == b'{"url": "http://a.example.com/\xff"}\n[1]\n'
    assert [f.url for f in decode_set(tmp_path / "o")] == ["http://docs.example.com/0"]


def test_skip_mode_keeps_every_good_record_in_order(tmp_path: Path) -> None:
    records = [doc(i) if i % 3 else doc(i, pagerank=1) for i in range(30)]
    assert build(tmp_path, records, "--on-error", "skip") == 1
    assert [f.url for f in decode_set(tmp_path / "out")] == [
        r["url"] for r in records if "pagerank" not in r
    ]
    assert len((tmp_path / "out" / "rejected.jsonl").read_bytes().splitlines()) == 10


def test_skip_mode_takes_a_chunk_of_many_refused_lines_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5,000 of 20,000 lines name missing files: each chunk is taken by one call of the core,
    not one more per refused line (each re-planned the rest of the chunk: 9-41 s a chunk), and
    the feed and the rejected files are those of the lines taken one by one."""
    from fastfeed.sets.writer import SetWriter

    files = []
    for i in range(20):
        files.append(tmp_path / f"{i}.txt")
        files[-1].write_text(f"document {i} " * (i + 1))
    lines = [
        orjson.dumps(
            {
                "url": f"http://files.example.com/{i}",
                "content_path": str(
                    tmp_path / "gone" / f"{i}.txt" if i % 4 == 3 else files[i % 20]
                ),
            }
        )
        for i in range(20_000)
    ]
    bad = [i for i in range(len(lines)) if i % 4 == 3]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(line + b"\n" for line in lines))
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"".join(line + b"\n" for i, line in enumerate(lines) if i % 4 != 3))
    calls = {"add_jsonl": 0, "wait_jsonl": 0}
    for name in calls:

        def counted(self: SetWriter, *args: object, _name: str = name) -> int:
            calls[_name] += 1
            return getattr(SetWriter, f"_{_name}")(self, *args)  # type: ignore[no-any-return]

        monkeypatch.setattr(SetWriter, f"_{name}", getattr(SetWriter, name), raising=False)
        monkeypatch.setattr(SetWriter, name, counted)
    argv = ["build", "--datasource", "d", "--feedtype", "full", "--on-error", "skip"]
    assert main([*argv, str(src), "--out", str(tmp_path / "o")]) == 1
    assert calls["add_jsonl"] == 0 and calls["wait_jsonl"] <= len(src.read_bytes()) // 65536 + 1
    assert main([*argv, str(good), "--out", str(tmp_path / "g")]) == 0
    assert (tmp_path / "o" / "d-000001.xml").read_bytes() == (
        tmp_path / "g" / "d-000001.xml"
    ).read_bytes()
    assert (tmp_path / "o" / "rejected.jsonl").read_bytes() == b"".join(
        lines[i] + b"\n" for i in bad
    )
    log = (tmp_path / "o" / "rejected.log").read_text().splitlines()
    assert len(log) == len(bad)
    for i, entry in zip(bad, log, strict=True):
        gone = tmp_path / "gone" / f"{i}.txt"
        assert entry.startswith(f"{src}:{i + 1}: content_path: cannot read {gone}: "), entry


@pytest.mark.parametrize("chunk_bytes", [64, 4 * 1024 * 1024])
def test_skip_mode_sets_aside_bad_lines_of_every_kind_first_and_last_in_a_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    """Invalid JSON, a bad URL, a missing file, a line that is no object: each set aside with
    its line and reason, first and last of the input (and, with chunks smaller
    than a line, of every chunk); the good lines are written in order."""
    import fastfeed.sets.inputs

    monkeypatch.setattr(fastfeed.sets.inputs, "CHUNK_BYTES", chunk_bytes)
    bad = {
        0: b'{"url": "http://docs.example.com/0", ',
        3: b'{"url": "docs.example.com/3", "content": "x"}',
        4: orjson.dumps({"url": "http://docs.example.com/4", "content_path": "/no/such/file"}),
        7: b"[7]",
        9: b'{"url": "http://localhost/9", "content": "x"}',
    }
    lines = [bad.get(i, orjson.dumps(doc(i))) for i in range(10)]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines))  # the last line without its newline
    argv = ["build", str(src), "--datasource", "d", "--out", str(tmp_path / "o")]
    assert main([*argv, "--on-error", "skip"]) == 1
    assert [f.url for f in decode_set(tmp_path / "o")] == [
        f"http://docs.example.com/{i}" for i in range(10) if i not in bad
    ]
    assert (tmp_path / "o" / "rejected.jsonl").read_bytes() == b"".join(
        line + b"\n" for i, line in bad.items()
    )
    log = (tmp_path / "o" / "rejected.log").read_text().splitlines()
    assert [entry.split(": ")[0] for entry in log] == [f"{src}:{i + 1}" for i in bad]
    assert "is not an absolute URL" in log[1] and "content_path: cannot read" in log[2]
    assert "url: host 'localhost' is not fully qualified" in log[4]


def test_a_writer_skipping_refused_lines_reports_each_with_its_index_in_order(
    tmp_path: Path,
) -> None:
    lines = [orjson.dumps(doc(i)) for i in range(6)]
    lines[0], lines[2], lines[5] = b"{", b'{"url": "x"}', orjson.dumps(doc(5, pagerank=1))
    with FeedWriter(tmp_path / "o", "d") as w:
        w.skip_refused()
        assert w.add_jsonl(b"\n".join(lines) + b"\n") == 6
        refused = w.take_refused(2)
        refused += w.take_refused()
        assert [(e.index, e.field, e.kind) for e in refused] == [
            (0, None, "not_json"),
            (2, "url", "invalid"),
            (5, "pagerank", "invalid"),
        ]
        assert w.take_refused() == []
        w.skip_refused(False)
        with pytest.raises(RecordError) as exc:
            w.add_jsonl(b"\n".join(lines) + b"\n")
        assert exc.value.index == 0
    assert [f.url for f in decode_set(tmp_path / "o")] == [
        f"http://docs.example.com/{i}" for i in (1, 3, 4)
    ]


def test_files_stay_under_the_cap_and_every_record_appears_once_in_order(tmp_path: Path) -> None:
    records = [doc(i, content="é<&>" * (i % 50), metadata={"n": str(i)}) for i in range(2000)]
    assert build(tmp_path, records, "--max-bytes", "20KB", "--feedtype", "full") == 0
    manifest = read_manifest(tmp_path / "out")
    assert len(manifest) > 5
    for entry in manifest:
        path = tmp_path / "out" / entry.file
        assert path.stat().st_size == entry.bytes <= 20_000
        assert validate_file(path) == []
    assert [f.url for f in decode_set(tmp_path / "out")] == [r["url"] for r in records]
    assert sum(e.records for e in manifest) == 2000


def test_a_split_full_feed_replaces_only_with_its_first_file(tmp_path: Path) -> None:
    assert (
        build(tmp_path, [doc(i) for i in range(10)], "--feedtype", "full", "--max-records", "3")
        == 0
    )
    manifest = read_manifest(tmp_path / "out")
    assert [e.feedtype for e in manifest] == ["full", "incremental", "incremental", "incremental"]
    assert [decode_file(tmp_path / "out" / e.file)[1] for e in manifest] == [
        e.feedtype for e in manifest
    ]


def test_manifest_describes_each_file(tmp_path: Path) -> None:
    assert build(tmp_path, [doc(i) for i in range(5)], "--max-records", "2") == 0
    for e in read_manifest(tmp_path / "out"):
        data = (tmp_path / "out" / e.file).read_bytes()
        hashed = Xxh3()
        hashed.update(data)
        assert (e.datasource, e.bytes, e.digest) == (
            "docs",
            len(data),
            f"xxh3:{hashed.hexdigest()}",
        )
        assert data.startswith(
            b'<?xml version="1.0" encoding="UTF-8"?>\n'
            b'<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">\n'
        )


@pytest.mark.parametrize(
    ("hash", "length", "digest"),
    [
        # xxhsum -H2 (xxHash 0.8.1) of the same bytes.
        (Xxh3, 0, "99aa06d3014798d86001c324468d497f"),
        (Xxh3, 102_400, "ecd387d36185351b1428e17f1cac2837"),
        # The BLAKE3 authors' test vectors: the digest of manifests of earlier versions.
        (Blake3, 0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"),
        (Blake3, 102_400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"),
    ],
)
def test_the_digests_are_standard_given_in_pieces_as_a_push_gives_them(
    hash: type[Xxh3 | Blake3], length: int, digest: str
) -> None:
    """Bytes 0 to 250, repeated, fed in uneven pieces: a digest anyone can check with the
    standard tools."""
    data = bytes(i % 251 for i in range(length))
    hashed = hash()
    for at in range(0, length, 1000):
        hashed.update(data[at : at + 1000])
    assert hashed.hexdigest() == digest


def test_a_manifest_of_an_earlier_version_reads_with_its_sha256_digests(tmp_path: Path) -> None:
    import hashlib

    assert build(tmp_path, [doc(i) for i in range(3)]) == 0
    out = tmp_path / "out"
    [entry] = read_manifest(out)
    data = (out / entry.file).read_bytes()
    line = orjson.loads((out / "manifest.jsonl").read_bytes())
    del line["digest"]
    line["sha256"] = hashlib.sha256(data).hexdigest()
    (out / "manifest.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    [old] = read_manifest(out)
    assert (old.algorithm, old.digest) == ("sha256", f"sha256:{line['sha256']}")
    hashed = old.hasher()
    hashed.update(data)
    assert old.digest_of(hashed) == old.digest
    # A digest of a kind this version does not know is refused when the manifest is read.
    del line["sha256"]
    line["digest"] = "sha3:00"
    (out / "manifest.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    with pytest.raises(FastfeedError, match="its digest is not one of xxh3, blake3, sha256"):
        read_manifest(out)


def test_a_record_over_the_cap_goes_alone_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Random text: it does not deflate below the cap.
    records = [doc(0), doc(1, content=base64.b64encode(os.urandom(40_000)).decode()), doc(2)]
    assert build(tmp_path, records, "--max-bytes", "10KB") == 0
    assert "in.jsonl:2: " in capsys.readouterr().err
    manifest = read_manifest(tmp_path / "out")
    assert [e.records for e in manifest] == [1, 1, 1]
    assert manifest[1].bytes > 10_000


def test_metadata_is_sorted_and_unchanged_documents_give_identical_bytes(tmp_path: Path) -> None:
    a = doc(1, metadata={"zeta": "1", "alpha": ["b", "a"], "mid": "m"})
    b = doc(1, metadata={"mid": "m", "alpha": ["b", "a"], "zeta": "1"})
    build(tmp_path, [a], out="a")
    build(tmp_path, [b], out="b")
    assert (tmp_path / "a" / "docs-000001.xml").read_bytes() == (
        tmp_path / "b" / "docs-000001.xml"
    ).read_bytes()
    fed = decode_set(tmp_path / "a")[0]
    assert fed.metadata == [(b"alpha", b"b"), (b"alpha", b"a"), (b"mid", b"m"), (b"zeta", b"1")]


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("Tue, 6 Nov 2007 12:45:26 GMT", "Tue, 06 Nov 2007 12:45:26 GMT"),
        # RFC 822 spellings an appliance may not read: the same instant in the guide's form.
        ("Tue, 06 Nov 2007 12:45:26 gMt (UTC)", "Tue, 06 Nov 2007 12:45:26 GMT"),
        ("6 Nov 07 07:45:26 EST", "Tue, 06 Nov 2007 12:45:26 GMT"),
        ("Tue, 06 Nov 2007 12:45:26 UT", "Tue, 06 Nov 2007 12:45:26 GMT"),
        ("2007-11-06T12:45:26Z", "Tue, 06 Nov 2007 12:45:26 GMT"),
        ("2007-11-06T13:45:26+01:00", "Tue, 06 Nov 2007 12:45:26 GMT"),
        ("2007-11-06", "Tue, 06 Nov 2007 00:00:00 GMT"),
        (1194353126, "Tue, 06 Nov 2007 12:45:26 GMT"),
        (1194353126.9, "Tue, 06 Nov 2007 12:45:26 GMT"),
    ],
)
def test_last_modified_becomes_rfc822_in_gmt(tmp_path: Path, given: object, sent: str) -> None:
    assert build(tmp_path, [doc(1, last_modified=given)]) == 0
    assert decode_set(tmp_path / "out")[0].attrs["last-modified"] == sent


def test_record_attributes_reach_the_feed(tmp_path: Path) -> None:
    rec = doc(
        1,
        displayurl="http://show.example.com/1?a=1&b=2",
        lock=True,
        authmethod="ntlm",
        pagerank=90,
        mimetype="text/html",
    )
    assert build(tmp_path, [rec, {"url": "http://docs.example.com/2", "action": "delete"}]) == 0
    fed = decode_set(tmp_path / "out")
    assert fed[0].attrs == {
        "url": "http://docs.example.com/1",
        "displayurl": "http://show.example.com/1?a=1&b=2",
        "mimetype": "text/html",
        "lock": "true",
        "authmethod": "ntlm",
        "pagerank": "90",
    }
    # The DTD requires a mimetype on every record, deletes included.
    assert fed[1].attrs == {
        "url": "http://docs.example.com/2",
        "action": "delete",
        "mimetype": "text/plain",
    }


@pytest.mark.parametrize("feedtype", ["incremental", "full", "metadata-and-url"])
def test_crawl_flags_reach_every_feed_with_a_warning_in_content_feeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], feedtype: str
) -> None:
    # The guide: crawl-immediately "has no effect on content feeds", which is no error, and
    # `false` is the DTD's default: records that say so were built before and still are.
    first = {"url": "http://docs.example.com/1", "crawl_immediately": True, "crawl_once": False}
    second = {"url": "http://docs.example.com/2", "crawl_immediately": False}
    if feedtype != "metadata-and-url":
        first["content"] = second["content"] = "text"
    assert build(tmp_path, [first, second], "--feedtype", feedtype) == 0
    fed = decode_set(tmp_path / "out")
    assert (fed[0].attrs["crawl-immediately"], fed[0].attrs["crawl-once"]) == ("true", "false")
    assert fed[1].attrs["crawl-immediately"] == "false"
    err = capsys.readouterr().err
    if feedtype == "metadata-and-url":
        assert "crawl_immediately" not in err
    else:
        assert "in.jsonl:1: crawl_immediately: true has no effect on content feeds" in err
        assert "in.jsonl:2:" not in err


def test_metadata_is_refused_in_an_incremental_web_feed_and_taken_in_metadata_and_url(
    tmp_path: Path,
) -> None:
    # The guide's table of feed types: the appliance ignores a web feed's metadata.
    record = {"url": "http://docs.example.com/1", "metadata": {"k": "v"}}
    with FeedWriter(tmp_path / "web", "web") as w, pytest.raises(RecordError) as info:
        w.add_batch([record])
    assert (info.value.field, info.value.kind) == ("metadata", "not_allowed")
    assert "push it in a metadata-and-url feed" in info.value.reason
    with FeedWriter(tmp_path / "mu", "web", "metadata-and-url") as w:
        w.add_batch([record])
    assert decode_set(tmp_path / "mu")[0].metadata == [(b"k", b"v")]


def test_binary_content_is_compressed_only_when_it_shrinks(tmp_path: Path) -> None:
    noise = os.urandom(100_000)
    text_like = b"repeated words " * 10_000
    records = [
        {
            "url": "http://d.example.com/noise.bin",
            "content_base64": base64.b64encode(noise).decode(),
        },
        {
            "url": "http://d.example.com/words.bin",
            "content_base64": base64.b64encode(text_like).decode(),
        },
        {
            "url": "http://d.example.com/zip.zip",
            "content_base64": base64.b64encode(b"PK\x03\x04" + text_like).decode(),
        },
    ]
    assert build(tmp_path, records) == 0
    fed = decode_set(tmp_path / "out")
    assert [f.content_encoding for f in fed] == ["base64binary", "base64compressed", "base64binary"]
    assert [f.content for f in fed] == [noise, text_like, b"PK\x03\x04" + text_like]
    assert fed[2].attrs["mimetype"] == "application/zip"


def test_text_is_deflated_when_it_is_long_enough_to_shrink(tmp_path: Path) -> None:
    long_text = "the same sentence of a long document. " * 200
    short_text = "a short note & <markup>"
    # Long, but random: deflating would not make it smaller than the text itself.
    noise = base64.b64encode(os.urandom(3000)).decode()
    assert (
        build(
            tmp_path, [doc(1, content=long_text), doc(2, content=short_text), doc(3, content=noise)]
        )
        == 0
    )
    fed = decode_set(tmp_path / "out")
    assert [f.content_encoding for f in fed] == ["base64compressed", None, None]
    assert [f.content for f in fed] == [long_text.encode(), short_text.encode(), noise.encode()]
    assert build(tmp_path, [doc(1, content=long_text)], "--compress", "never", out="never") == 0
    assert decode_set(tmp_path / "never")[0].content_encoding is None


def test_compress_always_and_never(tmp_path: Path) -> None:
    assert build(tmp_path, [doc(1, content="text " * 100)], "--compress", "always", out="a") == 0
    assert decode_set(tmp_path / "a")[0].content_encoding == "base64compressed"
    data = base64.b64encode(b"\0" * 5000).decode()
    assert (
        build(
            tmp_path,
            [{"url": "http://d.example.com/z", "content_base64": data}],
            "--compress",
            "never",
            out="b",
        )
        == 0
    )
    assert decode_set(tmp_path / "b")[0].content_encoding == "base64binary"


def test_text_xml_cannot_carry_goes_as_base64_not_dropped(tmp_path: Path) -> None:
    assert build(tmp_path, [doc(1, content="bell\x07 and \uffff", metadata={"k\x01": "v"})]) == 0
    fed = decode_set(tmp_path / "out")[0]
    assert fed.content == "bell\x07 and \uffff".encode()
    assert fed.metadata == [(b"k\x01", b"v")]


def test_a_directory_becomes_records_with_urls_types_and_content(tmp_path: Path) -> None:
    root = tmp_path / "share"
    (root / "sub dir").mkdir(parents=True)
    (root / "a.html").write_text("<p>caf\u00e9 &amp; more</p>\r\n", encoding="utf-8")
    (root / "sub dir" / "b.pdf").write_bytes(b"%PDF-1.4 " + bytes(range(256)) * 40)
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    status = main(
        [
            "build",
            str(root),
            "--base-url",
            "http://files.example.com/share",
            "--datasource",
            "share",
            "--feedtype",
            "full",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert status == 0
    fed = {f.url: f for f in decode_set(tmp_path / "out")}
    html = fed["http://files.example.com/share/a.html"]
    assert (html.attrs["mimetype"], html.content_encoding) == ("text/html", None)
    assert html.content == (root / "a.html").read_bytes()
    pdf = fed["http://files.example.com/share/sub%20dir/b.pdf"]
    assert pdf.attrs["mimetype"] == "application/pdf" and pdf.content_encoding is not None
    assert pdf.content == (root / "sub dir" / "b.pdf").read_bytes()
    # Not UTF-8, so not sent as XML text: its bytes go base64, unchanged.
    latin = fed["http://files.example.com/share/latin1.txt"]
    assert latin.content == "caf\xe9".encode("latin-1") and latin.content_encoding == "base64binary"
    assert "last-modified" in pdf.attrs


def test_files_too_big_to_hold_go_through_json_lines_and_directory_builds_unchanged(
    tmp_path: Path,
) -> None:
    """Files larger than a block are read a block at a time, and records larger than an
    encoding thread holds (4 MB) go to the writing thread through a file of their own: the feed
    decodes to the files, validates, and equals the one the same bytes make given in memory."""
    tree = tmp_path / "tree"
    tree.mkdir()
    # 8 MB once in base64; text whose blocks end inside characters.
    (tree / "big.bin").write_bytes(random.Random(1).randbytes(6_000_000))
    (tree / "big.txt").write_text("caf\u00e9 \u65e5\u672c \U0001f600 <&>\n" * 200_000)
    (tree / "small.txt").write_text("small")
    files = sorted(tree.iterdir())
    url = "http://files.example.com/"
    assert build(tmp_path, [{"url": url + p.name, "content_path": str(p)} for p in files]) == 0
    in_memory = [
        {"url": url + p.name, "content": p.read_text()}
        if p.suffix == ".txt"
        else {"url": url + p.name, "content_base64": base64.b64encode(p.read_bytes()).decode()}
        for p in files
    ]
    assert build(tmp_path, in_memory, out="memory") == 0
    argv = ["build", str(tree), "--base-url", url, "--datasource", "docs", "--out"]
    assert main([*argv, str(tmp_path / "dir")]) == 0
    for out in ["out", "memory", "dir"]:
        fed = decode_set(tmp_path / out)
        assert [f.content for f in fed] == [p.read_bytes() for p in files], out
        assert [f.content_encoding for f in fed] == ["base64binary", "base64compressed", None]
        manifest = read_manifest(tmp_path / out)
        assert all(validate_file(tmp_path / out / e.file) == [] for e in manifest)
        # Hashed as written, the big records read back from their own files included.
        for e in manifest:
            hashed = e.hasher()
            hashed.update((tmp_path / out / e.file).read_bytes())
            assert e.digest_of(hashed) == e.digest
        # Nothing else: the files the big records went through had no name.
        names = {p.name for p in (tmp_path / out).iterdir()}
        assert names == {"manifest.jsonl", *(e.file for e in manifest)}
    feed = (tmp_path / "out" / "docs-000001.xml").read_bytes()
    assert feed == (tmp_path / "memory" / "docs-000001.xml").read_bytes()


def linked_files(tmp_path: Path, size: int, count: int, seed: int) -> tuple[Path, Path]:
    """`count` names of one file of `size` random bytes (hard links: the disk holds it once),
    and JSON Lines naming them by content_path, in order."""
    first = tmp_path / "0.bin"
    first.write_bytes(random.Random(seed).randbytes(size))
    paths = [first]
    for i in range(1, count):
        paths.append(tmp_path / f"{i}.bin")
        os.link(first, paths[-1])
    url = "http://files.example.com/"
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"url": url + p.name, "content_path": str(p)} for p in paths]
    )
    return first, src


def test_many_big_records_waiting_for_the_writer_take_few_descriptors(tmp_path: Path) -> None:
    """Records too big to hold (4 MB once encoded) wait for the writing thread in one file per
    encoding thread, not one each: a chunk of many big files by path builds under a low limit
    on open files, where a descriptor per record waiting ran out of them (a fatal error)."""
    first, src = linked_files(tmp_path, 3_300_000, 70, seed=2)

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    out = tmp_path / "out"
    done = subprocess.run(
        ["fastfeed", "build", str(src), "--datasource", "d", "--out", str(out), "--workers", "2"],
        capture_output=True,
        check=False,
        preexec_fn=few_descriptors,
    )
    assert done.returncode == 0, done.stderr
    fed = decode_set(out)
    assert len(fed) == 70
    assert all(f.content == fed[0].content for f in fed)
    assert fed[0].content == first.read_bytes()


def peak_rss_of(command: list[str], exit_status: int = 0, stdin: BinaryIO | None = None) -> int:
    """Runs `command` to its end, checking that it ends with `exit_status`; returns its peak
    RSS (VmHWM, which only grows, sampled until it exits; not getrusage's, which counts this
    process's memory too, as the child was forked from it)."""
    child = subprocess.Popen(command, stdin=stdin, stderr=subprocess.PIPE)
    peak = 0
    while child.poll() is None:
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
        except OSError:  # it just ended
            break
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) << 10)
        time.sleep(0.01)
    _, err = child.communicate()
    assert child.returncode == exit_status, err
    return peak


@pytest.mark.parametrize(
    ("escaped", "piped"),
    [(False, False), (True, False), (False, True)],
    ids=["plain", "with escapes", "from a pipe"],
)
def test_a_huge_refused_line_is_set_aside_from_the_input_never_copied(
    tmp_path: Path, escaped: bool, piped: bool
) -> None:
    """A refused line of 60 MB (a field wrong beside its content), the last of its input and
    without a newline, is written to rejected.jsonl from the mapped input (from a pipe, gathered
    in an unnamed file, then mapped): the build takes the line's pages, and a content with
    escapes read out of the line once, and no more. (A copy of the chunk to search it took
    60 MB more, the line cut out of it 60 more, its newline added 60 more; with escapes, the
    line was parsed again whole, copying its content twice; from a pipe, the line was gathered
    in memory, then joined.)"""
    body = b"x\\n" * 20_000_000 if escaped else b"x" * 60_000_000
    huge = b'{"url":"http://a.example.com/huge","content":"' + body + b'","pagerank":"x"}'
    del body
    src = tmp_path / "in.jsonl"
    src.write_bytes(orjson.dumps(doc(1)) + b"\n" + huge)
    out = tmp_path / "out"
    command = ["fastfeed", "build", "-" if piped else str(src), "--datasource", "d"]
    command += ["--out", str(out), "--on-error", "skip"]
    with src.open("rb") as stdin:
        peak = peak_rss_of(command, exit_status=1, stdin=stdin if piped else None)
    held = len(huge) + (40_000_000 if escaped else 0)
    assert peak < held + (48 << 20), (peak, held)
    assert (out / "rejected.jsonl").read_bytes() == huge + b"\n"
    assert ":2: pagerank: invalid type" in (out / "rejected.log").read_text()
    assert [f.url for f in decode_set(out)] == ["http://docs.example.com/1"]


@pytest.mark.parametrize(
    ("indices", "written"),
    [([1, 1], b'{"b":2}\n'), ([2, 1], b'{"c":3}\n'), ([3], b"")],
    ids=["repeated", "out of order", "past the chunk"],
)
def test_a_refused_index_that_is_no_next_line_of_its_chunk_stops_the_build(
    tmp_path: Path, indices: list[int], written: bytes
) -> None:
    """The core refuses each line of a chunk once, in order: any other index is a bug, which
    stops the build rather than write another line (or an empty one) to rejected.jsonl."""
    builder = _Builder("skip", stage(None, "build"), tmp_path)
    refused = []
    for index in indices:
        exc = RecordError("invalid type")
        exc.index, exc.field, exc.reason = index, None, "invalid type"
        refused.append(exc)
    with pytest.raises(RuntimeError, match="refused out of order or past its end"):
        builder._refuse_lines(b'{"a":1}\n{"b":2}\n{"c":3}\n', refused)
    builder.rejected.close()
    rejected = tmp_path / "rejected.jsonl"
    assert (rejected.read_bytes() if rejected.exists() else b"") == written


def test_files_just_under_the_big_ones_wait_in_memory_a_round_at_a_time(tmp_path: Path) -> None:
    """Records of files just under the size whose records go to disk (3.7 MB once encoded, of
    2.8 MB files) wait for the writer in memory: a chunk naming many is encoded 12 MB of files
    at a time, not whole (a chunk of 1,000 such files took 3.8 GB)."""
    first, src = linked_files(tmp_path, 2_800_000, 100, seed=3)
    out = tmp_path / "out"
    peak = peak_rss_of(["fastfeed", "build", str(src), "--datasource", "d", "--out", str(out)])
    # 100 records of 3.7 MB held at once would be 370 MB.
    assert peak < 128 << 20, peak
    fed = decode_set(out)
    assert [f.url for f in fed] == [f"http://files.example.com/{i}.bin" for i in range(100)]
    assert fed[-1].content == first.read_bytes()


def test_big_files_that_deflate_well_wait_on_disk_not_in_memory(tmp_path: Path) -> None:
    """A round takes files of 3 MB and more by the disk their records take, as if each went
    there; one that deflates to a record under 4 MB went there too, or 120 of them (3.7 MB
    records, 4 MB files) would be held at once (870 MB for 300)."""
    noise = random.Random(4)
    block = b"".join(noise.randbytes(2_900) + bytes(1_100) for _ in range(1_000))
    first, src = linked_files(tmp_path, 0, 120, seed=4)
    first.write_bytes(block)  # the links are names of this one file
    out = tmp_path / "out"
    peak = peak_rss_of(["fastfeed", "build", str(src), "--datasource", "d", "--out", str(out)])
    assert peak < 128 << 20, peak
    fed = decode_set(out)
    assert [f.url for f in fed] == [f"http://files.example.com/{i}.bin" for i in range(120)]
    assert fed[-1].content == block and fed[-1].content_encoding == "base64compressed"


def test_a_bad_line_after_many_big_files_is_set_aside_and_each_good_record_written_once(
    tmp_path: Path,
) -> None:
    """A chunk naming more big files than one round of encoding takes is written round by
    round (the records waiting for the writer stay few); a bad line in a later round is set
    aside under --on-error skip, and the lines of the rounds already written are not written
    again."""
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        f.truncate(3_200_000)  # sparse: big by its size, no room on disk
    records: list[object] = [
        {"url": f"http://files.example.com/{i}", "content_path": str(big)} for i in range(300)
    ]
    records[250] = {"url": "http://files.example.com/250", "content_path": "/no/such/file"}
    assert build(tmp_path, records, "--on-error", "skip") == 1
    urls = [f.url for f in decode_set(tmp_path / "out")]
    assert urls == [f"http://files.example.com/{i}" for i in range(300) if i != 250]
    rejected = (tmp_path / "out" / "rejected.jsonl").read_bytes().splitlines()
    assert len(rejected) == 1 and b"/no/such/file" in rejected[0]


def run_limited(argv: list[str], file_size: int) -> subprocess.CompletedProcess[str]:
    """Runs `fastfeed argv` under the kernel's limit of `file_size` bytes a file: a write past
    it fails (File too large), as one to a full disk would."""
    code = "from fastfeed.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return run_python_limited(code, argv, file_size)


def run_python_limited(
    code: str, argv: list[str], file_size: int
) -> subprocess.CompletedProcess[str]:
    """Runs Python `code` (`sys` imported, `argv` in `sys.argv[1:]`) as `run_limited` does."""
    # Set in the child itself: preexec_fn is unsafe in a process with threads.
    limited = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_size}, {file_size}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", limited + code, *argv], capture_output=True, text=True, check=False
    )


def test_a_chunk_failing_to_write_in_a_later_round_says_how_many_of_its_lines_were_written(
    tmp_path: Path,
) -> None:
    """`add_jsonl` stopped by a file that cannot be written (its big record moved out to disk,
    past the file size limit: a full disk for root too) in a later round of its chunk raises
    `OSError` saying, as a refused line's `RecordError` does, how many of the chunk's lines the
    rounds before wrote: the caller goes on from there."""
    _, src = linked_files(tmp_path, 1 << 20, 40, seed=5)
    noise = tmp_path / "noise.bin"
    noise.write_bytes(random.Random(6).randbytes(5 << 20))
    chunk = src.read_bytes() + orjson.dumps(
        {"url": "http://files.example.com/noise", "content_path": str(noise)}
    )
    code = (
        "import errno, json\n"
        "from fastfeed import FeedWriter\n"
        "w = FeedWriter(sys.argv[1], 'd', max_bytes=2_000_000)\n"
        "try:\n"
        "    w.add_jsonl(open(sys.argv[2], 'rb').read())\n"
        "except OSError as e:\n"
        "    print(json.dumps([errno.errorcode[e.errno], e.written, w.records]))\n"
        "w.abort()\n"
    )
    (tmp_path / "chunk.jsonl").write_bytes(chunk + b"\n")
    argv = [str(tmp_path / "out"), str(tmp_path / "chunk.jsonl")]
    done = run_python_limited(code, argv, 3_000_000)
    assert done.returncode == 0, done.stderr
    error, written, records = orjson.loads(done.stdout)
    assert error == "EFBIG"
    # The 1 MB files are taken 12 MB a round: the rounds before the big record's were written.
    assert 0 < written < 41 and written == records


def test_a_feed_file_that_cannot_be_written_leaves_no_line_counted_as_written(
    tmp_path: Path,
) -> None:
    """A feed file that cannot be written (past the file size limit: a full disk for root too)
    stops the writer with its unfinished file: the error reaches `add_jsonl` a round or two
    after the lines it lost were handed over, and `.written` must not count them, or a caller
    going on from there would skip documents no finished file holds."""
    _, src = linked_files(tmp_path, 1 << 20, 40, seed=7)
    inline = b"".join(
        orjson.dumps({"url": f"http://inline.example.com/{i}", "content": "x" * 100}) + b"\n"
        for i in range(200)
    )
    (tmp_path / "chunk.jsonl").write_bytes(inline + src.read_bytes())
    code = (
        "import errno, json, os\n"
        "from fastfeed import FeedWriter\n"
        "w = FeedWriter(sys.argv[1], 'd')\n"
        "try:\n"
        "    w.add_jsonl(open(sys.argv[2], 'rb').read())\n"
        "except OSError as e:\n"
        "    finished = [n for n in os.listdir(sys.argv[1]) if n.endswith('.xml')]\n"
        "    print(json.dumps([errno.errorcode[e.errno], e.written, finished]))\n"
        "w.abort()\n"
    )
    argv = [str(tmp_path / "out"), str(tmp_path / "chunk.jsonl")]
    done = run_python_limited(code, argv, 5_000_000)
    assert done.returncode == 0, done.stderr
    error, written, finished = orjson.loads(done.stdout)
    assert (error, finished) == ("EFBIG", [])
    assert written == 0


def test_a_chunk_stopped_in_a_later_round_keeps_the_lines_its_written_rounds_refused(
    tmp_path: Path,
) -> None:
    """A chunk naming more files than a round of encoding takes is written round by round; one
    stopped in a later round by a failure to write (its big record moved out to disk, past the
    file size limit) leaves written the lines of the rounds before, and the lines they refused
    are saved to rejected.jsonl as the build stops, not lost with it."""
    first, src = linked_files(tmp_path, 1 << 20, 40, seed=5)
    noise = tmp_path / "noise.bin"
    noise.write_bytes(random.Random(6).randbytes(5 << 20))
    records = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    for i in (3, 30):
        records[i]["content_path"] = "/no/such/file"
    records.append({"url": "http://files.example.com/noise", "content_path": str(noise)})
    write_jsonl(src, records)
    out = tmp_path / "out"
    argv = ["build", str(src), "--datasource", "d", "--out", str(out), "--on-error", "skip"]
    done = run_limited([*argv, "--max-bytes", "2000000"], 3_000_000)
    assert done.returncode == 1
    assert "File too large" in done.stderr, done.stderr
    assert f"stopped; {out} has no manifest" in done.stderr
    rejected = (out / "rejected.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line) for line in rejected] == [records[3], records[30]]
    log = (out / "rejected.log").read_text().splitlines()
    assert [line.split(": ")[0] for line in log] == [f"{src}:4", f"{src}:31"]


def test_a_full_disk_under_the_refused_records_names_their_file(tmp_path: Path) -> None:
    """Refused records past what the disk (here, the file size limit) takes stop the build with
    the path of the file that could not be written, and what to do; both files of refused
    records are closed."""
    records: list[object] = [doc(i, colour="x" * 100_000) for i in range(30)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "out"
    argv = ["build", str(src), "--datasource", "d", "--out", str(out), "--on-error", "skip"]
    done = run_limited(argv, 1_000_000)
    assert done.returncode != 0
    assert f"error: cannot write {out / 'rejected.jsonl'}: File too large (larger than" in (
        done.stderr
    ), done.stderr
    assert "ulimit -f" in done.stderr
    assert (out / "rejected.log").exists()


def test_a_directory_given_as_the_current_one_maps_paths_to_urls_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "d 1" / "50%").mkdir(parents=True)
    (tmp_path / "d 1" / "50%" / "a#b.txt").write_text("x")
    (tmp_path / "top.txt").write_text("y")
    monkeypatch.chdir(tmp_path)
    argv = ["build", ".", "--base-url", "http://f.example.com", "--datasource", "d"]
    assert main([*argv, "--out", str(tmp_path.parent / f"{tmp_path.name}-out")]) == 0
    assert sorted(f.url for f in decode_set(tmp_path.parent / f"{tmp_path.name}-out")) == [
        "http://f.example.com/d%201/50%25/a%23b.txt",
        "http://f.example.com/top.txt",
    ]


def test_a_directory_needs_a_base_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d").mkdir()
    assert (
        main(["build", str(tmp_path / "d"), "--datasource", "x", "--out", str(tmp_path / "o")]) == 1
    )
    assert "--base-url" in capsys.readouterr().err


def test_an_empty_full_feed_is_refused_because_it_empties_the_datasource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(tmp_path, [], "--feedtype", "full") == 1
    assert "--allow-empty-full" in capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_an_empty_full_feed_is_written_when_allowed(tmp_path: Path) -> None:
    assert build(tmp_path, [], "--feedtype", "full", "--allow-empty-full") == 0
    [entry] = read_manifest(tmp_path / "out")
    assert (entry.feedtype, entry.records) == ("full", 0)
    assert validate_file(tmp_path / "out" / entry.file) == []


def test_refuses_to_mix_two_builds_in_one_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(tmp_path, [doc(1)]) == 0
    assert build(tmp_path, [doc(2)]) == 1
    assert "out is not empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args", [["--level", "0"], ["--level", "300"], ["--workers", "-1"], ["--max-records", "x"]]
)
def test_out_of_range_numbers_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [doc(1)])
    with pytest.raises(SystemExit) as exited:
        main(["build", str(src), "--datasource", "d", "--out", str(tmp_path / "o"), *args])
    assert exited.value.code == 2
    assert f"Invalid value for '{args[0]}'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--datasource", "9lives"], "datasource '9lives' is not allowed"),
        (["--datasource", "web", "--feedtype", "full"], "always incremental"),
        (["--datasource", "d", "--max-bytes", "2GB"], "max bytes"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [doc(1)])
    assert main(["build", str(src), "--out", str(tmp_path / "o"), *args]) == 1
    assert words in capsys.readouterr().err
    assert not (tmp_path / "o" / "manifest.jsonl").exists()


def test_web_feeds_carry_urls_not_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [doc(1)])
    assert main(["build", str(src), "--datasource", "web", "--out", str(tmp_path / "o")]) == 1
    assert "web feed" in capsys.readouterr().err


def test_python_api_takes_str_bytes_and_paths_and_reports_files(tmp_path: Path) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)))
    finished = []
    with FeedWriter(tmp_path / "out", "api", "full", max_records=2, on_file=finished.append) as w:
        w.add({"url": "http://a.example.com/1", "content": "text"})
        w.add_batch(
            [
                {"url": "http://a.example.com/2", "content": b"\x00\x01"},
                {"url": "http://a.example.com/3", "content_path": blob},
            ]
        )
    assert (
        [e.file for e in finished]
        == [e.file for e in w.manifest]
        == ["api-000001.xml", "api-000002.xml"]
    )
    assert [f.content for f in decode_set(tmp_path / "out")] == [
        b"text",
        b"\x00\x01",
        bytes(range(256)),
    ]


def test_python_api_error_points_at_the_record_and_the_batch_can_be_retried(tmp_path: Path) -> None:
    with FeedWriter(tmp_path / "out", "api") as w:
        batch = [{"url": "http://a.example.com/1"}, {"url": "http://a.example.com/\ud800"}]
        with pytest.raises(RecordError) as info:
            w.add_batch(batch)
        assert (info.value.index, info.value.field) == (1, "url")
        assert "not valid Unicode" in str(info.value)
        w.add_batch(batch[:1])
    assert [f.url for f in decode_set(tmp_path / "out")] == ["http://a.example.com/1"]


@pytest.mark.parametrize("value", ["v\udc00", ["ok", "\ud800 v"]])
def test_python_api_names_a_lone_surrogate_in_a_metadata_value(
    tmp_path: Path, value: str | list[str]
) -> None:
    """A metadata value UTF-8 cannot carry is refused naming its name and what is wrong with
    it, not as a value of the wrong type."""
    with FeedWriter(tmp_path / "out", "api") as w, pytest.raises(RecordError) as info:
        w.add_batch([{"url": "http://a.example.com/1", "metadata": {"n": value}}])
    assert (info.value.index, info.value.field) == (0, "metadata")
    assert info.value.reason == "'n': is not valid Unicode (it holds a lone surrogate)"


@pytest.mark.parametrize("text", ["caf\xe9 \ud800", "\u65e5\u672c \udfff", "\U0001f600 \ud83d"])
def test_python_api_refuses_a_lone_surrogate_in_content_of_any_width(
    tmp_path: Path, text: str
) -> None:
    """Content is made UTF-8 off the GIL from the str's own storage (1, 2 or 4 bytes per
    character): a surrogate, which UTF-8 cannot carry, is refused there too."""
    with FeedWriter(tmp_path / "out", "api") as w:
        batch = [doc(1), {"url": "http://a.example.com/2", "content": text}]
        with pytest.raises(RecordError) as info:
            w.add_batch(batch)
        assert (info.value.index, info.value.field) == (1, "content")
        assert "lone surrogate" in str(info.value)
        # Named before a later record's own fault.
        with pytest.raises(RecordError) as info:
            w.add_batch([*batch, {"url": 5}])
        assert (info.value.index, info.value.field) == (1, "content")
        w.add_batch(batch[:1])
    assert len(decode_set(tmp_path / "out")) == 1


def test_python_api_abandoned_on_exception_leaves_no_manifest(tmp_path: Path) -> None:
    with pytest.raises(KeyError), FeedWriter(tmp_path / "out", "api", max_records=1) as w:
        w.add_batch([doc(1), doc(2)])
        raise KeyError("pipeline failed")
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_python_api_warns_about_oversized_records(tmp_path: Path) -> None:
    with (
        pytest.warns(FeedWarning, match="over the 1000 byte cap"),
        FeedWriter(tmp_path / "o", "api", max_bytes=1000) as w,
    ):
        w.add(doc(1, content=os.urandom(5000)))


def test_python_api_warns_about_a_crawl_flag_without_effect(tmp_path: Path) -> None:
    with FeedWriter(tmp_path / "o", "api") as w, pytest.warns(FeedWarning) as caught:
        w.add_batch([doc(1), doc(2, crawl_once=True, crawl_immediately=True)])
    [warning] = [c.message for c in caught]
    assert isinstance(warning, FeedWarning)
    assert warning.index == 1
    assert str(warning).startswith("crawl_immediately and crawl_once: true has no effect")
    assert decode_set(tmp_path / "o")[1].attrs["crawl-once"] == "true"


def test_python_api_refuses_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(FeedError, match="feed type 'fulll'"):
        FeedWriter(tmp_path / "o", "api", "fulll")  # type: ignore[arg-type]


def test_stdin_and_the_installed_command(tmp_path: Path) -> None:
    data = b"".join(orjson.dumps(doc(i)) + b"\n" for i in range(3))
    done = subprocess.run(
        ["fastfeed", "build", "-", "--datasource", "s", "--out", str(tmp_path / "o"), "--json"],
        input=data,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["records"] == 3
    assert [f.content for f in decode_set(tmp_path / "o")] == [
        b"document 0",
        b"document 1",
        b"document 2",
    ]


def _run_fastfeed(tmp_path: Path, before: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`fastfeed build --on-error skip` of three records, one refused, as the installed command
    runs it, after `before` (Python); stdout and stderr are pipes, buffered as for a script."""
    src = write_jsonl(tmp_path / "in.jsonl", [doc(1), doc(2, pagerank=1), doc(3)])
    argv = ["fastfeed", "build", str(src), "--datasource", "s", "--out", str(tmp_path / "o")]
    argv += ["--on-error", "skip"]
    run = f"sys.argv = {[*argv, *args]!r}\nfrom fastfeed.cli import run\nrun()\n"
    script = f"import sys\n{before}\n{run}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )


def test_a_build_ends_its_process_at_once_having_said_all(tmp_path: Path) -> None:
    # The process is not torn down object by object (6 ms of every build, a tenth of a small
    # one's): what the user is told, the exit status, the exit handlers and the refused record's
    # files must all be there still.
    before = (
        "import atexit\n"
        "atexit.register(lambda: print('exit handler', file=sys.stderr))\n"
        "class Kept:\n"
        "    def __del__(self): print('torn down', file=sys.stderr)\n"
        "kept = Kept()"
    )
    done = _run_fastfeed(tmp_path, before, "--json")
    assert done.returncode == 1, done.stderr  # a record was refused
    summary = orjson.loads(done.stdout)
    assert (summary["records"], summary["rejected"]) == (2, 1)
    assert "wrote 2 records into 1 file" in done.stderr
    assert "exit handler" in done.stderr and "torn down" not in done.stderr
    assert (tmp_path / "o" / "rejected.jsonl").read_bytes() == orjson.dumps(
        doc(2, pagerank=1)
    ) + b"\n"
    assert "pagerank" in (tmp_path / "o" / "rejected.log").read_text()
    assert [f.url for f in decode_set(tmp_path / "o")] == [doc(1)["url"], doc(3)["url"]]


def test_a_build_run_beside_a_thread_still_running_waits_for_it(tmp_path: Path) -> None:
    # Ending at once would kill it: a program that runs the command line must see its thread end.
    before = (
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread ended'))).start()"
    )
    done = _run_fastfeed(tmp_path, before)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "thread ended\n"
    assert "wrote 2 records into 1 file" in done.stderr


def test_compressed_content_is_plain_zlib(tmp_path: Path) -> None:
    assert build(tmp_path, [doc(1, content="abc" * 100)], "--compress", "always") == 0
    text = (tmp_path / "out" / "docs-000001.xml").read_text()
    payload = text.split('encoding="base64compressed">')[1].split("<")[0]
    assert zlib.decompress(base64.b64decode(payload)) == b"abc" * 100


def test_contents_deflated_in_pieces_are_one_zlib_stream_whatever_the_threads(
    tmp_path: Path,
) -> None:
    """A content of more than a block (1 MiB) is deflated in pieces that both encoding threads
    share: Python's zlib decodes each, at sizes that end a piece exactly or just past, and the
    bytes are the same on one thread or two, read from a file or given in memory."""
    block = 1 << 20
    # Bytes of 16 values: they deflate, each piece to a length of its own.
    unit = bytes(random.Random(5).choices(range(16), k=7_001))
    contents = [
        (unit * (size // len(unit) + 1))[:size]
        for size in [block + 1, 2 * block, 2 * block + 1, 3 * block - 1, 5 * block + 12_345]
    ]
    tree = tmp_path / "tree"
    tree.mkdir()
    url = "http://files.example.com/"
    by_path, in_memory = [], []
    for i, content in enumerate(contents):
        (tree / f"{i}.bin").write_bytes(content)
        by_path.append({"url": f"{url}{i}.bin", "content_path": str(tree / f"{i}.bin")})
        in_memory.append(
            {"url": f"{url}{i}.bin", "content_base64": base64.b64encode(content).decode()}
        )
    feeds = []
    for out, records, workers in [
        ("one", by_path, "1"),
        ("two", by_path, "2"),
        ("memory", in_memory, "2"),
    ]:
        assert build(tmp_path, records, "--workers", workers, out=out) == 0
        feed = tmp_path / out / "docs-000001.xml"
        assert validate_file(feed) == []
        text = feed.read_text()
        payloads = [p.split("<")[0] for p in text.split('encoding="base64compressed">')[1:]]
        assert [zlib.decompress(base64.b64decode(p)) for p in payloads] == contents, out
        feeds.append(feed.read_bytes())
    assert feeds[0] == feeds[1] == feeds[2]


def test_help_teaches_by_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastfeed", "build", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "examples:" in done.stdout and "--max-bytes" in done.stdout


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_chunks_of_a_mapped_file_keep_every_line_and_its_number(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ending: bytes,
) -> None:
    import fastfeed.sets.inputs

    # Chunks far smaller than lines: every line crosses chunk boundaries.
    monkeypatch.setattr(fastfeed.sets.inputs, "CHUNK_BYTES", 64)
    records = [doc(i, content="z" * (i * 37 % 300)) for i in range(40)]
    lines = [orjson.dumps(r) for r in records]
    lines[25] = orjson.dumps(doc(25, pagerank=3))
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + ending)
    status = main(
        ["build", str(src), "--datasource", "d", "--out", str(tmp_path / "o"), "--on-error", "skip"]
    )
    assert status == 1
    log = (tmp_path / "o" / "rejected.log").read_text()
    assert log.startswith(f"{src}:26: pagerank:")
    assert [f.url for f in decode_set(tmp_path / "o")] == [
        r["url"] for i, r in enumerate(records) if i != 25
    ]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert main(["build", str(empty), "--datasource", "d", "--out", str(tmp_path / "e")]) == 0
    assert read_manifest(tmp_path / "e") == []


def test_a_bad_line_stops_the_build_while_later_chunks_are_being_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fastfeed.sets.inputs

    monkeypatch.setattr(fastfeed.sets.inputs, "CHUNK_BYTES", 64)
    lines = [orjson.dumps(doc(i, pagerank=3) if i == 25 else doc(i)) for i in range(40)]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["build", str(src), "--datasource", "d", "--out", str(tmp_path / "o")]) == 1
    assert f"{src}:26: pagerank:" in capsys.readouterr().err
    assert list((tmp_path / "o").iterdir()) == []


def test_a_file_the_system_refuses_to_write_stops_the_build_and_leaves_no_part_of_it(
    tmp_path: Path,
) -> None:
    """A real refusal: the kernel's file size limit cuts the first feed file short, as a full
    disk would."""
    src = write_jsonl(tmp_path / "in.jsonl", [doc(i, content="x" * 4000) for i in range(1000)])
    out = tmp_path / "o"
    argv = ["build", str(src), "--datasource", "d", "--out", str(out), "--compress", "never"]
    done = run_limited(argv, 1_000_000)
    assert done.returncode == 1
    assert f"error: {out / 'd-000001.xml.tmp'}: File too large\n" in done.stderr
    assert f"stopped; {out} has no manifest" in done.stderr
    assert list(out.iterdir()) == []


def test_add_jsonl_takes_any_bytes_like_chunk(tmp_path: Path) -> None:
    lines = [orjson.dumps(doc(i)) + b"\n" for i in range(4)]
    chunks = [
        lines[0],
        bytearray(lines[1]),
        memoryview(lines[2]),
        memoryview(bytearray(lines[3])).toreadonly(),
    ]
    with FeedWriter(tmp_path / "o", "d") as w:
        assert [w.add_jsonl(c) for c in chunks] == [1, 1, 1, 1]  # type: ignore[arg-type]
    assert [f.url for f in decode_set(tmp_path / "o")] == [doc(i)["url"] for i in range(4)]


def test_chunks_started_ahead_are_written_in_the_order_they_are_taken(tmp_path: Path) -> None:
    def chunk(*ids: int, bad: int | None = None) -> bytearray:
        return bytearray(
            b"".join(orjson.dumps(doc(i, pagerank=1) if i == bad else doc(i)) + b"\n" for i in ids)
        )

    first, second, third = chunk(0, 1), chunk(2, 3, 4, bad=3), chunk(5)
    with FeedWriter(tmp_path / "o", "d") as w:
        w.start_jsonl(first)
        w.start_jsonl(second)
        w.start_jsonl(third)
        # A bytearray may change once started: what was started is what gets written.
        first[:] = chunk(9, 9)
        assert w.wait_jsonl() == 2
        with pytest.raises(RecordError) as bad:
            w.wait_jsonl()
        assert (bad.value.index, bad.value.field) == (1, "pagerank")
        # Nothing of the bad chunk was written: its good lines go now, ahead of the third.
        assert w.add_jsonl(chunk(2, 4)) == 2
        assert w.wait_jsonl() == 1
        with pytest.raises(FeedError, match="no chunk of JSON Lines was started"):
            w.wait_jsonl()
    assert [f.url for f in decode_set(tmp_path / "o")] == [doc(i)["url"] for i in (0, 1, 2, 4, 5)]


def test_closing_with_a_chunk_still_started_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    w = FeedWriter(tmp_path / "o", "d")
    w.add_jsonl(orjson.dumps(doc(0)) + b"\n")
    w.start_jsonl(orjson.dumps(doc(1)) + b"\n")
    with pytest.raises(FeedError, match="1 chunk\\(s\\) of JSON Lines were started"):
        w.close()
    assert not (tmp_path / "o" / "manifest.jsonl").exists()
    assert list((tmp_path / "o").glob("*.xml")) == []


def test_a_closed_writer_keeps_its_counts_and_closing_twice_is_harmless(tmp_path: Path) -> None:
    w = FeedWriter(tmp_path / "o", "d", feedtype="full")
    w.add(doc(0))
    counts = (w.records, w.bytes)
    manifest = w.close()
    assert (w.records, w.bytes, w.files) == (*counts, 1) and counts[1] > 0
    assert w.close() == manifest
    w.abort()  # harmless: the manifest stays
    assert (tmp_path / "o" / "manifest.jsonl").exists() and w.records == 1


def test_an_on_file_that_raises_during_close_leaves_the_manifest_to_the_writer(
    tmp_path: Path,
) -> None:
    def refuse(entry: ManifestEntry) -> None:
        raise ValueError(f"cannot take {entry.file}")

    w = FeedWriter(tmp_path / "o", "d", feedtype="full", on_file=refuse)
    w.add(doc(0))
    with pytest.raises(ValueError, match="cannot take"):
        w.close()
    assert w.close() == w.manifest == read_manifest(tmp_path / "o")
    assert len(w.manifest) == 1


def test_closing_again_after_a_failed_close_names_that_failure_not_an_empty_feed(
    tmp_path: Path,
) -> None:
    w = FeedWriter(tmp_path / "o", "d", feedtype="full")
    w.add(doc(0))
    shutil.rmtree(tmp_path / "o")
    with pytest.raises(FileNotFoundError):
        w.close()
    for again in (w.close, lambda: w.records):
        with pytest.raises(FeedError) as caught:
            again()
        assert not isinstance(caught.value, EmptyFullFeed)
        assert str(caught.value).startswith(f"this writer's close failed: {tmp_path / 'o'}")


def test_closing_after_abort_says_it_was_aborted_not_that_the_feed_is_empty(
    tmp_path: Path,
) -> None:
    w = FeedWriter(tmp_path / "o", "d", feedtype="full")
    w.add(doc(0))
    w.abort()
    w.abort()
    assert w.records == 1
    with pytest.raises(FeedError, match="^this writer was aborted, so it has no manifest"):
        w.close()
    assert not (tmp_path / "o" / "manifest.jsonl").exists()
    # The same of an empty one: aborted is what became of it, before anything it holds.
    aborted = FeedWriter(tmp_path / "a", "d", feedtype="full")
    aborted.abort()
    for _ in range(2):
        with pytest.raises(FeedError, match="^this writer was aborted") as caught:
            aborted.close()
        assert not isinstance(caught.value, EmptyFullFeed)
    # An empty full feed refused is refused again, however often it is closed.
    empty = FeedWriter(tmp_path / "e", "d", feedtype="full")
    for _ in range(2):
        with pytest.raises(EmptyFullFeed):
            empty.close()


def test_closing_a_full_feed_with_a_chunk_started_and_not_waited_for_says_so(
    tmp_path: Path,
) -> None:
    # Its records are not counted until it is waited for: the set is not empty, it is unread.
    w = FeedWriter(tmp_path / "o", "d", feedtype="full")
    w.start_jsonl(orjson.dumps(doc(0)) + b"\n")
    for _ in range(2):
        with pytest.raises(FeedError, match="started and not waited for") as caught:
            w.close()
        assert not isinstance(caught.value, EmptyFullFeed)
    assert not (tmp_path / "o" / "manifest.jsonl").exists()


def test_an_empty_full_feed_refused_keeps_its_counts_and_pickles(tmp_path: Path) -> None:
    w = FeedWriter(tmp_path / "o", "d", feedtype="full")
    with pytest.raises(EmptyFullFeed, match="every document of 'd'.*--allow-empty-full") as caught:
        w.close()
    assert (w.records, w.bytes, w.files) == (0, 0, 0)
    again = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(again, EmptyFullFeed) and str(again) == str(caught.value)


def test_a_file_name_that_is_not_utf8_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "ok.txt").write_text("fine")
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"latin-1 name")
    argv = ["build", str(root), "--base-url", "http://f.example.com/", "--datasource", "d"]
    assert main([*argv, "--out", str(tmp_path / "stop")]) == 1
    assert "caf\\xe9.txt: the file name is not valid UTF-8" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "skip"), "--on-error", "skip"]) == 1
    assert "not valid UTF-8" in (tmp_path / "skip" / "rejected.log").read_text()
    assert [f.url for f in decode_set(tmp_path / "skip")] == ["http://f.example.com/ok.txt"]


def test_a_directory_walk_keeps_its_order_links_and_refusals(tmp_path: Path) -> None:
    """A directory's files come before its subdirectories, each in name order (so the feed's
    order does not change between builds); a link to a file is the file, a link to a directory
    is not entered (the files would come twice), the output directory inside the input is left
    out, and what cannot be a record is refused by name, a directory not named in UTF-8
    included."""
    root = tmp_path / "share"
    for sub in ["b", "a/deep", "out"]:
        (root / sub).mkdir(parents=True)
    for name in ["z.txt", "B.txt", "a/1.txt", "a/deep/2.txt", "b/3.txt", "\u00e9.txt"]:
        (root / name).write_text(name)
    (root / "link.txt").symlink_to(root / "z.txt")
    (root / "link-dir").symlink_to(root / "a")
    os.mkfifo(root / "pipe")
    bad_dir = os.fsencode(root) + b"/d\xff"
    os.mkdir(bad_dir)
    with open(bad_dir + b"/x.txt", "wb") as f:
        f.write(b"x")
    out = root / "out"
    argv = ["build", str(root), "--base-url", "http://f.example.com/", "--datasource", "d"]
    assert main([*argv, "--out", str(out), "--on-error", "skip"]) == 1
    assert [f.url.removeprefix("http://f.example.com/") for f in decode_set(out)] == [
        "B.txt",
        "link.txt",
        "z.txt",
        "%C3%A9.txt",
        "a/1.txt",
        "a/deep/2.txt",
        "b/3.txt",
    ]
    assert (out / "rejected.log").read_text().splitlines() == [
        f"{root}/pipe: not a regular file (a FIFO, socket or device)",
        f"{root}/d\\xff/x.txt: the file name is not valid UTF-8: rename the file",
    ]


def test_a_directory_walk_that_fails_stops_the_build_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The walk runs ahead on a thread of its own; what stops it must reach the user."""
    root = tmp_path / "share"
    root.mkdir()
    for i in range(3000):  # several batches before the bad entry
        (root / f"a{i:04}.txt").write_text("fine")
    (root / "b-dangling").symlink_to(tmp_path / "gone")
    argv = ["build", str(root), "--base-url", "http://f.example.com/", "--datasource", "d"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert f"{root / 'b-dangling'}: cannot read the file: No such file or directory" in err
    assert not (tmp_path / "o" / "manifest.jsonl").exists()


def test_the_summary_counts_in_words_that_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(tmp_path, [doc(1)]) == 0
    assert "wrote 1 record into 1 file (" in capsys.readouterr().err
    assert build(tmp_path, [doc(1), doc(2)], out="two") == 0
    assert "wrote 2 records into 1 file (" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b"not json", "not_json"),
        (b"\xef\xbb\xbf{}", "not_json"),
        (b'{"url": "http://a.example.com/1", "conent": "x"}', "unknown_field"),
        (b'{"content": "x"}', "missing"),
        (b'{"url": "http://a.example.com/1", "pagerank": 5}', "invalid"),
        (b'{"url": "http://a.example.com/1", "action": "update"}', "not_allowed"),
        (b'{"url": "http://a.example.com/1", "content_path": "/no/such/file"}', "unreadable"),
    ],
)
def test_a_refused_record_says_what_kind_of_refusal_it_is(
    tmp_path: Path, line: bytes, kind: str
) -> None:
    # Programs sort refusals by `kind` (stable names); people read the message.
    with FeedWriter(tmp_path / "out", "api") as w, pytest.raises(RecordError) as info:
        w.add_jsonl(b'{"url": "http://a.example.com/0"}\n' + line + b"\n")
    assert (info.value.index, info.value.kind) == (1, kind)


def test_the_batch_api_names_the_same_kinds(tmp_path: Path) -> None:
    with FeedWriter(tmp_path / "out", "api") as w:
        for record, kind in [
            ({"url": "http://a.example.com/1", "conent": "x"}, "unknown_field"),
            ({"url": "http://a.example.com/1", "pagerank": 5}, "invalid"),
        ]:
            with pytest.raises(RecordError) as info:
                w.add_batch([record])  # type: ignore[list-item]
            assert info.value.kind == kind


@pytest.mark.parametrize(
    "record",
    [
        {"url": 5},
        {"url": "http://a.example.com/1", "lock": "yes"},
        {"url": "http://a.example.com/1", "colour": None},
        {"url": "http://a.example.com/1", "metadata": {"tags": ["a", 5]}},
        {"url": "http://a.example.com/1", "last_modified": True},
        {"url": "http://a.example.com/1", "acl": {"principals": [{"name": "a", "acess": "deny"}]}},
        {"url": "http://a.example.com/1", "content": "x", "content_base64": "eA=="},
    ],
)
def test_a_dict_is_refused_as_its_json_line_is(tmp_path: Path, record: dict[str, object]) -> None:
    # One schema reads both: the same field, reason and kind, whichever way a record comes.
    with FeedWriter(tmp_path / "dict", "api") as w, pytest.raises(RecordError) as as_dict:
        w.add_batch([record])  # type: ignore[list-item]
    with FeedWriter(tmp_path / "line", "api") as w, pytest.raises(RecordError) as as_line:
        w.add_jsonl(orjson.dumps(record) + b"\n")
    refusal = (as_dict.value.field, as_dict.value.reason, as_dict.value.kind)
    assert refusal == (as_line.value.field, as_line.value.reason, as_line.value.kind)


#: Runs `fastfeed argv[3:]` under a limit of argv[1] descriptors, of which it holds all but
#: argv[2] open (on /dev/null) first, as a caller holding most of its descriptors would.
HOLDING_MOST = """
import os, resource, sys
limit, free = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
# Imported first, so that the build needs no descriptor to import them.
import fastfeed.gsa.build, fastfeed.sets.tables
from fastfeed.cli import main
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
for fd in held[len(held) - free :]:
    os.close(fd)
sys.exit(main(sys.argv[3:]))
"""


def test_a_build_by_path_takes_the_descriptors_the_caller_left_free(tmp_path: Path) -> None:
    """Files by content_path held open ahead of their encoding take a share of the descriptors
    free, not of the limit: a caller holding all but 24 of 256 builds the same feed as one
    holding none, in as little memory. (A quarter of the limit, 64, took every descriptor
    free: the encoding threads could open no file, and stopped the build with EMFILE, or the
    files the planner could not open counted as empty, and a round held them all, 400 MB.)
    With about none free, the build stops and says what to do."""
    first, src = linked_files(tmp_path, 200_000, 1_500, seed=7)

    def run(free: int, out: str) -> list[str]:
        argv = ["build", str(src), "--datasource", "d", "--out", str(tmp_path / out)]
        # Two encoding threads, as many files read at once, whatever the machine's cores.
        return [sys.executable, "-c", HOLDING_MOST, "256", str(free), *argv, "--workers", "2"]

    assert main(["build", str(src), "--datasource", "d", "--out", str(tmp_path / "free")]) == 0
    peak = peak_rss_of(run(24, "held"))
    assert peak < 128 << 20, peak
    feeds = sorted(p.name for p in (tmp_path / "free").glob("*.xml"))
    assert feeds == sorted(p.name for p in (tmp_path / "held").glob("*.xml"))
    for name in feeds:
        assert (tmp_path / "held" / name).read_bytes() == (tmp_path / "free" / name).read_bytes()
    for free in (1, 2):
        done = subprocess.run(run(free, f"none{free}"), capture_output=True, text=True, check=False)
        assert done.returncode == 1
        assert "Too many open files" in done.stderr and "ulimit -n" in done.stderr, done.stderr
