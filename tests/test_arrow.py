"""`add_arrow`: Arrow tables as records, read in place, meaning what the same dicts mean."""

from __future__ import annotations

import base64
import ctypes
import datetime as dt
import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from struct import pack
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from fastfeed import EmptyFullFeed, FeedError, FeedWriter, RecordError, ThunderstoneWriter
from fastfeed.gsa.validate import validate_file
from feeds import decode_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_roundtrip import records

Rows = list[dict[str, Any]]


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def by_batch(out: Path, rows: Rows, **options: Any) -> dict[str, bytes]:
    with FeedWriter(out, "ds", **options) as w:
        w.add_batch([{k: v for k, v in r.items() if v is not None} for r in rows])
    return files(out)


def by_arrow(out: Path, *tables: Any, **options: Any) -> dict[str, bytes]:
    with FeedWriter(out, "ds", **options) as w:
        for table in tables:
            w.add_arrow(table)
    return files(out)


def url(i: int) -> str:
    return f"http://docs.example.com/{i}"


META = pa.map_(pa.string(), pa.list_(pa.string()))


def as_tables(batch: Rows) -> list[pa.Table]:
    """The records as tables, a table per run of records whose content is of one form (an Arrow
    column has one type: text or bytes); metadata as a map of names to lists of strings."""
    runs: list[tuple[str, Rows]] = []
    for rec in batch:
        form = next((k for k in ("content", "content_base64") if k in rec), "none")
        if form == "content":
            form = "text" if isinstance(rec["content"], str) else "bytes"
        if not runs or runs[-1][0] != form:
            runs.append((form, []))
        runs[-1][1].append(rec)
    tables = []
    for form, recs in runs:
        columns: dict[str, pa.Array] = {
            "url": pa.array([r["url"] for r in recs]),
            "displayurl": pa.array([r.get("displayurl") for r in recs], pa.string()),
            "metadata": pa.array(
                [
                    [(k, [v] if isinstance(v, str) else v) for k, v in r["metadata"].items()]
                    for r in recs
                ],
                META,
            ),
        }
        if form in ("text", "bytes"):
            kind = pa.string() if form == "text" else pa.binary()
            columns["content"] = pa.array([r["content"] for r in recs], kind)
        elif form == "content_base64":
            columns["content_base64"] = pa.array([r["content_base64"] for r in recs])
        tables.append(pa.table(columns))
    return tables


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=records(), compress=st.sampled_from(["auto", "always", "never"]))
def test_feed_files_are_the_same_bytes_as_from_dicts(tmp_path_factory, batch, compress) -> None:  # type: ignore[no-untyped-def]
    """Hostile Unicode, bytes, controls and `]]>`: the same records make the same files."""
    work = Path(tmp_path_factory.mktemp("arrow"))
    options = {"max_bytes": 3000, "compress": compress}
    expected = by_batch(work / "dicts", batch, **options)
    assert by_arrow(work / "arrow", *as_tables(batch), **options) == expected
    for name in expected:
        if name.endswith(".xml"):
            assert validate_file(work / "arrow" / name) == []


def cut(table: pa.Table, at: list[int]) -> pa.Table:
    """`table` in batches cut at `at`, each with buffers of its own, as a table grown by
    appends holds them (slices of one batch would share its buffers)."""
    edges = sorted({0, table.num_rows, *(a % (table.num_rows + 1) for a in at)})
    pieces = [table.slice(a, b - a).combine_chunks() for a, b in itertools.pairwise(edges)]
    return pa.Table.from_batches([b for p in pieces for b in p.to_batches()], table.schema)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=records(), at=st.lists(st.integers(0, 40), max_size=12))
def test_records_in_batches_of_any_size_are_the_same_bytes(tmp_path_factory, batch, at) -> None:  # type: ignore[no-untyped-def]
    """Small batches are gathered into one before they are read: cut anywhere, the records
    make the same files as in one batch, and as the dicts."""
    work = Path(tmp_path_factory.mktemp("cut"))
    tables = as_tables(batch)
    expected = by_batch(work / "dicts", batch, max_bytes=3000)
    assert by_arrow(work / "cut", *(cut(t, at) for t in tables), max_bytes=3000) == expected


#: Records of text content, metadata and a page rank.
SMALL_SCHEMA = pa.schema(
    [
        ("url", pa.string()),
        ("content", pa.string()),
        ("metadata", META),
        ("pagerank", pa.int64()),
    ]
)


def test_thousands_of_records_in_small_batches_are_the_same_bytes_as_in_one(
    tmp_path: Path,
) -> None:
    """More rows than one gathering holds, in batches of 1 to 300 rows, some sliced out of a
    bigger one, some of their own; a bad row among them is named by its index across them."""
    rng = random.Random(7)
    rows: Rows = [
        {
            "url": url(i),
            "content": f"<p>{i} & {'é' * (i % 50)}</p>" * (1 + i % 3),
            "metadata": [("author", [f"a{i}"])] if i % 5 else None,
            "pagerank": 70 + i % 30 if i % 7 else None,
        }
        for i in range(5000)
    ]
    whole = pa.Table.from_pylist(rows, pa.schema([*SMALL_SCHEMA]))
    cuts = list(itertools.accumulate(rng.randint(1, 300) for _ in range(60)))
    own = cut(whole, cuts)
    shared = pa.Table.from_batches(whole.to_batches(max_chunksize=3))
    expected = by_arrow(tmp_path / "whole", whole, max_bytes=200_000)
    assert by_arrow(tmp_path / "own", own, max_bytes=200_000) == expected
    assert by_arrow(tmp_path / "shared", shared, max_bytes=200_000) == expected
    rows[4321]["pagerank"] = 300
    bad = cut(pa.Table.from_pylist(rows, whole.schema), cuts)
    with FeedWriter(tmp_path / "bad", "ds") as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(bad)
        assert (caught.value.index, caught.value.field) == (4321, "pagerank")
        assert w.records == 4321


def test_every_field_means_what_it_means_in_a_dict(tmp_path: Path) -> None:
    acl = {
        "principals": [
            {"name": "CORP\\eng", "scope": "group", "access": "permit", "case_sensitive": False},
            {"name": "mallory", "scope": "user", "access": "deny", "namespace": "Default"},
        ],
        "inheritance_type": "child-overrides",
        "inherit_from": "http://docs.example.com/",
    }
    rows = [
        {
            "url": url(0),
            "action": "add",
            "mimetype": "text/html",
            "displayurl": "http://show.example.com/0",
            "last_modified": "Tue, 6 Nov 2007 12:45:26 GMT",
            "lock": True,
            "authmethod": "httpbasic",
            "pagerank": 90,
            "metadata": {"author": "Ann", "tags": ["a", "b"]},
            "content": "<p>hello</p>",
            "acl": acl,
            "overwrite_acls": False,
        },
        {"url": url(1), "action": "delete"},
        {"url": url(2), "content": b"\x00\xff binary", "last_modified": "2024-05-01T12:00:00Z"},
        {"url": url(3), "content_base64": base64.b64encode(b"\x01\x02").decode()},
        {"kind": "acl", "url": "http://docs.example.com/dir/", "acl": acl},
    ]
    principal = pa.struct(
        [
            ("name", pa.string()),
            ("scope", pa.string()),
            ("access", pa.string()),
            ("namespace", pa.string()),
            ("case_sensitive", pa.bool_()),
        ]
    )
    acl_type = pa.struct(
        [
            ("principals", pa.list_(principal)),
            ("inheritance_type", pa.string()),
            ("inherit_from", pa.string()),
        ]
    )
    meta_type = pa.struct([("author", pa.string()), ("tags", pa.list_(pa.string()))])

    def column(name: str, kind: pa.DataType | None = None) -> pa.Array:
        return pa.array([r.get(name) for r in rows], kind)

    # A table without the `content` column: bytes and text differ in type.
    common = {
        name: column(name)
        for name in ("url", "action", "mimetype", "displayurl", "last_modified", "lock")
    } | {
        "authmethod": column("authmethod"),
        "pagerank": column("pagerank", pa.int8()),
        "metadata": column("metadata", meta_type),
        "content_base64": column("content_base64", pa.string()),
        "acl": column("acl", acl_type),
        "overwrite_acls": column("overwrite_acls", pa.bool_()),
        "kind": column("kind", pa.string()),
    }
    text = pa.table(
        common | {"content": pa.array([r.get("content") for r in rows[:1]] + [None] * 4)}
    )
    binary = pa.table(
        common | {"content": pa.array([None, None, rows[2]["content"], None, None], pa.binary())}
    )
    # Rows 0 and 1 from the text table, the rest from the binary one.
    arrow = by_arrow(tmp_path / "arrow", text.slice(0, 2), binary.slice(2))
    assert arrow == by_batch(tmp_path / "dicts", rows)
    assert validate_file(tmp_path / "arrow" / "ds-000001.xml") == []
    fed = decode_set(tmp_path / "arrow")
    assert fed[2].content == b"\x00\xff binary"


def test_a_polars_or_duckdb_like_object_is_read_without_pyarrow_types(tmp_path: Path) -> None:
    """Only the PyCapsule protocol is used: any object exporting a stream or an array will do."""
    table = pa.table({"url": [url(0), url(1)], "content": ["a", "b"]})

    class Stream:
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return table.__arrow_c_stream__(requested_schema)

    class Array:
        def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
            return table.to_batches()[0].__arrow_c_array__(requested_schema)

    expected = by_batch(tmp_path / "dicts", table.to_pylist())
    assert by_arrow(tmp_path / "stream", Stream()) == expected
    assert by_arrow(tmp_path / "array", Array()) == expected
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    assert by_arrow(tmp_path / "reader", reader) == expected
    assert by_arrow(tmp_path / "batch", table.to_batches()[0]) == expected


def producers_rows() -> Rows:
    """Records with a value of each kind, some missing, text short and long (a string view
    keeps up to 12 bytes inline), as the dicts they mean."""
    moment = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    return [
        {
            "url": url(i),
            "content": ["short", f"a longer text {i}, out of line ]]> & <", None][i % 3],
            "displayurl": f"http://shown.example.com/{i}" if i % 2 else None,
            "pagerank": 68 + i % 30 if i % 4 else None,
            "lock": i % 5 == 1 if i % 3 else None,
            "last_modified": moment + dt.timedelta(days=i),
            "metadata": {"team": "search", "tags": ["a", f"t{i}"]} if i % 3 else None,
        }
        for i in range(40)
    ]


def as_dicts(rows: Rows) -> Rows:
    """The records as `add_batch` takes them: moments as seconds, no nulls."""
    return [
        {k: int(v.timestamp()) if isinstance(v, dt.datetime) else v for k, v in r.items()}
        for r in rows
    ]


def test_a_polars_data_frame_of_string_views_is_read_in_place(tmp_path: Path) -> None:
    rows = producers_rows()
    schema = {
        "url": pl.String,
        "content": pl.String,
        "displayurl": pl.String,
        "pagerank": pl.Int16,
        "lock": pl.Boolean,
        "last_modified": pl.Datetime("us", "UTC"),
        "metadata": pl.Struct({"team": pl.String, "tags": pl.List(pl.String)}),
    }
    # Two chunks, as Polars leaves a frame built in parts: two batches in the stream.
    frame = pl.concat(
        [pl.DataFrame(rows[:25], schema), pl.DataFrame(rows[25:], schema)], rechunk=False
    )
    assert frame.n_chunks() == 2
    exported = pa.RecordBatchReader.from_stream(frame).schema
    assert exported.field("url").type == pa.string_view()  # Polars' strings, as it gives them
    assert by_arrow(tmp_path / "polars", frame) == by_batch(tmp_path / "dicts", as_dicts(rows))
    binary = frame.with_columns(pl.col("content").cast(pl.Binary))
    assert pa.RecordBatchReader.from_stream(binary).schema.field("content").type == pa.binary_view()
    as_bytes = [r | {"content": r["content"] and r["content"].encode()} for r in rows]
    assert by_arrow(tmp_path / "bytes", binary) == by_batch(tmp_path / "d2", as_dicts(as_bytes))


def test_a_duckdb_result_is_read_in_place(tmp_path: Path) -> None:
    rows = producers_rows()
    db = duckdb.connect()
    db.sql(
        "CREATE TABLE docs (url VARCHAR, content VARCHAR, displayurl VARCHAR, pagerank INTEGER, "
        "lock BOOLEAN, last_modified TIMESTAMPTZ, metadata MAP(VARCHAR, VARCHAR[]))"
    )
    db.executemany(
        "INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            [
                r["url"],
                r["content"],
                r["displayurl"],
                r["pagerank"],
                r["lock"],
                r["last_modified"],
                r["metadata"] and {"team": [r["metadata"]["team"]], "tags": r["metadata"]["tags"]},
            ]
            for r in rows
        ],
    )
    query = "SELECT * FROM docs ORDER BY pagerank NULLS FIRST, url"
    ordered = [r for _, r in sorted(((r["pagerank"] or -1, r["url"]), r) for r in rows)]
    expected = by_batch(tmp_path / "dicts", as_dicts(ordered))
    # The result itself (`__arrow_c_stream__`), and its Arrow reader.
    assert by_arrow(tmp_path / "result", db.sql(query)) == expected
    assert by_arrow(tmp_path / "reader", db.sql(query).arrow()) == expected
    # DuckDB gives string views when asked to.
    db.sql("SET arrow_output_version = '1.4'")
    db.sql("SET produce_arrow_string_view = true")
    views = db.sql(query)
    assert pa.RecordBatchReader.from_stream(views).schema.field("url").type == pa.string_view()
    assert by_arrow(tmp_path / "views", db.sql(query)) == expected


def test_sliced_and_chunked_tables_count_rows_across_the_whole_input(tmp_path: Path) -> None:
    rows = [{"url": url(i), "content": f"text {i}"} for i in range(10)]
    table = pa.Table.from_batches(
        [pa.RecordBatch.from_pylist(rows[i : i + 3]) for i in range(0, 10, 3)]
    )
    assert table.column("url").num_chunks == 4
    assert by_arrow(tmp_path / "chunked", table) == by_batch(tmp_path / "dicts", rows)
    # A slice across chunk boundaries, and a slice of one array.
    assert by_arrow(tmp_path / "sliced", table.slice(2, 6)) == by_batch(tmp_path / "d2", rows[2:8])
    one = pa.RecordBatch.from_pylist(rows).slice(5, 3)
    assert by_arrow(tmp_path / "one", one) == by_batch(tmp_path / "d3", rows[5:8])

    ranked = [r | {"pagerank": 40 if i == 6 else None} for i, r in enumerate(rows)]
    bad = pa.Table.from_batches(pa.Table.from_pylist(ranked).to_batches(max_chunksize=4))
    assert bad.column("url").num_chunks == 3
    with pytest.raises(RecordError) as caught, FeedWriter(tmp_path / "bad", "ds") as w:
        w.add_arrow(bad.slice(1))
    assert (caught.value.index, caught.value.field) == (5, "pagerank")
    assert "40 is outside 68 to 100" in str(caught.value)


def test_rows_before_a_refused_one_are_written_and_the_rest_can_follow(tmp_path: Path) -> None:
    rows: Rows = [{"url": url(i), "content": "x" * 100} for i in range(200_000)]
    rows[150_000]["url"] = None  # past the first group of rows encoded at once
    table = pa.Table.from_pylist(rows)
    with FeedWriter(tmp_path / "arrow", "ds", max_bytes=2_000_000) as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(table)
        error = caught.value
        assert (error.index, error.field, error.kind) == (150_000, "url", "missing")
        assert w.records == 150_000
        w.add_arrow(table.slice(error.index + 1))
    del rows[150_000]
    assert files(tmp_path / "arrow") == by_batch(tmp_path / "dicts", rows, max_bytes=2_000_000)


def test_null_in_an_optional_column_is_an_absent_field(tmp_path: Path) -> None:
    rows = [
        {"url": url(0), "mimetype": None, "pagerank": None, "lock": None, "metadata": None},
        {"url": url(1), "mimetype": "text/html", "pagerank": 80, "lock": True, "metadata": None},
        {"url": url(2), "metadata": {"a": None, "b": "x"}},
    ]
    table = pa.table(
        {
            "url": [r["url"] for r in rows],
            "mimetype": [r.get("mimetype") for r in rows],
            "pagerank": [r.get("pagerank") for r in rows],
            "lock": [r.get("lock") for r in rows],
            "metadata": pa.array(
                [r["metadata"] for r in rows], pa.struct([("a", pa.string()), ("b", pa.string())])
            ),
            # A column of nulls only (pyarrow's null type).
            "displayurl": pa.nulls(3),
        }
    )
    rows[2]["metadata"] = {"b": "x"}
    assert by_arrow(tmp_path / "arrow", table) == by_batch(tmp_path / "dicts", rows)


def test_struct_fields_of_the_null_type_are_absent(tmp_path: Path) -> None:
    """What pyarrow and Polars infer from values that are all None."""
    acl = {"principals": [{"name": "eng", "scope": "group", "access": "permit"}]}
    table = pa.table(
        {
            "url": [url(0)],
            "content": ["x"],
            "metadata": [{"a": None, "b": "x"}],
            "acl": [
                {"principals": [acl["principals"][0] | {"namespace": None}], "inherit_from": None}
            ],
        }
    )
    assert table.schema.field("metadata").type.field("a").type == pa.null()
    rows = [{"url": url(0), "content": "x", "metadata": {"b": "x"}, "acl": acl}]
    assert by_arrow(tmp_path / "arrow", table) == by_batch(tmp_path / "dicts", rows)


@pytest.mark.parametrize(
    "text, binary",
    [
        (pa.large_string(), pa.large_binary()),
        (pa.string_view(), pa.binary_view()),
        (pa.dictionary(pa.int8(), pa.string()), pa.dictionary(pa.uint32(), pa.binary())),
    ],
    ids=["large", "view", "dictionary"],
)
def test_every_string_and_binary_layout_is_read(
    tmp_path: Path, text: pa.DataType, binary: pa.DataType
) -> None:
    # Long values too: a view keeps values of up to 12 bytes inline, longer ones in buffers.
    rows = [
        {"url": url(i), "mimetype": "text/plain" if i % 2 else None, "content": c}
        for i, c in enumerate(["short", "a longer text, out of line ]]> & <", "short", None])
    ]
    table = pa.table(
        {
            "url": pa.array([r["url"] for r in rows], text),
            "mimetype": pa.array([r["mimetype"] for r in rows], text),
            "content": pa.array([r["content"] for r in rows], text),
        }
    )
    assert by_arrow(tmp_path / "text", table) == by_batch(tmp_path / "dicts", rows)
    as_bytes = [r | {"content": r["content"] and r["content"].encode()} for r in rows]
    table = table.set_column(2, "content", pa.array([r["content"] for r in as_bytes], binary))
    assert by_arrow(tmp_path / "bytes", table) == by_batch(tmp_path / "dicts2", as_bytes)


def test_times_in_every_arrow_form_mean_the_same_moment(tmp_path: Path) -> None:
    moment = dt.datetime(2024, 5, 1, 12, 30, 15, 999_999, tzinfo=dt.UTC)
    seconds = int(moment.timestamp())
    columns = {
        "seconds": pa.array([moment], pa.timestamp("s", tz="UTC")),
        "milliseconds": pa.array([moment], pa.timestamp("ms")),
        "microseconds": pa.array([moment], pa.timestamp("us", tz="Europe/Paris")),
        "nanoseconds": pa.array([moment], pa.timestamp("ns", tz="UTC")),
        "int": pa.array([seconds], pa.int64()),
        "float": pa.array([seconds + 0.5], pa.float64()),
        "text": pa.array(["2024-05-01T12:30:15Z"]),
    }
    expected = by_batch(tmp_path / "dicts", [{"url": url(0), "last_modified": seconds}])
    for name, column in columns.items():
        table = pa.table({"url": [url(0)], "last_modified": column})
        assert by_arrow(tmp_path / name, table) == expected, name
    day = pa.table({"url": [url(0)], "last_modified": pa.array([moment.date()], pa.date32())})
    assert by_arrow(tmp_path / "date", day) == by_batch(
        tmp_path / "day", [{"url": url(0), "last_modified": "2024-05-01"}]
    )


def test_metadata_as_a_map_and_acls_as_json_text(tmp_path: Path) -> None:
    acl = {"principals": [{"name": "eng", "scope": "group", "access": "permit"}]}
    rows = [
        {"url": url(0), "content": "x", "metadata": {"a": "1", "b": "2"}, "acl": acl},
        {"url": url(1), "content": "y", "metadata": {}, "acl": None},
    ]
    table = pa.table(
        {
            "url": [r["url"] for r in rows],
            "content": [r["content"] for r in rows],
            "metadata": pa.array(
                [list(r["metadata"].items()) for r in rows], pa.map_(pa.string(), pa.string())
            ),
            "acl": [json.dumps(acl), None],
        }
    )
    assert by_arrow(tmp_path / "arrow", table) == by_batch(tmp_path / "dicts", rows)


def test_thunderstone_takes_arrow_too(tmp_path: Path) -> None:
    table = pa.table({"url": [url(0)], "content": ["hello"], "action": ["update"]})
    with ThunderstoneWriter(tmp_path / "arrow", "profile") as w:
        w.add_arrow(table)
    with ThunderstoneWriter(tmp_path / "dicts", "profile") as d:
        d.add_batch(table.to_pylist())
    assert files(tmp_path / "arrow") == files(tmp_path / "dicts")


def refused(tmp_path: Path, table: Any, error: type[Exception] = FeedError) -> str:
    with pytest.raises(error) as caught, FeedWriter(tmp_path / "out", "ds") as w:
        w.add_arrow(table)
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    return str(caught.value)


@pytest.mark.parametrize(
    "column, message",
    [
        (pa.array([1.5]), "column 'pagerank' is double: expected integers"),
        (pa.array(["80"]), "column 'pagerank' is string: expected integers"),
        # Types the core does not read are named as pyarrow names them, not as Rust debugs them.
        (pa.array([["8"]], pa.list_view(pa.string())), "is list_view<string>: expected"),
        (pa.array([[8]], pa.large_list_view(pa.int8())), "is large_list_view<int8>: expected"),
        (pa.array([["8"]], pa.list_(pa.string(), 1)), "is fixed_size_list<string>[1]: expected"),
        (pa.RunEndEncodedArray.from_arrays([1], [8]), "is run_end_encoded<int64, int64>: expected"),
        (pa.array([8], pa.timestamp("ms", "UTC")), "is timestamp[ms, tz=UTC]: expected"),
        (pa.array([8], pa.duration("us")), "is duration[us]: expected"),
        (pa.array([b"8"], pa.binary(1)), "is fixed_size_binary[1]: expected"),
        (pa.array([8], pa.decimal128(3, 1)), "is decimal128(3, 1): expected"),
        (pa.array([["8"]], pa.large_list(pa.string())), "is large_list<string>: expected"),
    ],
)
def test_a_column_of_the_wrong_type_is_refused_before_any_row(
    tmp_path: Path, column: pa.Array, message: str
) -> None:
    table = pa.table({"url": [url(0)], "pagerank": column})
    assert message in refused(tmp_path, table)


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"url": [url(0)], "contnet": ["x"]}, "unknown column 'contnet': did you mean 'content'?"),
        ({"content": ["x"]}, "there is no 'url' column"),
        ({"url": [1]}, "column 'url' is int64: expected strings"),
        ({"url": [url(0)], "lock": [1]}, "column 'lock' is int64: expected bool"),
        (
            {"url": [url(0)], "content": [[1]]},
            "column 'content' is list<int64>: expected strings (text) or binary",
        ),
        (
            {"url": [url(0)], "metadata": [{"tags": [1]}]},
            "column 'metadata.tags[]' is int64: expected strings",
        ),
        ({"url": [url(0)], "metadata": ["a=b"]}, "column 'metadata' is string: expected a struct"),
        (
            {"url": [url(0)], "acl": [{"principals": [], "owner": "x"}]},
            "column 'acl' has a field 'owner', which is not one of principals",
        ),
    ],
)
def test_a_column_that_is_not_a_record_field_is_refused(
    tmp_path: Path, columns: dict[str, list[Any]], message: str
) -> None:
    assert message in refused(tmp_path, pa.table(columns))


def struct(names: list[str], *values: str) -> pa.StructArray:
    """A struct of one row whose fields are `names`, in order, given as Arrow allows: a name
    may be there twice."""
    return pa.StructArray.from_arrays([pa.array([v]) for v in values], names=names)


@pytest.mark.parametrize(
    "acl, message",
    [
        (
            struct(["inheritance_type", "inheritance_type"], "leaf-node", "parent-overrides"),
            "column 'acl.inheritance_type' is given twice",
        ),
        (
            pa.StructArray.from_arrays(
                [
                    pa.ListArray.from_arrays(
                        pa.array([0, 1], pa.int32()),
                        struct(["name", "scope", "access", "name"], "x", "user", "permit", "y"),
                    )
                ],
                names=["principals"],
            ),
            "column 'acl.principals[].name' is given twice",
        ),
    ],
)
def test_a_field_named_twice_in_a_struct_is_refused_not_read_once(
    tmp_path: Path, acl: pa.Array, message: str
) -> None:
    """Arrow allows it; reading one of them would lose the other in silence."""
    assert message in refused(tmp_path, pa.table({"url": [url(0)], "acl": acl}))


def test_an_empty_table_is_still_checked(tmp_path: Path) -> None:
    table = pa.table({"url": pa.array([], pa.string()), "contnet": pa.array([], pa.string())})
    assert "unknown column 'contnet'" in refused(tmp_path, table)


@pytest.mark.parametrize(
    "column, field, reason",
    [
        (pa.array([None, None], pa.string()), "url", "is required"),
        (pa.array([url(0), "http://intranet/"]), "url", "not fully qualified"),
    ],
)
def test_a_bad_row_names_its_row_and_column(
    tmp_path: Path, column: pa.Array, field: str, reason: str
) -> None:
    table = pa.table({"url": column, "content": ["a", "b"]})
    table = table.slice(1) if column.null_count == 2 else table
    with pytest.raises(RecordError) as caught, FeedWriter(tmp_path / "out", "ds") as w:
        w.add_arrow(table)
    assert caught.value.field == field
    assert caught.value.index == (0 if column.null_count == 2 else 1)
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("datasource", "row"),
    [
        ("ds", {"url": url(0), "last_modified": "Sat, 31 Dec 2016 23:59:60 GMT"}),
        ("web", {"url": url(0), "metadata": {"k": "v"}}),
        ("web", {"url": url(0), "pagerank": 90}),
        (
            "ds",
            {
                "url": url(0),
                "content": "x",
                "acl": {"principals": [{"name": "ann", "scope": "user", "access": "permit"}]},
                "metadata": {"google:aclusers": "joe"},
            },
        ),
    ],
    ids=["leap-second", "web-metadata", "pagerank-in-web-feed", "acl-twice"],
)
def test_a_row_breaking_a_protocol_rule_is_refused_as_its_dict_is(
    tmp_path: Path, datasource: str, row: dict[str, Any]
) -> None:
    # One encoder checks records, whichever way they come.
    with pytest.raises(RecordError) as as_dict, FeedWriter(tmp_path / "d", datasource) as w:
        w.add_batch([row])
    with pytest.raises(RecordError) as as_arrow, FeedWriter(tmp_path / "a", datasource) as w:
        w.add_arrow(pa.Table.from_pylist([row]))
    refusal = (as_dict.value.field, as_dict.value.reason, as_dict.value.kind)
    assert refusal == (as_arrow.value.field, as_arrow.value.reason, as_arrow.value.kind)
    assert refusal[0] in row


@pytest.mark.parametrize(
    "build, field, reason",
    [
        (
            lambda: {
                "metadata": pa.array([[("a", "1"), ("a", "2")]], pa.map_(pa.string(), pa.string()))
            },
            "metadata",
            "'a' is given twice",
        ),
        (lambda: {"metadata": pa.array([{"t": ["x", None]}])}, "metadata", "'t' holds a null"),
        (lambda: {"acl": pa.array(["{not json"])}, "acl", "key must be a string"),
        (lambda: {"acl": pa.array([{"principals": [{"name": "x"}]}])}, "acl", "scope is required"),
        (
            lambda: {"acl": ['{"principals": [["bob", "user", "permit", null, null, null]]}']},
            "acl",
            "expected each principal as a JSON object, not an array",
        ),
        (lambda: {"pagerank": pa.array([2**63], pa.uint64())}, "pagerank", "outside 68 to 100"),
        (lambda: {"content": ["x"], "content_path": ["/etc/hosts"]}, "content", "at most one"),
        (lambda: {"action": ["remove"]}, "action", "'remove' is not an action"),
    ],
)
def test_a_bad_value_deep_in_a_column_names_the_field(
    tmp_path: Path, build: Callable[[], dict[str, Any]], field: str, reason: str
) -> None:
    table = pa.table({"url": [url(0)]} | build())
    with pytest.raises(RecordError) as caught, FeedWriter(tmp_path / "out", "ds") as w:
        w.add_arrow(table)
    assert (caught.value.index, caught.value.field) == (0, field)
    assert reason in caught.value.reason


def offsets(*values: int) -> pa.Buffer:
    return pa.py_buffer(pack(f"<{len(values)}i", *values))


def metadata_going_down() -> pa.Array:
    """Metadata whose map offsets go down (0, 2, 1, 3): its row 1 ends before it starts."""
    entries = pa.array([[("a", ["v"]), ("b", ["v"]), ("c", ["v"])]], META).values
    return pa.Array.from_buffers(META, 3, [None, offsets(0, 2, 1, 3)], children=[entries])


def text_going_below_zero() -> pa.Array:
    """Display URLs whose row 0, null, hides an offset below zero, where row 1 starts."""
    validity = pa.py_buffer(bytes([0b10]))
    buffers = [validity, offsets(0, -3, 2), pa.py_buffer(b"/x")]
    return pa.Array.from_buffers(pa.string(), 2, buffers, null_count=1)


def text_past_its_values() -> pa.Array:
    """Display URLs whose row 0 ends past the 2 bytes of values: in the next batch's, gathered."""
    buffers = [None, offsets(0, 30, 2), pa.py_buffer(b"/x")]
    return pa.Array.from_buffers(pa.string(), 2, buffers)


def view_of_a_missing_buffer() -> pa.Array:
    """A display URL whose view names data buffer 0, which its batch does not have."""
    view = pack("<I4sII", 24, b"http", 0, 0)  # length, prefix, buffer, offset
    return pa.Array.from_buffers(pa.string_view(), 1, [None, pa.py_buffer(view)])


def views_saying(length: int, offset: int) -> Callable[[], pa.Array]:
    """Display URLs whose second view says `length` bytes at `offset` of their one data buffer
    (signed, as the C data interface has them: the reader takes them unsigned)."""

    def malformed() -> pa.Array:
        text = b"http://a.example.com/" * 2
        views = pack("<i4sii", 21, text, 0, 0) + pack("<i4sii", length, text, 0, offset)
        return pa.Array.from_buffers(
            pa.string_view(), 2, [None, pa.py_buffer(views), pa.py_buffer(text)]
        )

    malformed.__name__ = f"view_of_{length}_bytes_at_{offset}"
    return malformed


@pytest.mark.parametrize(
    "malformed, field, row",
    [
        (metadata_going_down, "metadata", 1),
        (text_going_below_zero, "displayurl", 1),
        (text_past_its_values, "displayurl", 0),
        (view_of_a_missing_buffer, "displayurl", 0),
        (views_saying(-21, 0), "displayurl", 1),
        (views_saying(21, -1), "displayurl", 1),
        (views_saying(21, 22), "displayurl", 1),
    ],
)
@pytest.mark.parametrize("before", [1, 70_000])
def test_a_malformed_batch_among_small_ones_is_refused_at_its_row(
    tmp_path: Path, malformed: Callable[[], pa.Array], field: str, row: int, before: int
) -> None:
    """Arrow data from a foreign exporter is not trusted: gathered with small batches around
    it, a batch whose offsets or views lie is refused at the row read alone, which reads no other
    batch's bytes, and the rows before it are written (a big batch's too)."""
    column = malformed()
    schema = pa.schema([("url", pa.string()), (field, column.type)])

    def batch(first: int, values: pa.Array) -> pa.RecordBatch:
        urls = pa.array([url(first + i) for i in range(len(values))])
        return pa.record_batch([urls, values], schema=schema)

    def others(count: int) -> pa.Array:
        """Values of its own for each row, bytes that a lying batch could reach, gathered."""
        if column.type == META:
            return pa.array([[("other", [f"from another batch {i}"])] for i in range(count)], META)
        return pa.array(
            [f"http://other.example.com/{i}/from-another-batch" for i in range(count)], column.type
        )

    batches = [batch(0, others(before)), batch(before, column), batch(before + 9, others(1))]
    with FeedWriter(tmp_path / "out", "ds") as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(pa.RecordBatchReader.from_batches(schema, batches))
        assert (caught.value.index, caught.value.field) == (before + row, field)
        assert w.records == before + row


def test_what_is_not_arrow_data_is_refused_naming_what_it_is(tmp_path: Path) -> None:
    message = refused(tmp_path, [{"url": url(0)}], TypeError)
    assert "expected Arrow data" in message and "got list" in message
    message = refused(tmp_path, pa.array([1, 2]))
    assert "int64 is not a table" in message


def test_a_stream_that_fails_midway_is_an_error_not_a_shorter_input(tmp_path: Path) -> None:
    schema = pa.schema([("url", pa.string())])

    def batches() -> Any:
        yield pa.record_batch([pa.array([url(0), url(1)])], schema=schema)
        raise ValueError("the export broke")

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    writer = FeedWriter(tmp_path / "out", "ds")
    with pytest.raises(FeedError) as caught:
        writer.add_arrow(reader)
    assert "cannot read the Arrow data" in str(caught.value)
    assert "the export broke" in str(caught.value)
    assert writer.records == 2  # the rows read before it are written, as before a refused row
    writer.abort()
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_stream_is_taken_a_batch_at_a_time_and_refused_rows_counted_across_it(
    tmp_path: Path,
) -> None:
    from fastfeed.sets import tables

    rows = [{"url": f"http://e.example.com/{i}", "pagerank": 80} for i in range(6)]
    rows[4]["pagerank"] = 1  # refused: outside 68 to 100
    table = pa.Table.from_pylist(rows)
    stream = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=3))
    refused: list[int] = []
    with FeedWriter(tmp_path / "o", "d") as writer:
        taken = tables.add_rows(writer, stream, lambda row, line, reason: refused.append(row))

    assert (taken, refused) == (6, [4])
    assert [r.url for r in decode_set(tmp_path / "o")] == [r["url"] for r in rows if r != rows[4]]


class _ArrowArrayStream(ctypes.Structure):
    """The C stream interface's struct: the callbacks as plain addresses."""

    _fields_ = [
        ("get_schema", ctypes.c_void_p),
        ("get_next", ctypes.c_void_p),
        ("get_last_error", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


#: A stream's `get_next`, the ArrowArray it fills seen as its first field: the length.
_GetNext = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))

#: What a capsule holds.
_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


class LyingStream:
    """An Arrow stream whose batches after the first `honest` each say they hold one row more
    than their columns do: a broken producer, whose batch made arrow-rs's stream reader panic as
    it sliced the columns."""

    def __init__(self, table: pa.Table, honest: int = 0) -> None:
        self._reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
        self._honest = honest
        self._kept: list[object] = []

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        capsule = self._reader.__arrow_c_stream__()
        stream = _ArrowArrayStream.from_address(_pointer(capsule, b"arrow_array_stream"))
        honest = _GetNext(stream.get_next)
        calls = itertools.count()

        def lying(stream: int, out: Any) -> int:
            code = honest(stream, out)
            if next(calls) >= self._honest:
                out[0] += 1  # at the end too, where the array is released and its length unread
            return code

        lying_next = _GetNext(lying)
        stream.get_next = ctypes.cast(lying_next, ctypes.c_void_p).value
        self._kept += [honest, lying_next]
        return capsule


class LyingArray:
    """A record batch exported as an array of structs that says it holds one row more than its
    columns do."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        schema, array = self._batch.__arrow_c_array__()
        ctypes.c_int64.from_address(_pointer(array, b"arrow_array")).value += 1  # its length
        return schema, array


def test_a_batch_saying_more_rows_than_its_columns_hold_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    """A faulty producer is a bad input, not a bug of fastfeed: refused as a stream that fails
    midway is, the rows before it written, and the writer goes on."""
    table = pa.Table.from_batches(
        [pa.record_batch({"url": [url(i) for i in range(a, b)]}) for a, b in [(0, 2), (2, 5)]]
    )
    with FeedWriter(tmp_path / "out", "ds", feedtype="full") as writer:
        with pytest.raises(FeedError) as caught:
            writer.add_arrow(LyingStream(table, honest=1))
        assert not isinstance(caught.value, RecordError)
        assert str(caught.value) == (
            "cannot read the Arrow data: C Data interface error: Arrow batch 1 (rows 2 to 5) is "
            "malformed: its column 'url' holds 3 rows where the batch says 4 (a fault of what "
            "exported it)"
        )
        assert writer.records == 2
        with pytest.raises(FeedError, match=r"Arrow batch 0 \(rows 0 to 3\) is malformed"):
            writer.add_arrow(LyingArray(table.to_batches()[1]))
        writer.add_arrow(pa.table({"url": [url(9)]}))
    assert [r.url for r in decode_set(tmp_path / "out")] == [url(0), url(1), url(9)]


def test_a_full_feed_whose_only_stream_is_malformed_closes_as_after_any_refused_input(
    tmp_path: Path,
) -> None:
    table = pa.table({"url": [url(i) for i in range(3)]})
    refused_row = pa.table({"url": [url(0)], "pagerank": [1]})
    closed = []
    for name, data in [("malformed", LyingStream(table)), ("refused", refused_row)]:
        writer = FeedWriter(tmp_path / name, "ds", feedtype="full")
        with pytest.raises(FeedError):
            writer.add_arrow(data)
        assert writer.records == 0
        # Not the internal error of a stopped writer: nothing was held, nothing lost.
        with pytest.raises(EmptyFullFeed) as caught:
            writer.close()
        closed.append(str(caught.value))
        assert not (tmp_path / name / "manifest.jsonl").exists()
    assert closed[0] == closed[1]


class _ArrowArray(ctypes.Structure):
    """The C data interface's ArrowArray, as far as its children."""

    _fields_ = [
        ("length", ctypes.c_int64),
        ("null_count", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("n_buffers", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("buffers", ctypes.c_void_p),
        ("children", ctypes.POINTER(ctypes.c_void_p)),
    ]


class ShortOfBuffers:
    """A record batch exported as an array of structs whose first column says it has
    `n_buffers` buffers: for a view column, fewer than its views and the lengths of its data
    buffers, which arrow-rs's import counted back from (a panic, or a slice of a wrapped
    length)."""

    def __init__(self, batch: pa.RecordBatch, n_buffers: int) -> None:
        self._batch = batch
        self._n_buffers = n_buffers

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        schema, array = self._batch.__arrow_c_array__()
        batch = _ArrowArray.from_address(_pointer(array, b"arrow_array"))
        _ArrowArray.from_address(batch.children[0]).n_buffers = self._n_buffers
        return schema, array


@pytest.mark.parametrize("n_buffers", [0, 2])
def test_a_view_column_short_of_its_buffers_is_refused_naming_its_batch(
    tmp_path: Path, n_buffers: int
) -> None:
    views = pa.record_batch({"url": pa.array([url(0), url(1)], pa.string_view())})
    with FeedWriter(tmp_path / "out", "ds", feedtype="full") as writer:
        with pytest.raises(FeedError) as caught:
            writer.add_arrow(ShortOfBuffers(views, n_buffers))
        assert str(caught.value) == (
            "cannot read the Arrow data: C Data interface error: Arrow batch 0 (rows 0 to 1) is "
            f"malformed: an array of type string_view has {n_buffers} buffers, not 3 or more (a "
            "fault of what exported it)"
        )
        writer.add_arrow(views)
    assert [r.url for r in decode_set(tmp_path / "out")] == [url(0), url(1)]
