"""Arrow IPC files (`.arrow`, `.feather`, `.ipc`: the file and the stream format) as inputs of
`fastfeed build`, `run` and `sync`, read by the Rust core without pyarrow. pyarrow writes them
here."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from conftest import cli_target
from fastfeed import FeedError, PushSettings, _core, sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator
from test_parquet import build, corpus, files, jsonl

pytestmark = pytest.mark.usefixtures("clean_env")

#: What ends an Arrow IPC stream: a continuation marker and a message of length 0.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def write(
    path: Path,
    table: pa.Table,
    form: str = "file",
    compression: str | None = None,
    rows: int = 500,
) -> Path:
    """`table` as an Arrow IPC file of the format `form`, in batches of `rows` rows."""
    options = ipc.IpcWriteOptions(compression=compression)
    opened = ipc.new_file if form == "file" else ipc.new_stream
    with opened(path, table.schema, options=options) as writer:
        for batch in table.to_batches(max_chunksize=rows):
            writer.write_batch(batch)
    return path


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("form", ["file", "stream"])
def test_an_arrow_file_builds_the_same_feed_as_its_json_lines(
    tmp_path: Path, form: str, compression: str | None
) -> None:
    rows = corpus(3000)
    src = write(tmp_path / "docs.arrow", pa.Table.from_pylist(rows), form, compression)
    jsonl(tmp_path / "docs.jsonl", rows)

    assert build(str(src), "--out", str(tmp_path / "ipc")) == 0
    assert build(str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / "jl")) == 0
    built = files(tmp_path / "ipc")
    assert len(built) > 3 and built == files(tmp_path / "jl")


@pytest.mark.parametrize("compression", ["uncompressed", "zstd"])
def test_an_arrow_file_written_by_polars_builds_the_same_feed_as_its_json_lines(
    tmp_path: Path, compression: str
) -> None:
    """Polars writes a bare schema after the file's magic, not a message as pyarrow does:
    readers skip it, and so must the check that the footer lists every batch."""
    import polars

    rows = corpus(3000)
    parts = [polars.DataFrame(rows[:1000]), polars.DataFrame(rows[1000:])]
    src = tmp_path / "docs.arrow"
    polars.concat(parts, rechunk=False).write_ipc(src, compression=compression)
    jsonl(tmp_path / "docs.jsonl", rows)

    assert build(str(src), "--out", str(tmp_path / "ipc")) == 0
    assert build(str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / "jl")) == 0
    built = files(tmp_path / "ipc")
    assert len(built) > 3 and built == files(tmp_path / "jl")


def test_arrow_column_types_build_as_add_arrow_takes_them(tmp_path: Path) -> None:
    """Dictionary-encoded, string-view, large strings and bytes, a column of nulls, nulls in
    optional columns, a slice of a table: read as `add_arrow` reads them."""
    rows = corpus(1200)
    for i, row in enumerate(rows):
        row["mimetype"] = [None, "text/plain", "text/html"][i % 3]
    jsonl(tmp_path / "d.jsonl", rows[100:1100])
    table = pa.Table.from_pylist(rows)
    n = table.num_rows
    table = (
        table.set_column(0, "url", table["url"].cast(pa.string_view()))
        .set_column(1, "content", table["content"].cast(pa.large_string()))
        .append_column("mimetype_", table["mimetype"].dictionary_encode())
        .drop_columns("mimetype")
        .rename_columns(["url", "content", "metadata", "last_modified", "mimetype"])
        .append_column("displayurl", pa.nulls(n))
    )
    assert pa.types.is_dictionary(table.schema.field("mimetype").type)
    write(tmp_path / "d.arrow", table.slice(100, 1000), rows=300)
    binary = table.set_column(1, "content", table["content"].cast(pa.large_binary()))
    write(tmp_path / "b.arrows", binary.slice(100, 1000), "stream", "zstd", rows=300)

    assert build(str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "jl")) == 0
    assert build(str(tmp_path / "d.arrow"), "--out", str(tmp_path / "text")) == 0
    assert files(tmp_path / "text") == files(tmp_path / "jl")
    # Bytes are bytes: as the same records with their content in base64.
    as_bytes = [
        {k: v for k, v in r.items() if k != "content"}
        | {"content_base64": base64.b64encode(r["content"].encode()).decode()}
        for r in rows[100:1100]
    ]
    jsonl(tmp_path / "b.jsonl", as_bytes)
    (tmp_path / "b.arrows").rename(tmp_path / "b.ipc")
    assert build(str(tmp_path / "b.jsonl"), "--out", str(tmp_path / "bjl")) == 0
    assert build(str(tmp_path / "b.ipc"), "--out", str(tmp_path / "bytes")) == 0
    assert files(tmp_path / "bytes") == files(tmp_path / "bjl")


@pytest.mark.parametrize("legacy", [False, True])
def test_stream_dictionaries_replaced_or_extended_between_batches_are_read_in_order(
    tmp_path: Path, legacy: bool
) -> None:
    """A stream may send a column's dictionary again (or only what it adds, a delta) before
    each batch; before Arrow 0.15 its messages had no continuation marker."""
    schema = pa.schema([("url", pa.string()), ("mimetype", pa.dictionary(pa.int32(), pa.string()))])
    rows = [{"url": f"http://e.example.com/{k}/{i}", "mimetype": f"t/{k}{i % 2}"}
            for k in range(3) for i in range(4)]  # fmt: skip
    options = ipc.IpcWriteOptions(emit_dictionary_deltas=True, use_legacy_format=legacy)
    with ipc.new_stream(tmp_path / "d.arrow", schema, options=options) as writer:
        # Batch 1's dictionary extends batch 0's (a delta); batch 2's replaces it.
        for k, values in enumerate(
            [["t/00", "t/01"], ["t/00", "t/01", "t/10", "t/11"], ["t/20", "t/21"]]
        ):
            part = rows[4 * k : 4 * k + 4]
            indices = pa.array([values.index(r["mimetype"]) for r in part], pa.int32())
            mimetypes = pa.DictionaryArray.from_arrays(indices, pa.array(values))
            writer.write_batch(pa.record_batch([pa.array([r["url"] for r in part]), mimetypes],
                                               schema=schema))  # fmt: skip
    read = b"".join(_core.rows_json(b) for b in _core.TableFile(tmp_path / "d.arrow"))
    assert read == b"".join(orjson.dumps(r) + b"\n" for r in rows)


def cut_file(src: Path, where: str) -> None:
    """Cuts an Arrow file: in the middle of its third batch, or just before its footer."""
    data = src.read_bytes()
    footer = len(data) - 10 - int.from_bytes(data[-10:-6], "little")
    # The IPC file holds a stream before its footer; its end-of-stream marker ends it.
    assert data[footer - 8 : footer] == END_OF_STREAM
    src.write_bytes(data[: footer - 8] if where == "footer" else data[: len(data) * 5 // 8])


@pytest.mark.parametrize("form", ["file", "stream"])
@pytest.mark.parametrize("where", ["batch", "end"])
def test_a_truncated_arrow_file_stops_the_build_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str, where: str
) -> None:
    """Never a shorter feed: cut in the middle of a batch, or with every batch whole but
    without what ends the file (the footer, the end-of-stream marker)."""
    src = write(tmp_path / "docs.arrow", pa.Table.from_pylist(corpus(2000)), form)
    data = src.read_bytes()
    if form == "file":
        cut_file(src, "footer" if where == "end" else "batch")
    else:
        assert data.endswith(END_OF_STREAM)
        src.write_bytes(data[:-8] if where == "end" else data[: len(data) * 5 // 8])

    assert build(str(src), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    ends = "file ends without its footer" if form == "file" else "stream ends without its end-"
    assert f"{src}: cannot be read whole: the Arrow {ends}" in err
    if where == "end":
        assert "after 4 record batches (2000 rows) (cut short while it was written?)" in err
    else:
        assert "in record batch 2 (rows 1000 to 1499)" in err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def offsets(strings: Sequence[str]) -> bytes:
    """The offsets buffer of a string array, as the IPC format lays it out."""
    at, out = 0, [0]
    for s in strings:
        at += len(s.encode())
        out.append(at)
    return b"".join(o.to_bytes(4, "little") for o in out)


@pytest.mark.parametrize("form", ["file", "stream"])
def test_a_damaged_arrow_batch_stops_the_build_naming_the_batch_and_its_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    # Contents of lengths that make each batch's offsets its own.
    rows = [{"url": f"http://e.example.com/{i}", "content": "x" * (i % 997)} for i in range(2000)]
    src = write(tmp_path / "docs.arrow", pa.Table.from_pylist(rows), form)
    data = bytearray(src.read_bytes())
    # The offsets of the contents of batch 2 (rows 1000 to 1499), a value made to point past
    # the end of the values.
    found = offsets([r["content"] for r in rows[1000:1500]])
    at = data.find(found)
    assert at > 0 and data.find(found, at + 1) < 0
    data[at + 40 : at + 44] = (1 << 30).to_bytes(4, "little")
    src.write_bytes(data)

    assert build(str(src), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"{src}: cannot be read whole: record batch 2 of 4 (rows 1000 to 1499): " in err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_compression_bomb_is_refused_before_its_memory_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A compressed buffer begins with the length it decompresses to, which the decoder
    allocates: one of a terabyte names the batch instead of ending the process."""
    rows = [{"url": f"http://e.example.com/{i}", "content": f"doc {i}"} for i in range(2000)]
    src = write(tmp_path / "docs.arrow", pa.Table.from_pylist(rows), compression="lz4")
    data = bytearray(src.read_bytes())
    frames = [i for i in range(len(data)) if data[i : i + 4] == b"\x04\x22\x4d\x18"]
    assert len(frames) % 4 == 0  # the same buffers in each batch: the LZ4 frames' magic
    at = frames[len(frames) // 2] - 8  # the first buffer of batch 2: its declared length
    data[at : at + 8] = (1 << 40).to_bytes(8, "little")
    src.write_bytes(data)

    assert build(str(src), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"{src}: cannot be read whole: record batch 2 of 4 (rows 1000 to 1499): " in err
    assert "its buffers say they decompress to 1099511" in err  # 1 TB and the rest


def test_columns_that_cannot_be_records_are_refused_naming_the_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = ["http://a.example.com/"]
    write(tmp_path / "t.arrow", pa.table({"url": urls, "tilte": ["x"]}), "stream")
    write(tmp_path / "c.feather", pa.table({"url": urls, "content": pa.array([[1]])}))
    assert build(str(tmp_path / "t.arrow"), "--out", str(tmp_path / "t")) == 1
    assert f"{tmp_path / 't.arrow'}: unknown column 'tilte'" in capsys.readouterr().err
    assert build(str(tmp_path / "c.feather"), "--out", str(tmp_path / "c")) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'c.feather'}: column 'content' is list<int64>: expected strings" in err


def test_files_that_are_no_arrow_ipc_say_what_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = pa.Table.from_pylist(corpus(10))
    pq.write_table(table, tmp_path / "p.arrow")
    # What a Feather version 1 file begins with (pyarrow writes them no more, but they exist).
    (tmp_path / "v1.feather").write_bytes(b"FEA1" + bytes(64))
    assert build(str(tmp_path / "p.arrow"), "--out", str(tmp_path / "p")) == 1
    assert "p.arrow: cannot be read whole: it is a Parquet file: name it .parquet" in (
        capsys.readouterr().err
    )
    assert build(str(tmp_path / "v1.feather"), "--out", str(tmp_path / "v1")) == 1
    assert "write it again as Feather version 2" in capsys.readouterr().err


def test_two_streams_in_one_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What follows an end-of-stream marker would be left out in silence."""
    table = pa.Table.from_pylist(corpus(100))
    one = write(tmp_path / "one.arrow", table, "stream").read_bytes()
    (tmp_path / "two.arrow").write_bytes(one + one)
    assert build(str(tmp_path / "two.arrow"), "--out", str(tmp_path / "out")) == 1
    assert "a second stream after the first is not read" in capsys.readouterr().err


def test_a_large_batch_is_handed_on_in_bounded_slices_in_order(tmp_path: Path) -> None:
    """A table written whole (one batch, as Polars writes a frame) is encoded a slice at a time
    (at most 65,536 rows), as a Parquet row group is: what is held at once stays bounded."""
    rows = [{"url": f"http://docs.example.com/{i}", "pagerank": i % 100} for i in range(150_000)]
    src = write(tmp_path / "d.arrow", pa.Table.from_pylist(rows), rows=len(rows))
    batches = list(_core.TableFile(src))
    assert [b.num_rows for b in batches] == [65_536, 65_536, 150_000 - 2 * 65_536]
    read = b"".join(_core.rows_json(b) for b in batches)
    assert read == b"".join(orjson.dumps(r) + b"\n" for r in rows)


@pytest.mark.parametrize("form", ["file", "stream"])
def test_an_arrow_file_that_shrinks_while_read_stops_instead_of_reading_zeros(
    tmp_path: Path, form: str
) -> None:
    src = write(tmp_path / "d.arrow", pa.Table.from_pylist(corpus(4000)), form, rows=1000)
    reading = _core.TableFile(src)
    assert next(reading).num_rows == 1000
    time.sleep(0.2)  # the reading ahead has read the second batch
    with src.open("r+b") as f:
        f.truncate(src.stat().st_size // 2)
    with pytest.raises(FeedError, match="the file shrank while it was read"):
        list(reading)


def test_run_builds_and_pushes_an_arrow_file(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "docs.arrow", pa.Table.from_pylist(corpus(300)), compression="lz4")
    argv = ["run", str(src), "--datasource", "docs", "--feedtype", "full"]
    status = main(
        [*argv, "--max-records", "100", "--out", str(tmp_path / "set"), *cli_target(emulator, tls)]
    )
    assert status == 0, capsys.readouterr().err
    emulator.wait_idle()
    held = emulator.documents("docs")
    assert len(held) == 300
    assert held["http://docs.example.com/7"].content == corpus(1, 7)[0]["content"].encode()


def test_an_arrow_snapshot_syncs_as_its_json_lines_would(
    emulator: Emulator, push_settings: Callable[..., PushSettings], tmp_path: Path
) -> None:
    records = [{"url": f"http://e.example.com/{n}", "content": f"doc {n}"} for n in range(300)]
    src = tmp_path / "docs.feather"
    settings, state = push_settings(emulator), tmp_path / "docs.state"
    write(src, pa.Table.from_pylist(records), rows=100)
    first = sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s1")
    assert first.ok and first.diff.new == 300

    records[7]["content"] = "changed"
    del records[9]
    write(src, pa.Table.from_pylist(records), "stream", "zstd", rows=100)
    again = sync([str(src)], state, "docs", settings, out_dir=tmp_path / "s2")

    assert again.ok and (again.diff.changed, again.diff.deleted) == (1, 1)
    emulator.wait_idle()
    held = emulator.documents("docs")
    assert len(held) == 299 and held["http://e.example.com/7"].content == b"changed"


#: Runs the CLI with every `pyarrow` import failing, as where it is not installed.
WITHOUT_PYARROW = """
import sys
from importlib.abc import MetaPathFinder

class NoPyarrow(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoPyarrow())
from fastfeed.cli import main
status = main(sys.argv[1:])
assert "pyarrow" not in sys.modules, "pyarrow was imported"
sys.exit(status)
"""


def test_the_cli_builds_arrow_files_without_pyarrow(tmp_path: Path) -> None:
    rows = corpus(1000)
    table = pa.Table.from_pylist(rows)
    write(tmp_path / "a.arrow", table.slice(0, 400), compression="zstd")
    write(tmp_path / "b.arrows", table.slice(400, 400), "stream", "lz4")
    (tmp_path / "b.arrows").rename(tmp_path / "b.ipc")
    feather.write_feather(table.slice(800), tmp_path / "c.feather")
    jsonl(tmp_path / "all.jsonl", rows)
    assert build(str(tmp_path / "all.jsonl"), "--out", str(tmp_path / "jl")) == 0

    argv = ["build", str(tmp_path / "[abc].*"), "--datasource", "docs", "--max-bytes", "100000"]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYARROW, *argv, "--out", str(tmp_path / "ipc")],
        capture_output=True,
        text=True,
        env=os.environ | {"NO_COLOR": "1"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert files(tmp_path / "ipc") == files(tmp_path / "jl")


def refused(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What the build of `src` said, which must stop with no feed."""
    assert build(str(src), "--out", str(tmp_path / "out")) == 1
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    return capsys.readouterr().err


def damage_buffer(data: bytearray, offset: int, length: int, nth: int = -1) -> None:
    """Moves the buffer of the header entry (`offset`, `length`) (the last one found, or the
    `nth`) far past the end of its message's body."""
    entry = offset.to_bytes(8, "little") + length.to_bytes(8, "little")
    found = [i for i in range(len(data)) if data[i : i + 16] == entry]
    assert found
    data[found[nth] : found[nth] + 8] = (1 << 40).to_bytes(8, "little")


@pytest.mark.parametrize("form", ["file", "stream"])
def test_a_buffer_placed_past_its_message_is_refused_naming_the_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """A damaged header (a buffer's offset past the message's body) made the decoder panic: a
    BaseException that ended the build with a traceback."""
    rows = [{"url": f"http://e.example.com/{i}", "content": f"doc {i}"} for i in range(2000)]
    src = write(tmp_path / "docs.arrow", pa.Table.from_pylist(rows), form)
    data = bytearray(src.read_bytes())
    # The offsets of batch 2's urls (501 of them): the entry of each batch is the same.
    damage_buffer(data, 0, 2004, nth=2)
    src.write_bytes(data)

    err = refused(src, tmp_path, capsys)
    assert f"{src}: cannot be read whole: record batch 2 of 4 (rows 1000 to 1499): its buf" in err
    assert "lies past the end of the message's" in err and "Traceback" not in err


def test_a_dictionary_placed_past_its_message_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = pa.table({"url": [f"http://e.example.com/{i}" for i in range(2000)],
                      "mimetype": pa.array(["a/b", "c/d", "e/f"] * 666 + ["a/b"] * 2)
                      .dictionary_encode()})  # fmt: skip
    src = write(tmp_path / "docs.arrow", table, "stream")
    data = bytearray(src.read_bytes())
    damage_buffer(data, 0, 16, nth=0)  # the dictionary's offsets: 4 of them
    src.write_bytes(data)

    err = refused(src, tmp_path, capsys)
    assert "cannot be read whole: the dictionary before record batch 0 of 4 (from row 0): " in err
    assert "lies past the end of the message's" in err


def test_dictionary_deltas_past_what_memory_holds_are_refused_naming_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each delta is added to a dictionary kept whole: a long stream of them would hold (and
    copy) ever more. Past 16 MB they are refused, in the batch where they grow past it."""
    schema = pa.schema([("url", pa.string()), ("content", pa.dictionary(pa.int32(), pa.string()))])
    options = ipc.IpcWriteOptions(emit_dictionary_deltas=True)
    src = tmp_path / "deltas.arrow"
    values: list[str] = []
    with ipc.new_stream(src, schema, options=options) as writer:
        for k in range(4):  # 6 MB of new values in each batch
            values += [f"{k}-{i:04d}-" + "x" * 6000 for i in range(1000)]
            urls = pa.array([f"http://e.example.com/{k}/{i}" for i in range(1000)])
            indices = pa.array(range(k * 1000, (k + 1) * 1000), pa.int32())
            content = pa.DictionaryArray.from_arrays(indices, pa.array(values))
            writer.write_batch(pa.record_batch([urls, content], schema=schema))

    err = refused(src, tmp_path, capsys)
    assert "read whole: the dictionary before record batch 2 of 4 (from row 2000): " in err
    assert "write the file without dictionary deltas, or its dictionary columns as plain" in err


def test_a_footer_listing_fewer_batches_than_the_file_holds_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The footer of a file of 2 batches after the 3 batches of another: the third batch
    would be left out in silence."""
    table = pa.Table.from_pylist(corpus(1500))

    def before_footer(path: Path) -> tuple[bytes, bytes]:
        data = path.read_bytes()
        footer = len(data) - 10 - int.from_bytes(data[-10:-6], "little")
        return data[:footer], data[footer:]

    three, _ = before_footer(write(tmp_path / "three.arrow", table))
    _, footer = before_footer(write(tmp_path / "two.arrow", table.slice(0, 1000)))
    (tmp_path / "hole.arrow").write_bytes(three + footer)
    assert ipc.open_file(tmp_path / "hole.arrow").num_record_batches == 2

    err = refused(tmp_path / "hole.arrow", tmp_path, capsys)
    assert "hole.arrow: cannot be read whole: its footer lists 2 record batches and 0 " in err
    assert "but it holds 3 and 0" in err and "looks damaged" in err


def mapped_rss(path: Path) -> int:
    """The bytes of the file `path` mapped in this process that are in its memory."""
    rss, mapped = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line
            mapped = line.rstrip().endswith(str(path))
        elif mapped and line.startswith("Rss:"):
            rss += int(line.split()[1]) * 1024
    return rss


def test_a_large_batch_holds_only_the_pages_of_the_slices_being_encoded(tmp_path: Path) -> None:
    """A 64 MB batch written whole: once decoded its pages go, and those of each slice once it
    is encoded, rather than all of them staying in memory until the batch is."""
    rows = [{"url": f"http://e.example.com/{i}", "content": f"{i}-" + "x" * 4000}
            for i in range(16_000)]  # fmt: skip
    src = write(tmp_path / "one.arrow", pa.Table.from_pylist(rows), rows=len(rows))
    held = []
    for batch in _core.TableFile(src):
        _core.rows_json(batch)  # touches its values, as encoding it does
        held.append(mapped_rss(src))
    assert len(held) > 10
    assert max(held) < src.stat().st_size // 4, held


def test_a_compressed_batch_is_sliced_by_its_decompressed_size(tmp_path: Path) -> None:
    """Slices of about 4 MB of values: 60 MB of values compressed to little are not handed
    on as 3 slices of 20 MB."""
    rows = [{"url": f"http://e.example.com/{i}", "content": "x" * 1000} for i in range(60_000)]
    src = write(tmp_path / "z.arrow", pa.Table.from_pylist(rows), compression="zstd",
                rows=len(rows))  # fmt: skip
    assert src.stat().st_size < 4 << 20
    sizes = [b.num_rows for b in _core.TableFile(src)]
    assert sum(sizes) == 60_000 and max(sizes) <= 5_000, sizes
