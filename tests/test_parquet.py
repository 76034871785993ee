"""Parquet and Arrow files as inputs of `fastfeed build` and `fastfeed run`."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from conftest import cli_target
from fastfeed import FeedError, InputError, PushSettings, _core, sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.snapshot import Snapshot

pytestmark = pytest.mark.usefixtures("clean_env")


def corpus(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "url": f"http://docs.example.com/{i}",
            "content": f"document {i} <&> " * 20,
            "metadata": {"author": f"a{i % 7}", "tags": ["x", str(i)]},
            "last_modified": 1_700_000_000 + i,
        }
        for i in range(start, start + n)
    ]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def build(*argv: str) -> int:
    return main(["build", *argv, "--datasource", "docs", "--max-bytes", "100000"])


#: Every codec the core reads (pyarrow writes LZ4 as LZ4_RAW).
CODECS = ["none", "snappy", "zstd", "gzip", "lz4", "brotli"]


@pytest.mark.parametrize("codec", CODECS)
def test_a_parquet_file_builds_the_same_feed_as_its_json_lines(tmp_path: Path, codec: str) -> None:
    rows = corpus(3000)
    # Small row groups: several batches, read one after the other.
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=500, compression=codec)
    jsonl(tmp_path / "docs.jsonl", rows)

    assert build(str(tmp_path / "docs.parquet"), "--out", str(tmp_path / "pq")) == 0
    assert build(str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / "jl")) == 0

    built = files(tmp_path / "pq")
    assert len(built) > 3 and built == files(tmp_path / "jl")


def test_arrow_and_feather_files_and_globs_are_inputs_too(tmp_path: Path) -> None:
    parts = [corpus(100, start) for start in (0, 100, 200, 300)]
    tables = [pa.Table.from_pylist(p) for p in parts]
    pq.write_table(tables[0], tmp_path / "a.parquet")
    feather.write_feather(tables[1], tmp_path / "b.feather")
    with ipc.new_file(tmp_path / "c.arrow", tables[2].schema) as f:  # the IPC file format
        f.write_table(tables[2])
    with ipc.new_stream(tmp_path / "d.arrow", tables[3].schema) as f:  # the stream format
        f.write_table(tables[3])
    jsonl(tmp_path / "all.jsonl", [r for p in parts for r in p])

    # Quoted from the shell: fastfeed expands the glob, in name order.
    assert build(str(tmp_path / "[abcd].*"), "--out", str(tmp_path / "glob")) == 0
    assert build(str(tmp_path / "all.jsonl"), "--out", str(tmp_path / "jl")) == 0
    assert files(tmp_path / "glob") == files(tmp_path / "jl")

    assert build(str(tmp_path / "*.nothing"), "--out", str(tmp_path / "none")) != 0


def test_refused_rows_name_file_and_row_and_are_saved_to_feed_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [r | {"pagerank": None} for r in corpus(10)]  # a column is made from the first row
    rows[3]["pagerank"] = 40
    rows[7]["url"] = "http://intranet/7"
    table = pa.Table.from_pylist(rows).set_column(
        1, "content", pa.array([r["content"].encode() for r in rows], pa.binary())
    )
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=4)

    assert build(str(tmp_path / "docs.parquet"), "--out", str(tmp_path / "stop")) == 1
    assert "docs.parquet, row 3: pagerank: 40 is outside 68 to 100" in capsys.readouterr().err
    assert not (tmp_path / "stop" / "manifest.jsonl").exists()

    out = tmp_path / "skip"
    assert build(str(tmp_path / "docs.parquet"), "--out", str(out), "--on-error", "skip") == 1
    log = (out / "rejected.log").read_text().splitlines()
    assert [line.split(":")[0] for line in log] == [
        f"{tmp_path / 'docs.parquet'}, row 3",
        f"{tmp_path / 'docs.parquet'}, row 7",
    ]
    saved = [json.loads(line) for line in (out / "rejected.jsonl").read_bytes().splitlines()]
    assert saved[0]["pagerank"] == 40 and saved[1]["url"] == "http://intranet/7"
    assert base64.b64decode(saved[0]["content_base64"]) == rows[3]["content"].encode()
    assert sum(e["records"] for e in map(json.loads, (out / "manifest.jsonl").open())) == 8


@pytest.mark.parametrize("cut", ["end", "middle"])
def test_a_damaged_parquet_file_stops_the_build_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: str
) -> None:
    """Never a shorter feed: a file that cannot be read whole writes no manifest."""
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(corpus(2000)), src, row_group_size=500)
    data = bytearray(src.read_bytes())
    if cut == "end":  # truncated: the footer that says where the rows are is gone
        src.write_bytes(data[: len(data) * 2 // 3])
    else:  # the footer is whole, the pages of the third row group are not
        group = pq.ParquetFile(tmp_path / "docs.parquet").metadata.row_group(2).column(1)
        start = group.data_page_offset
        data[start : start + group.total_compressed_size] = b"\xff" * group.total_compressed_size
        src.write_bytes(data)

    assert build(str(src), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"{src}: cannot be read whole" in err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_column_that_is_no_record_field_stops_the_build_naming_file_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(
        pa.table({"url": ["http://a.example.com/"], "tilte": ["x"]}), tmp_path / "t.parquet"
    )
    assert build(str(tmp_path / "t.parquet"), "--out", str(tmp_path / "out")) == 1
    assert "t.parquet: unknown column 'tilte'" in capsys.readouterr().err


def dataset(directory: Path, rows: list[dict[str, Any]], per_file: int) -> Path:
    """Writes `rows` as a pipeline writes a dataset: part files of `per_file` rows, in order,
    beside the bookkeeping Spark and pyarrow leave (a success mark, summaries, checksums)."""
    table = pa.Table.from_pylist(rows)
    ds.write_dataset(
        table,
        directory,
        format="parquet",
        basename_template="part-{i}.snappy.parquet",
        max_rows_per_file=per_file,
        max_rows_per_group=per_file,
        use_threads=False,
        existing_data_behavior="overwrite_or_ignore",
    )
    (directory / "_SUCCESS").write_bytes(b"")
    pq.write_metadata(table.schema, directory / "_common_metadata")
    (directory / ".part-0.snappy.parquet.crc").write_bytes(b"crc")
    return directory


@pytest.mark.parametrize("name", ["docs.parquet", "export"])
def test_a_dataset_directory_builds_the_same_feed_as_its_rows_in_one_file(
    tmp_path: Path, name: str
) -> None:
    """Read as the glob of its part files would be (without --base-url, any directory holding
    table files; a directory named like a table, whatever --base-url says), bookkeeping
    passed over."""
    rows = corpus(250)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "one.parquet")
    directory = dataset(tmp_path / name, rows, per_file=100)
    assert len(list(directory.glob("part-*.parquet"))) == 3
    base_url = ["--base-url", "http://files.example.com/"] if name.endswith(".parquet") else []
    assert build(str(directory), *base_url, "--out", str(tmp_path / "ds")) == 0
    assert build(str(tmp_path / "one.parquet"), "--out", str(tmp_path / "one")) == 0
    assert files(tmp_path / "ds") == files(tmp_path / "one")


@pytest.mark.parametrize(
    "problem",
    ["stray file", "partition", "empty", "still written", "Delta Lake table", "Spark streaming",
     "Databricks commit"],
)  # fmt: skip
def test_a_dataset_directory_that_cannot_be_read_whole_stops_the_build_naming_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    """Never a feed of part of a dataset: a file that is no table is not passed over, nor a
    partition whose value is only in its directory's name."""
    directory = dataset(tmp_path / "docs.parquet", corpus(20), per_file=10)
    if problem == "stray file":
        named = directory / "notes.jsonl"
        named.write_bytes(orjson.dumps(corpus(1, start=99)[0]) + b"\n")
        why = "is not a Parquet or Arrow file"
    elif problem == "partition":
        named = directory / "year=2024"
        ds.write_dataset(pa.Table.from_pylist(corpus(5, start=50)), named, format="parquet")
        why = "is a subdirectory of the dataset"
    elif problem == "empty":
        for part in directory.glob("part-*"):
            part.unlink()
        named, why = directory, "is an empty dataset"
    elif problem == "still written":
        (directory / "_temporary").mkdir()
        named, why = directory, "holds _temporary: it is still being written"
    elif problem == "Delta Lake table":
        (directory / "_delta_log").mkdir()
        named, why = directory, "holds _delta_log: it is a Delta Lake table"
    elif problem == "Spark streaming":  # its log names the committed files, not all of them
        (directory / "_spark_metadata").mkdir()
        named, why = directory, "holds _spark_metadata: it is the output of a Spark streaming"
    else:
        (directory / "_committed_8167").write_bytes(b'{"added":["part-0.snappy.parquet"]}')
        named, why = directory, "holds _committed_8167: it was written by Databricks'"
    assert build(str(directory), "--out", str(tmp_path / "out")) == 1
    assert f"{named} {why}" in capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_dataset_named_with_a_slash_is_read_as_its_part_files_in_their_writer_order(
    tmp_path: Path,
) -> None:
    """As the shell completes it (`docs.parquet/`), whatever --base-url says; Dask numbers its
    parts without padding, and `part.10` holds rows after `part.2`'s."""
    rows = corpus(120)
    directory = tmp_path / "docs.parquet"
    directory.mkdir()
    for part in range(12):
        pq.write_table(pa.Table.from_pylist(rows[part * 10 : part * 10 + 10]),
                       directory / f"part.{part}.parquet")  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "one.parquet")
    url = ["--base-url", "http://files.example.com/"]
    assert build(f"{directory}{os.sep}", *url, "--out", str(tmp_path / "ds")) == 0
    assert build(str(tmp_path / "one.parquet"), "--out", str(tmp_path / "one")) == 0
    assert files(tmp_path / "ds") == files(tmp_path / "one")


def test_a_sync_state_inside_a_dataset_is_refused_before_it_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It would go with the dataset when its writer overwrites it (a sync then resends all
    and never deletes what left the source), and be refused as a stray file next time."""
    directory = dataset(tmp_path / "docs.parquet", corpus(20), per_file=10)
    state = directory / "docs.state"
    argv = ["sync", str(directory), "--datasource", "docs", "--state", str(state), "--dry-run"]
    argv += ["--host", "appliance.example.com"]
    assert main(argv) != 0
    assert f"the state {state} is inside the directory {directory}" in capsys.readouterr().err
    assert sorted(p.name for p in directory.glob("docs.state*")) == []


def test_a_directory_without_dataset_files_is_still_a_tree_of_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "a.txt").write_text("a document")
    assert build(str(tmp_path / "share"), "--out", str(tmp_path / "out")) == 1
    assert f"{tmp_path / 'share'} is a directory: give --base-url" in capsys.readouterr().err
    built = ["--base-url", "http://files.example.com/", "--out", str(tmp_path / "ok")]
    assert build(str(tmp_path / "share"), *built) == 0
    assert b"http://files.example.com/a.txt" in b"".join(files(tmp_path / "ok").values())


def test_parquet_needs_no_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The core reads Parquet: building and syncing it work without pyarrow installed."""
    rows = corpus(50)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    jsonl(tmp_path / "d.jsonl", rows)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError

    assert build(str(tmp_path / "d.parquet"), "--out", str(tmp_path / "pq")) == 0
    assert build(str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "jl")) == 0
    assert files(tmp_path / "pq") == files(tmp_path / "jl")
    snapshot = sync([str(tmp_path / "d.parquet")], tmp_path / "s.state", "docs",
                    PushSettings(host="never.example.com"), dry_run=True)  # fmt: skip
    assert snapshot.diff.new == 50


def test_row_groups_larger_than_a_batch_are_read_whole_in_order(tmp_path: Path) -> None:
    """Rows of 50 KB: a row group of 200 rows (10 MB) is read in batches of about 80, and a
    refused row is named by its row across the whole file."""
    rows = [
        {"url": f"http://docs.example.com/{i}", "content": f"{i:06} " + "x" * 50_000}
        for i in range(400)
    ]
    rows[250]["url"] = "http://intranet/250"
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet", row_group_size=200)
    jsonl(tmp_path / "d.jsonl", rows[:250] + rows[251:])

    out = tmp_path / "pq"
    assert build(str(tmp_path / "d.parquet"), "--out", str(out), "--on-error", "skip") == 1
    assert build(str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "jl")) == 0
    built = files(out)
    rejected, log = built.pop("rejected.jsonl"), built.pop("rejected.log")
    assert built == files(tmp_path / "jl")
    assert log.decode().startswith(f"{tmp_path / 'd.parquet'}, row 250: url: ")
    assert json.loads(rejected) == rows[250]


def test_the_core_reads_every_row_in_order_in_bounded_batches_ending_with_row_groups(
    tmp_path: Path,
) -> None:
    rows = [{"url": f"http://docs.example.com/{i}", "pagerank": i % 100} for i in range(150_000)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet", row_group_size=100_000)
    batches = list(_core.TableFile(tmp_path / "d.parquet"))
    # At most 65,536 rows, and a batch never spans two row groups: an error names its group.
    assert [b.num_rows for b in batches] == [65_536, 100_000 - 65_536, 50_000]
    read = b"".join(_core.rows_json(b) for b in batches)
    assert read == b"".join(orjson.dumps(r) + b"\n" for r in rows)


def test_a_parquet_file_that_shrinks_while_read_stops_instead_of_reading_zeros(
    tmp_path: Path,
) -> None:
    src = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(corpus(4000)), src, row_group_size=1000)
    reading = _core.TableFile(src)
    assert next(reading).num_rows == 1000
    with src.open("r+b") as f:
        f.truncate(src.stat().st_size // 2)
    with pytest.raises(FeedError, match="the file shrank while it was read"):
        list(reading)
    with pytest.raises(FileNotFoundError):
        _core.TableFile(tmp_path / "none.parquet")


def test_a_parquet_file_that_shrinks_while_its_last_batch_is_encoded_stops(
    tmp_path: Path,
) -> None:
    """The last batch's strings are views into the file, read as it is encoded, after the
    reading ahead found no more: the end of the reading still checks the file."""
    src = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(corpus(100)), src)
    reading = _core.TableFile(src)
    assert next(reading).num_rows == 100
    # The reading ahead has found the end by then (a thread of its own).
    time.sleep(0.5)
    with src.open("r+b") as f:
        f.truncate(src.stat().st_size // 2)
    with pytest.raises(FeedError, match="the file shrank while it was read"):
        next(reading)


def test_nested_dictionary_and_timestamp_columns_build_as_their_json_lines(
    tmp_path: Path,
) -> None:
    """metadata as a struct and as a map, acl as a struct of principals, dictionary-encoded
    strings (Arrow dictionaries, kept as such in the file), timestamps."""
    principal = {"name": "CORP\\eng", "scope": "group", "access": "permit"}
    rows = [
        {
            "url": f"http://docs.example.com/{i}",
            "mimetype": ["text/plain", "text/html"][i % 2],
            "last_modified": 1_700_000_000 + 3600 * i,
            "content": f"doc {i} <&>",
            "metadata": {"author": f"a{i % 3}", "tags": ["x", str(i)]},
            "acl": {"principals": [principal | {"access": ["permit", "deny"][i % 2]}]},
        }
        for i in range(200)
    ]
    jsonl(tmp_path / "d.jsonl", rows)
    mimetypes = pa.array([r["mimetype"] for r in rows]).dictionary_encode()
    moments = pa.array(
        [dt.datetime.fromtimestamp(r["last_modified"], dt.UTC) for r in rows],
        pa.timestamp("ms", tz="UTC"),
    )
    table = pa.Table.from_pylist(rows)
    table = table.set_column(1, "mimetype", mimetypes).set_column(2, "last_modified", moments)
    pq.write_table(table, tmp_path / "struct.parquet", row_group_size=64)
    meta = pa.map_(pa.string(), pa.list_(pa.string()))
    maps = pa.array(
        [[("author", [r["metadata"]["author"]]), ("tags", r["metadata"]["tags"])] for r in rows],
        meta,
    )
    pq.write_table(table.set_column(4, "metadata", maps), tmp_path / "map.parquet")
    assert pq.read_schema(tmp_path / "struct.parquet").field("mimetype").type == mimetypes.type

    assert build(str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "jl")) == 0
    for name in ("struct", "map"):
        assert build(str(tmp_path / f"{name}.parquet"), "--out", str(tmp_path / name)) == 0
        assert files(tmp_path / name) == files(tmp_path / "jl")


@pytest.mark.parametrize("damage", ["checksum", "rows"])
def test_a_parquet_file_that_lies_stops_the_build_naming_its_row_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A flipped byte inside a page's values (caught by the page checksum, where the writer
    wrote one), and a footer that counts more rows than a row group holds."""
    src = tmp_path / "docs.parquet"
    table = pa.Table.from_pylist(corpus(2000))
    pq.write_table(
        table,
        src,
        row_group_size=500,
        write_page_checksum=True,
        compression="none",
        use_dictionary=False,
    )
    data = bytearray(src.read_bytes())
    if damage == "checksum":
        content = pq.ParquetFile(src).metadata.row_group(2).column(1)
        at = content.data_page_offset + content.total_compressed_size // 2
        data[at] ^= 0x01
    else:  # the footer's row count of row group 1: in thrift's compact form, field 3 (i64 500
        # as a zigzag varint), then field 5 (file_offset), which a column's count is not
        footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        counts = [i for i in range(footer, len(data)) if data[i : i + 4] == b"\x16\xe8\x07\x26"]
        assert len(counts) == 4  # one per row group
        data[counts[1] + 1 : counts[1] + 3] = b"\xf8\x07"  # 500 -> 508
    src.write_bytes(data)

    assert build(str(src), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    group = 2 if damage == "checksum" else 1
    assert f"{src}: cannot be read whole: row group {group} of 4 (rows {500 * group} to " in err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_run_builds_and_pushes_a_parquet_file(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(pa.Table.from_pylist(corpus(300)), tmp_path / "docs.parquet")
    argv = ["run", str(tmp_path / "docs.parquet"), "--datasource", "docs", "--feedtype", "full"]
    status = main(
        [*argv, "--max-records", "100", "--out", str(tmp_path / "set"), *cli_target(emulator, tls)]
    )
    assert status == 0, capsys.readouterr().err
    emulator.wait_idle()
    assert len(emulator.documents("docs")) == 300


def test_run_and_sync_take_a_dataset_directory(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` pushes a dataset's rows; `sync` compares them, then reads the changed ones again
    in their part files."""
    rows = [{"url": f"http://e.example.com/{n}", "content": f"doc {n}"} for n in range(300)]
    directory = dataset(tmp_path / "docs.parquet", rows, per_file=100)
    target = cli_target(emulator, tls)
    run = ["run", str(directory), "--datasource", "docs", "--feedtype", "full"]
    assert main([*run, "--out", str(tmp_path / "run"), *target]) == 0, capsys.readouterr().err
    emulator.wait_idle()
    assert len(emulator.documents("docs")) == 300

    synced = ["sync", str(directory), "--datasource", "synced", "--json", *target]
    synced += ["--state", str(tmp_path / "docs.state")]
    assert main([*synced, "--out", str(tmp_path / "s1")]) == 0
    rows[150]["content"] = "changed"
    dataset(directory, rows[:200], per_file=100)
    (directory / "part-2.snappy.parquet").unlink()  # its rows are gone from the source
    capsys.readouterr()
    # A third of the documents gone: a dataset read while written looks the same, so it takes
    # the user's word.
    assert main([*synced, "--out", str(tmp_path / "refused")]) != 0
    assert "--allow-deletes" in capsys.readouterr().err
    assert main([*synced, "--out", str(tmp_path / "s2"), "--allow-deletes", "100"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["new"], summary["changed"], summary["deleted"]) == (0, 1, 100)
    emulator.wait_idle()
    held = emulator.documents("synced")
    assert len(held) == 200 and held["http://e.example.com/150"].content == b"changed"


def test_a_parquet_snapshot_syncs_as_its_json_lines_would(
    emulator: Emulator, push_settings: Callable[..., PushSettings], tmp_path: Path
) -> None:
    records = [{"url": f"http://e.example.com/{n}", "content": f"doc {n}"} for n in range(300)]
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(records), src, row_group_size=100)
    state, settings = tmp_path / "docs.state", push_settings(emulator)
    first = sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s1")
    assert first.ok and first.diff.new == 300

    records[7]["content"] = "changed"
    del records[9]
    pq.write_table(pa.Table.from_pylist(records), src, row_group_size=100)
    again = sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s2")

    assert again.ok and (again.diff.changed, again.diff.deleted) == (1, 1)
    emulator.wait_idle()
    held = emulator.documents("docs")
    assert len(held) == 299 and held["http://e.example.com/7"].content == b"changed"


def _kept(n: int) -> dict[str, Any]:
    return {"url": f"http://e.example.com/{n}", "content": f"kept {n:05}"}


def test_a_parquet_snapshot_is_read_in_place_never_copied_to_the_work_directory(
    emulator: Emulator, push_settings: Callable[..., PushSettings], tmp_path: Path
) -> None:
    """Its rows are read from the file both times (to compare, then to build what changed): the
    work directory never holds them, which as JSON Lines were many times the file's size."""
    records = [_kept(n) for n in range(3000)]
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(records), src, row_group_size=500)
    state, settings = tmp_path / "docs.state", push_settings(emulator)
    seen: set[str] = set()  # the files of the work directories while the syncs run
    copies: set[str] = set()  # those that held a row that did not change
    syncing = True

    def watch() -> None:
        while syncing:
            # A work directory can go while it is listed or read: look again on the next round.
            with contextlib.suppress(OSError):
                for file in tmp_path.glob(".docs.state.sync-*/*"):
                    with contextlib.suppress(OSError):
                        held = file.read_bytes()
                        seen.add(file.name)
                        if b"kept 01000" in held:
                            copies.add(file.name)
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        # Each answer takes 0.1 s: the syncs last long enough to be watched.
        emulator.add_fault(Fault(kind="slow", seconds=0.1, times=100))
        assert sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s1",
                    max_records=1000).ok  # fmt: skip
        for n in (7, 1500, 2999):  # in three row groups, read again from the file
            records[n]["content"] = f"changed {n}"
        pq.write_table(pa.Table.from_pylist(records), src, row_group_size=500)
        again = sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s2")
    finally:
        syncing = False
        watcher.join()

    assert again.ok and again.diff.changed == 3
    assert "changes.jsonl" in seen and not copies
    emulator.wait_idle()
    assert emulator.documents("docs")["http://e.example.com/2999"].content == b"changed 2999"


@pytest.mark.parametrize("in_place", [False, True], ids=["rewritten", "same size, mtime put back"])
def test_a_parquet_snapshot_rewritten_between_its_readings_is_refused(
    emulator: Emulator,
    push_settings: Callable[..., PushSettings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    in_place: bool,
) -> None:
    """Its changed rows are read again from the file: one rewritten once compared would send
    rows whose fingerprints the state never saw. Refused, nothing sent; the next sync sends it.
    Also a rewrite of the same size whose modification time is put back (a copy keeping
    times): only the change time tells it."""
    records = [_kept(n) for n in range(300)]
    src = tmp_path / "docs.parquet"

    def write() -> None:
        # Uncompressed, so that contents of one length make files of one size.
        pq.write_table(pa.Table.from_pylist(records), src, row_group_size=100, compression="NONE")

    write()
    state, settings = tmp_path / "docs.state", push_settings(emulator)
    assert sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s1").ok
    emulator.wait_idle()
    records[250]["content"] = "compared"
    write()
    compare = Snapshot.compare

    def rewritten_once_compared(self: Snapshot, *args: Any, **kwargs: Any) -> Any:
        diff = compare(self, *args, **kwargs)
        before = src.stat()
        records[250]["content"] = "rewrote!" if in_place else "rewritten"
        write()
        if in_place:
            assert src.stat().st_size == before.st_size
            os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))
        return diff

    monkeypatch.setattr(Snapshot, "compare", rewritten_once_compared)
    with pytest.raises(InputError) as refused:
        sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s2")
    assert str(refused.value).startswith(f"{src}: the file changed while the sync read it")
    assert emulator.documents("docs")["http://e.example.com/250"].content == b"kept 00250"

    monkeypatch.undo()
    again = sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s3")
    assert again.ok and again.diff.changed == 1
    emulator.wait_idle()
    content = b"rewrote!" if in_place else b"rewritten"
    assert emulator.documents("docs")["http://e.example.com/250"].content == content


def test_a_refused_row_of_a_parquet_snapshot_is_named_by_its_row(tmp_path: Path) -> None:
    src = tmp_path / "docs.parquet"
    rows = [
        {"url": "http://e.example.com/1", "action": None},
        {"url": "http://e.example.com/2", "action": "drop"},
    ]
    pq.write_table(pa.Table.from_pylist(rows), src)
    with pytest.raises(InputError) as refused:
        sync([str(src)], tmp_path / "s.state", "docs", PushSettings(host="never.example.com"),
             dry_run=True)  # fmt: skip
    assert str(refused.value).startswith(f"{src}, row 1: ")
