"""Dataset directories of part files without extensions, as Hive and Spark write them
(`000000_0`, `part-00000`): recognised by their magic numbers, read in their writer's order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from fastfeed.cli import main
from test_parquet import build, corpus, files

pytestmark = pytest.mark.usefixtures("clean_env")


def hive(directory: Path, names: list[str], per_file: int, arrow: bool = False) -> Path:
    """The rows of `corpus` in part files named `names` in their order, written by pyarrow
    under a name of their format, then renamed without it; a success mark and a checksum file
    beside them as the writer leaves them."""
    directory.mkdir()
    rows = corpus(per_file * len(names))
    for i, name in enumerate(names):
        table = pa.Table.from_pylist(rows[i * per_file : (i + 1) * per_file])
        written = directory / f"{name}.written"
        if arrow:
            feather.write_feather(table, written)
        else:
            pq.write_table(table, written)
        written.rename(directory / name)
    (directory / "_SUCCESS").write_bytes(b"")
    (directory / f".{names[0]}.crc").write_bytes(b"crc")
    pq.write_table(pa.Table.from_pylist(rows), directory.parent / "one.parquet")
    return directory


# Listed out of the writer's order, which its numbers say (a plain string sort would put
# 000001_0_copy_1, Hive's file of a second insert, after 000001_0 too, but part-10 before part-2).
HIVE = ["000010_0", "000002_0", "000000_0", "000001_0_copy_1", "000001_0"]
HIVE_ORDER = ["000000_0", "000001_0", "000001_0_copy_1", "000002_0", "000010_0"]
SPARK = ["part-10", "part-2", "part-0", "part-1"]
SPARK_ORDER = ["part-0", "part-1", "part-2", "part-10"]


@pytest.mark.parametrize(
    ("names", "order", "arrow"),
    [(HIVE, HIVE_ORDER, False), (SPARK, SPARK_ORDER, False), (HIVE, HIVE_ORDER, True)],
)
def test_part_files_without_extensions_build_as_their_rows_in_the_writers_order(
    tmp_path: Path, names: list[str], order: list[str], arrow: bool
) -> None:
    directory = hive(tmp_path / "warehouse", names, per_file=30, arrow=arrow)
    assert build(str(directory), "--out", str(tmp_path / "ds")) == 0
    rows = corpus(30 * len(names))
    part = {name: rows[i * 30 : i * 30 + 30] for i, name in enumerate(names)}
    pq.write_table(
        pa.Table.from_pylist([r for n in order for r in part[n]]), tmp_path / "o.parquet"
    )
    assert build(str(tmp_path / "o.parquet"), "--out", str(tmp_path / "one")) == 0
    assert files(tmp_path / "ds") == files(tmp_path / "one")


def test_a_part_file_given_alone_is_read_by_its_magic_too(tmp_path: Path) -> None:
    directory = hive(tmp_path / "warehouse", ["000000_0"], per_file=40)
    assert build(str(directory / "000000_0"), "--out", str(tmp_path / "ds")) == 0
    assert build(str(tmp_path / "one.parquet"), "--out", str(tmp_path / "one")) == 0
    assert files(tmp_path / "ds") == files(tmp_path / "one")


@pytest.mark.parametrize(
    "problem",
    ["truncated", "not a table", "two formats", "an extension", "unnamed and named", "dangling"],
)
def test_ambiguous_part_files_are_refused_naming_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    """Never a feed of part of a dataset, nor of files that may not belong to it."""
    directory = hive(tmp_path / "warehouse", ["000000_0", "000001_0"], per_file=10)
    if problem == "truncated":  # its writer never finished it: no footer
        named = directory / "000001_0"
        named.write_bytes(named.read_bytes()[:-100])
        why = f"{named} is a Parquet file its writer did not finish"
    elif problem == "not a table":
        named = directory / "README"
        named.write_text("exported by the nightly job")
        why = f"{named} has no extension and is no Parquet or Arrow IPC file"
    elif problem == "two formats":
        feather.write_feather(pa.Table.from_pylist(corpus(3)), directory / "000002_0")
        why = f"the dataset directory {directory} holds part files of two formats"
    elif problem == "an extension":  # a stray file beside part files without extensions
        named = directory / "000002_0.jsonl"
        named.write_text("{}\n")
        why = f"{named} is not a Parquet or Arrow file"
    elif problem == "unnamed and named":  # part files with and without extensions: which?
        pq.write_table(pa.Table.from_pylist(corpus(3)), directory / "a.parquet")
        why = f"{directory / '000000_0'} is a Parquet file without an extension, beside"
    else:  # a part file that cannot be read is named with why, never left out
        (directory / "000002_0").symlink_to(tmp_path / "gone")
        why = f"{directory / '000002_0'} cannot be read (No such file or directory; it is a "
    assert build(str(directory), "--out", str(tmp_path / "out")) == 1
    assert why in capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_tree_of_documents_without_extensions_is_still_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "README").write_text("a document")
    (tmp_path / "share" / "LICENSE").write_text("another")
    (tmp_path / "share" / "latest").symlink_to(tmp_path / "gone")  # no dataset's file: no cause
    assert main(["build", str(tmp_path / "share"), "--datasource", "docs", "--out",
                 str(tmp_path / "out")]) == 1  # fmt: skip
    assert f"{tmp_path / 'share'} is a directory: give --base-url" in capsys.readouterr().err


def test_part_files_beside_a_stray_file_are_a_dataset_without_a_mark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = hive(tmp_path / "warehouse", ["000000_0", "000001_0"], per_file=10)
    (directory / "_SUCCESS").unlink()
    (directory / "notes.txt").write_text("exported by the nightly job")
    assert build(str(directory), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"{directory / 'notes.txt'} is not a Parquet or Arrow file" in err
    assert "give the dataset's files by name" in err


def test_json_lines_part_files_are_pointed_to_a_glob_that_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark's saveAsTextFile: `part-00000` files of JSON Lines beside `_SUCCESS`."""
    import orjson

    directory = tmp_path / "export"
    directory.mkdir()
    lines = [orjson.dumps(r) + b"\n" for r in corpus(20)]
    (directory / "part-00000").write_bytes(b"".join(lines[:10]))
    (directory / "part-00001").write_bytes(b"".join(lines[10:]))
    (directory / "_SUCCESS").write_bytes(b"")
    assert build(str(directory), "--out", str(tmp_path / "out")) == 1
    glob = str(directory / "[!_]*")
    assert f"give them by name or as a glob ('{glob}')" in capsys.readouterr().err
    assert build(glob, "--out", str(tmp_path / "by-glob")) == 0
    (tmp_path / "one.jsonl").write_bytes(b"".join(lines))
    assert build(str(tmp_path / "one.jsonl"), "--out", str(tmp_path / "one")) == 0
    assert files(tmp_path / "by-glob") == files(tmp_path / "one")
