"""A set built by the Thunderstone writer, pushed to the emulated appliance over HTTPS: what the
profile holds afterwards is the input (text, binary bytes via RawData, base64 fallbacks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import TLSFiles
from fastfeed import read_manifest
from fastfeed.cli import main
from fastfeed.delivery.results import Outcome
from fastfeed.emulator import Emulator
from fastfeed.thunderstone.push import push, url_settings
from fastfeed.thunderstone.recvdata import UPDATE_INDEXES
from fastfeed.thunderstone.writer import ThunderstoneWriter

BINARY = bytes(range(256)) * 40 + b"\x00\xff"


def record(n: int, **fields: Any) -> dict[str, Any]:
    return {"url": f"http://docs.example.com/{n}", **fields}


RECORDS = [
    record(
        1,
        content="Prix: 100% + taxes & frais = <total>\r\n\u00e9t\u00e9 \u4e2d\u6587 \U0001f600",
        mimetype="text/html",
        last_modified="2024-05-01T12:00:00Z",
        metadata={
            "title": "Sprockets & gears",
            "keywords": ["sprockets", "gears"],
            "description": "Sprocket details",
            "category": "Mechanical",
            "owner": "ops",
            "dept": ["a", "b"],
        },
    ),
    record(2, content=BINARY, mimetype="application/pdf"),
    record(3, content="bell\x07 and nul-free control \x1b", metadata={"title": "t\x01"}),
    record(4, content="four"),
    record(5, content="five", metadata={"title": "Five"}),
    record(6, content="six"),
    record(7, content="seven"),
]
CHANGES = [
    {"url": "http://docs.example.com/4", "action": "delete"},
    record(5, action="update", metadata={"description": "added later"}),
    {"url": "http://docs.example.com/[67]*", "action": "delete-pattern"},
    {"url": "http://docs.example.com/6*", "action": "delete-pattern"},
]


def test_a_built_set_reaches_the_profile_as_its_input(
    tmp_path: Path, emulator: Emulator, tls: TLSFiles
) -> None:
    out = tmp_path / "set"
    with ThunderstoneWriter(out, "docs", max_records=3) as writer:
        writer.add_batch(RECORDS + CHANGES)  # type: ignore[arg-type]
    assert len(read_manifest(out)) == 4
    url = f"{emulator.url}/texis/dowalk/recvdata.xml"

    summary = push(out, url, url_settings(url, cacert=str(tls.ca_path)))

    assert summary.ok and not summary.failed_items
    assert summary.results[-1].feed.entry.file == UPDATE_INDEXES
    assert {r.outcome for r in summary.results} == {Outcome.ACCEPTED}
    docs = emulator.thunderstone_documents("docs")
    # 4 deleted; the pattern with brackets matched nothing (only * is special); 6 by pattern.
    assert sorted(docs) == [f"http://docs.example.com/{n}" for n in (1, 2, 3, 5, 7)]
    first = docs["http://docs.example.com/1"].fields
    assert first["Body"] == RECORDS[0]["content"]
    assert first["Title"] == "Sprockets & gears"
    assert first["Keywords"] == "sprockets, gears"
    assert first["Description"] == "Sprocket details"
    assert first["Category"] == "Mechanical"
    assert first["Meta"].splitlines() == ["dept: a", "dept: b", "owner: ops"]
    assert first["Modified"] == "2024-05-01 12:00:00"
    assert first["MimeType"] == "text/html" and first["Charset"] == "UTF-8"
    assert docs["http://docs.example.com/2"].raw_data == BINARY
    assert docs["http://docs.example.com/2"].fields["MimeType"] == "application/pdf"
    third = docs["http://docs.example.com/3"]
    assert third.fields["Body"] == RECORDS[2]["content"] and third.fields["Title"] == "t\x01"
    assert {"Body", "Title"} <= third.encoded
    # The update added its field and kept the others.
    fifth = docs["http://docs.example.com/5"].fields
    assert fifth["Description"] == "added later"
    assert fifth["Title"] == "Five" and fifth["Body"] == "five"


def test_build_then_push_from_the_command_line(
    tmp_path: Path, emulator: Emulator, tls: TLSFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    records = tmp_path / "docs.jsonl"
    records.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (RECORDS[0], RECORDS[2])))
    out = tmp_path / "set"
    assert main(["build", str(records), "--format", "thunderstone", "--profile", "docs",
                 "--out", str(out), "--max-records", "1"]) == 0  # fmt: skip
    url = f"{emulator.url}/texis/dowalk/recvdata.xml"

    status = main(["thunderstone", "push", str(out), "--url", url, "--cacert", str(tls.ca_path)])

    assert status == 0, capsys.readouterr().err
    docs = emulator.thunderstone_documents("docs")
    assert docs["http://docs.example.com/1"].fields["Body"] == RECORDS[0]["content"]
    assert docs["http://docs.example.com/3"].fields["Title"] == "t\x01"
    assert [r.items[0][0] for r in emulator.thunderstone_requests()] == ["I", "I", "UI"]
