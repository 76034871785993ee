"""`GroupsWriter.add_arrow`: memberships as Arrow tables, read in place, making the same groups
feed files as the same memberships given to `add_batch`."""

from __future__ import annotations

import itertools
import json
import random
import struct
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from fastfeed import FeedError, GroupsWriter, RecordError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_arrow import LyingStream, cut
from test_roundtrip import principal_name

Rows = list[dict[str, Any]]

MEMBER = pa.struct(
    [
        ("name", pa.string()),
        ("scope", pa.string()),
        ("namespace", pa.string()),
        ("case_sensitive", pa.bool_()),
        ("principal_type", pa.string()),
    ]
)
SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("namespace", pa.string()),
        ("case_sensitive", pa.bool_()),
        ("principal_type", pa.string()),
        ("members", pa.list_(MEMBER)),
    ]
)


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def by_batch(out: Path, rows: Rows) -> dict[str, bytes]:
    """The files of `rows` given as dicts, a null value as an absent field."""

    def present(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    with GroupsWriter(out, "ldap", max_bytes=2000) as w:
        w.add_batch([present(r) | {"members": [present(m) for m in r["members"]]} for r in rows])
    return files(out)


def by_arrow(out: Path, *tables: Any) -> dict[str, bytes]:
    with GroupsWriter(out, "ldap", max_bytes=2000) as w:
        for table in tables:
            w.add_arrow(table)
    return files(out)


def as_table(rows: Rows, schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def rows_of(count: int) -> Rows:
    """Memberships with every field, some null, names that need escaping."""
    return [
        {
            "group": f"team & <{i}>",
            "namespace": "Corp" if i % 2 else None,
            "case_sensitive": [None, True, False][i % 3],
            "principal_type": "unqualified" if i % 4 == 1 else None,
            "members": [
                {
                    "name": f"CORP\\user{i}-{m} ]]>",
                    "scope": "group" if m % 3 == 2 else "user",
                    "namespace": "Default" if m % 2 else None,
                    "case_sensitive": False if m == 1 else None,
                    "principal_type": "unqualified" if m == 2 else None,
                }
                for m in range(i % 4 + 1)
            ],
        }
        for i in range(count)
    ]


member = st.fixed_dictionaries(
    {"name": principal_name, "scope": st.sampled_from(["user", "group"])},
    optional={
        "namespace": principal_name | st.none(),
        "case_sensitive": st.booleans() | st.none(),
        "principal_type": st.just("unqualified") | st.none(),
    },
)
memberships = st.lists(
    st.fixed_dictionaries(
        {"group": principal_name, "members": st.lists(member, min_size=1, max_size=4)},
        optional={
            "namespace": principal_name | st.none(),
            "case_sensitive": st.booleans() | st.none(),
            "principal_type": st.just("unqualified") | st.none(),
        },
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=memberships, chunk=st.integers(1, 5))
def test_groups_files_are_the_same_bytes_as_from_dicts(tmp_path_factory, rows, chunk) -> None:  # type: ignore[no-untyped-def]
    """Hostile Unicode in every name, nulls in every optional column; the table whole, in
    chunks, and sliced out of a longer one."""
    work = Path(tmp_path_factory.mktemp("groups"))
    expected = by_batch(work / "dicts", rows)
    table = as_table(rows)
    assert by_arrow(work / "whole", table) == expected
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=chunk))
    assert by_arrow(work / "chunked", chunked) == expected
    padded = as_table(rows_of(2) + rows + rows_of(1))
    assert by_arrow(work / "sliced", padded.slice(2, len(rows))) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=memberships, at=st.lists(st.integers(0, 12), max_size=8), views=st.booleans())
def test_memberships_in_batches_of_any_size_are_the_same_bytes(  # type: ignore[no-untyped-def]
    tmp_path_factory, rows, at, views
) -> None:
    """Small batches are gathered into one before they are read: cut anywhere, each batch with
    buffers of its own (a table grown by appends), in pyarrow's layout or in Polars' and
    DuckDB's, the memberships make the same files as the dicts."""
    work = Path(tmp_path_factory.mktemp("cut"))
    table = as_views(as_table(rows)) if views else as_table(rows)
    assert by_arrow(work / "cut", cut(table, at)) == by_batch(work / "dicts", rows)


def test_thousands_of_memberships_in_small_batches_are_the_same_bytes_as_in_one(
    tmp_path: Path,
) -> None:
    """More rows than one gathering holds, in batches of 1 to 300 rows, of their own or sliced
    out of a bigger one; a bad row among them is named by its index across them, and the rows
    before it are written."""
    rng = random.Random(3)
    rows = rows_of(4000)
    whole = as_table(rows)
    cuts = list(itertools.accumulate(rng.randint(1, 300) for _ in range(50)))
    expected = by_arrow(tmp_path / "whole", whole)
    assert by_arrow(tmp_path / "own", cut(whole, cuts)) == expected
    shared = pa.Table.from_batches(whole.to_batches(max_chunksize=1))
    assert by_arrow(tmp_path / "shared", shared) == expected
    rows[3210]["members"][0]["scope"] = "role"
    with GroupsWriter(tmp_path / "bad", "ldap") as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(cut(as_table(rows), cuts))
        assert (caught.value.index, caught.value.field) == (3210, "members")
        assert w.records == 3210


def with_json_members(rows: Rows) -> pa.Table:
    """`rows` with each row's members as JSON text, as a content feed's `acl` may be given."""
    table = as_table(rows)
    members = pa.array([json.dumps(r["members"]) for r in rows], pa.string())
    return table.set_column(table.schema.get_field_index("members"), "members", members)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=memberships, views=st.booleans())
def test_members_as_json_text_are_the_same_bytes_as_from_dicts(  # type: ignore[no-untyped-def]
    tmp_path_factory, rows, views
) -> None:
    work = Path(tmp_path_factory.mktemp("json"))
    table = with_json_members(rows)
    if views:
        table = table.cast(
            pa.schema(
                [
                    f.with_type(pa.string_view()) if f.type == pa.string() else f
                    for f in table.schema
                ]
            )
        )
    assert by_arrow(work / "json", table) == by_batch(work / "dicts", rows)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ('[{"name": "a", "scope": "role"}]', "members[0]: scope 'role' is not user or group"),
        ('[{"name": "a", "scope": "user", "access": "permit"}]', "no access"),
        ('[{"name": "a", "scope": "user", "nmae": "b"}]', "unknown field 'nmae'"),
        ('[{"name": "a", "scope": "user"}', "EOF while parsing"),
        ('[["a", "user", null, null, null]]', "expected each principal as a JSON object"),
        ("[]", "a group needs at least one member"),
        (None, "a group needs at least one member"),
    ],
)
def test_members_as_json_text_are_refused_naming_row_and_column(
    tmp_path: Path, members: str | None, message: str
) -> None:
    rows = rows_of(3)
    table = with_json_members(rows)
    texts = table.column("members").to_pylist()
    texts[1] = members
    table = table.set_column(4, "members", pa.array(texts, pa.string()))
    with GroupsWriter(tmp_path / "bad", "ldap") as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(table)
        assert (caught.value.index, caught.value.field) == (1, "members")
        assert message in str(caught.value)
        assert w.records == 1


def as_views(table: pa.Table) -> pa.Table:
    """Every string a string view, members a large list: the layouts Polars and DuckDB give."""
    member = pa.struct(
        [(f.name, pa.string_view() if f.type == pa.string() else f.type) for f in MEMBER]
    )
    schema = pa.schema(
        [
            (f.name, pa.string_view() if f.type == pa.string() else pa.large_list(member))
            if f.type != pa.bool_()
            else f
            for f in SCHEMA
        ]
    )
    return table.cast(schema)


def test_every_string_and_list_layout_is_read(tmp_path: Path) -> None:
    rows = rows_of(30)
    expected = by_batch(tmp_path / "dicts", rows)
    table = as_table(rows)
    large = table.cast(
        pa.schema(
            [(f.name, pa.large_string() if f.type == pa.string() else f.type) for f in SCHEMA]
        )
    )
    assert by_arrow(tmp_path / "large", large) == expected
    assert by_arrow(tmp_path / "views", as_views(table)) == expected
    # Group names and namespaces dictionary-encoded, as a directory export repeats them.
    encoded = table.set_column(0, "group", table.column("group").dictionary_encode())
    encoded = encoded.set_column(1, "namespace", table.column("namespace").dictionary_encode())
    assert by_arrow(tmp_path / "dictionary", encoded) == expected


def test_a_polars_frame_and_a_duckdb_result_are_read_in_place(tmp_path: Path) -> None:
    rows = rows_of(20)
    expected = by_batch(tmp_path / "dicts", rows)
    frame = pl.concat(
        [pl.from_arrow(as_table(rows[:7])), pl.from_arrow(as_table(rows[7:]))], rechunk=False
    )
    assert isinstance(frame, pl.DataFrame) and frame.n_chunks() == 2
    assert by_arrow(tmp_path / "polars", frame) == expected

    db = duckdb.connect()
    db.register("exported", as_table(rows))
    result = db.sql("SELECT * FROM exported")
    assert by_arrow(tmp_path / "duckdb", result) == expected


def test_a_bad_row_names_its_row_across_chunks_and_the_rows_before_it_are_written(
    tmp_path: Path,
) -> None:
    rows = rows_of(10)
    rows[6]["members"][0]["scope"] = "role"
    table = pa.Table.from_batches(as_table(rows).to_batches(max_chunksize=3))
    with GroupsWriter(tmp_path / "bad", "ldap", max_bytes=2000) as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(table.slice(1))
        assert (caught.value.index, caught.value.field) == (5, "members")
        assert "members[0]: scope 'role' is not user or group" in str(caught.value)
        # The rows before it are written; the rest follows after it.
        assert w.records == 5
        w.add_arrow(table.slice(1 + caught.value.index + 1))
    good = rows[1:6] + rows[7:]
    assert files(tmp_path / "bad") == by_batch(tmp_path / "dicts", good)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"group": None}, "group", "is null: every membership names its group"),
        ({"group": " "}, "group", "would be lost"),
        ({"members": []}, "members", "a group needs at least one member"),
        ({"members": None}, "members", "a group needs at least one member"),
        ({"members": [{"name": "a", "scope": "user"}, None]}, "members", "members[1]: is null"),
        ({"members": [{"name": None, "scope": "user"}]}, "members", "members[0]: name is required"),
        ({"principal_type": "local"}, "principal_type", "'local'"),
    ],
)
def test_a_bad_value_is_refused_with_the_error_add_batch_gives(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    rows = rows_of(3)
    rows[2] |= change
    with pytest.raises(RecordError) as caught, GroupsWriter(tmp_path, "ldap") as w:
        w.add_arrow(as_table(rows))
    assert (caught.value.index, caught.value.field) == (2, field)
    assert message in str(caught.value)


def test_members_whose_offsets_go_down_among_small_batches_are_refused_at_their_row(
    tmp_path: Path,
) -> None:
    """A foreign exporter's list offsets that go down (0, 2, 1, 3), gathered with the small
    batches around them, are refused at the row as read alone: not a panic, nor rows lost."""
    good = as_table(rows_of(4))
    members = good.column("members").combine_chunks()
    lying = pa.Array.from_buffers(
        members.type,
        3,
        [None, pa.py_buffer(struct.pack("<4i", 0, 2, 1, 3))],
        children=[members.values],
    )
    bad = good.slice(0, 3).combine_chunks().set_column(4, "members", lying)
    batches = [
        *good.slice(0, 2).to_batches(max_chunksize=1),
        *bad.to_batches(),
        *good.slice(3).to_batches(),
    ]
    with GroupsWriter(tmp_path / "out", "ldap") as w:
        with pytest.raises(RecordError) as caught:
            w.add_arrow(pa.RecordBatchReader.from_batches(good.schema, batches))
        assert (caught.value.index, caught.value.field) == (3, "members")
        assert w.records == 3


def test_a_batch_saying_more_memberships_than_its_columns_hold_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    table = cut(as_table(rows_of(5)), [2])
    with GroupsWriter(tmp_path / "out", "ldap") as w:
        with pytest.raises(FeedError) as caught:
            w.add_arrow(LyingStream(table, honest=1))
        assert not isinstance(caught.value, RecordError)
        assert "Arrow batch 1 (rows 2 to 5) is malformed: its column 'group' holds 3 rows " in str(
            caught.value
        )
        assert w.records == 2
        w.add_arrow(table.slice(2))
    assert files(tmp_path / "out") == by_arrow(tmp_path / "whole", table)


def refused(tmp_path: Path, table: Any) -> str:
    with pytest.raises(FeedError) as caught, GroupsWriter(tmp_path, "ldap") as w:
        w.add_arrow(table)
    assert not isinstance(caught.value, RecordError)
    return str(caught.value)


def test_columns_that_make_no_membership_are_refused_naming_them(tmp_path: Path) -> None:
    members = pa.array([[{"name": "a", "scope": "user"}]])
    assert refused(tmp_path / "a", pa.table({"group": ["g"], "membres": members})) == (
        "unknown column 'membres': did you mean 'members'?"
    )
    assert refused(
        tmp_path / "b", pa.table({"group": ["g"], "members": members, "url": ["x"]})
    ) == (
        "unknown column 'url' (fields: group, namespace, case_sensitive, principal_type, members)"
    )
    assert "there is no 'members' column" in refused(tmp_path / "c", pa.table({"group": ["g"]}))
    assert "there is no 'group' column" in refused(tmp_path / "d", pa.table({"members": members}))
    assert refused(tmp_path / "e", pa.table({"group": [1], "members": members})) == (
        "column 'group' is int64: expected strings (string, large_string, string_view, or a "
        "dictionary of them)"
    )
    wrong = pa.array([[{"name": "a", "scope": "user", "role": "x"}]])
    assert "column 'members[]' has a field 'role'" in refused(
        tmp_path / "f", pa.table({"group": ["g"], "members": wrong})
    )
    # A member has no access: the fields listed are those a member takes.
    access = pa.array([[{"name": "a", "scope": "user", "access": "permit"}]])
    assert refused(tmp_path / "h", pa.table({"group": ["g"], "members": access})) == (
        "column 'members[]' has a field 'access', which is not one of name, scope, namespace, "
        "case_sensitive, principal_type"
    )
    # Arrow allows a name twice in a struct: neither is read, rather than one lost in silence.
    twice = pa.StructArray.from_arrays(
        [pa.array(["x"]), pa.array(["user"]), pa.array(["y"])], names=["name", "scope", "name"]
    )
    table = pa.table(
        {"group": ["a"], "members": pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), twice)}
    )
    assert refused(tmp_path / "i", table) == "column 'members[].name' is given twice"
    # An empty stream is checked too: its schema is all there is.
    empty = pa.table({"group": pa.array([], pa.string()), "memberz": pa.array([], pa.string())})
    assert "unknown column 'memberz'" in refused(tmp_path / "g", empty)


def test_a_feed_writer_still_takes_records_only(tmp_path: Path) -> None:
    from fastfeed import FeedWriter

    with pytest.raises(FeedError, match="unknown column 'group'"), FeedWriter(tmp_path, "ds") as w:
        w.add_arrow(as_table(rows_of(1)))


def test_each_writer_says_the_kind_of_set_it_writes(tmp_path: Path) -> None:
    """The core writer's kind, which says what a table's rows are to it (records, memberships)."""
    from fastfeed import FeedWriter

    with GroupsWriter(tmp_path / "g", "ldap") as g, FeedWriter(tmp_path / "f", "ds") as f:
        g.add_arrow(as_table(rows_of(1)))
        f.add({"url": "http://a.example.com/", "content": "x"})
        assert (g.kind, f.kind) == ("groups", "feed")


def groups_build(*argv: str) -> int:
    from fastfeed.cli import main

    return main(["groups", "build", *argv, "--groupsource", "ldap", "--max-bytes", "2000"])


def test_the_cli_builds_parquet_and_arrow_files_as_their_json_lines(tmp_path: Path) -> None:
    import orjson
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    rows = rows_of(40)
    rows[13]["members"][0]["scope"] = "role"
    (tmp_path / "g.jsonl").write_bytes(
        b"".join(
            orjson.dumps({k: v for k, v in r.items() if v is not None} | {"members": r["members"]})
            + b"\n"
            for r in rows
        )
    )
    # A dataset of part files without extensions, as Hive writes them, and an Arrow file.
    (tmp_path / "export").mkdir()
    for i, part in enumerate((rows[:25], rows[25:])):
        pq.write_table(as_table(part), tmp_path / "export" / f"00000{i}_0")
    feather.write_feather(as_table(rows), tmp_path / "g.arrow")
    for name in ("g.jsonl", "export", "g.arrow"):  # 1: a row was refused, and set aside
        assert groups_build(str(tmp_path / name), "--out", str(tmp_path / f"out-{name}"),
                            "--on-error", "skip") == 1  # fmt: skip
    built = files(tmp_path / "out-g.jsonl")
    assert len(built) > 4
    for name in ("export", "g.arrow"):
        out = files(tmp_path / f"out-{name}")
        assert {k: v for k, v in out.items() if not k.startswith("rejected")} == {
            k: v for k, v in built.items() if not k.startswith("rejected")
        }
        # The refused row, to be fixed and fed again as JSON Lines.
        assert orjson.loads(out["rejected.jsonl"])["members"][0]["scope"] == "role"
        assert b"row 13: members: members[0]: scope 'role'" in out["rejected.log"]


def test_the_cli_refuses_a_table_of_records_naming_file_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"url": ["http://a.example.com/"]}), tmp_path / "docs.parquet")
    assert groups_build(str(tmp_path / "docs.parquet"), "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'docs.parquet'}" in err and "unknown column 'url'" in err


@pytest.mark.parametrize("problem", ["a stray file", "a subdirectory by a glob"])
def test_the_cli_names_what_is_wrong_with_a_directory_and_advises_what_groups_build_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    import pyarrow.parquet as pq

    directory = tmp_path / "export"
    directory.mkdir()
    if problem == "a stray file":
        pq.write_table(as_table(rows_of(2)), directory / "a.parquet")
        (directory / "notes.txt").write_text("exported nightly")
        (directory / "_SUCCESS").write_bytes(b"")
        given, why = str(directory), f"{directory / 'notes.txt'} is not a Parquet or Arrow file"
    else:
        (directory / "2024").mkdir()
        given = str(directory / "*")
        why = f"{directory / '2024'} is a directory but no dataset of Parquet or Arrow files"
    assert groups_build(given, "--out", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert why in err
    assert "--base-url" not in err  # a feed build's option, not this command's
