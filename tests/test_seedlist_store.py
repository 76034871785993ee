"""The seedlist store: what loading records records, and what it refuses before any page is
served (so that every page stays well-formed and no ACL is served more permissive)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastfeed import _core
from fastfeed.errors import LoadError, MassDelete
from fastfeed.seedlist import SeedlistStore

URL = "http://docs.example.com/a"


@pytest.fixture
def store(tmp_path: Path) -> SeedlistStore:
    return SeedlistStore(tmp_path / "s.sqlite")


def changes(store: SeedlistStore) -> list[tuple[str, bool]]:
    """(url, deleted) of what an incremental crawl from the start would report."""
    position = store.position()
    found = store.changes(0, position.change, 100, deletions=True, inline_limit=0)
    return [(c.url, c.deleted) for c in found]


def test_upsert_and_delete_say_whether_anything_changed(store: SeedlistStore) -> None:
    assert store.upsert({"url": URL, "content": "one"})
    assert not store.upsert({"url": URL, "content": "one"})
    assert store.upsert({"url": URL, "content": "one", "metadata": {"k": "v"}})
    assert store.delete(URL)
    assert not store.delete(URL)
    assert not store.delete("http://docs.example.com/never")
    assert store.upsert({"url": URL, "content": "back"})
    assert store.position().change == 4  # insert, update, delete, insert


def test_an_unchanged_reload_takes_no_change_number(store: SeedlistStore) -> None:
    records = [{"url": f"{URL}{i}", "content": str(i)} for i in range(3)]
    store.load(records)
    before = store.position().change

    summary = store.load(records)

    assert (summary.inserted, summary.updated, summary.unchanged) == (0, 0, 3)
    assert store.position().change == before


def test_a_refused_record_leaves_the_store_as_it_was(store: SeedlistStore) -> None:
    store.load([{"url": URL, "content": "kept"}])
    before = store.position()

    with pytest.raises(LoadError) as caught:
        store.load(
            [{"url": URL + "2", "content": "x"}, {"url": URL, "action": "delete"}, {"url": 3}]
        )

    assert str(caught.value) == "record 2: url: expected a string, got int"
    assert store.position() == before
    assert changes(store) == [(URL, False)]


def test_deletions_are_kept_as_tombstones_until_purged(store: SeedlistStore) -> None:
    store.load([{"url": URL, "content": "x"}, {"url": URL + "2", "content": "y"}])
    store.delete(URL)
    assert changes(store) == [(URL + "2", False), (URL, True)]
    assert store.content(1) is None and store.content(2) == ("text/plain", b"y")

    assert store.purge_deletions(before=0) == 0
    assert store.purge_deletions(before=float("inf")) == 1
    assert changes(store) == [(URL + "2", False)]
    assert store.position().horizon == 3


def principal(**extra: Any) -> dict[str, Any]:
    return {"name": "alice", "scope": "user", **extra}


@pytest.mark.parametrize(
    ("record", "field", "reason"),
    [
        ({"content": "x"}, "url", "missing"),
        ({"url": "http://localhost/a"}, "url", "qualified"),
        ({"url": URL, "colour": "red"}, "colour", "unknown field"),
        ({"url": URL, "action": "remove"}, "action", "not add or delete"),
        ({"url": URL, "action": "delete", "content": "x"}, "content", "no content"),
        ({"url": URL, "content": "x", "content_base64": "eA=="}, "content_base64", "at most one"),
        ({"url": URL, "content_base64": "not base64!"}, "content_base64", "base64"),
        ({"url": URL, "content_path": "/no/such/file"}, "content_path", "cannot read"),
        ({"url": URL, "last_modified": "yesterday"}, "last_modified", "not a date"),
        ({"url": URL, "pagerank": 40}, "pagerank", "68 to 100"),
        ({"url": URL, "kind": "acl", "acl": {"principals": [principal()]}}, "kind", "ACL alone"),
        ({"url": URL, "kind": "folder"}, "kind", "not document or acl"),
        ({"url": URL, "content": "x", "overwrite_acls": False}, "overwrite_acls", "replaces"),
        ({"url": URL, "content": "x", "overwrite_acls": "yes"}, "overwrite_acls", "true or false"),
        ({"url": URL, "metadata": {"k": 1}}, "metadata.k", "expected a string"),
        ({"url": URL, "metadata": {"k": "bell \x07"}}, "metadata.k", "U+0007"),
        ({"url": URL, "metadata": {"bad\x00name": "v"}}, "metadata name 'bad\\x00name'", "U+0000"),
        ({"url": URL, "metadata": {"title": ["a", "b"]}}, "metadata.title", "one value"),
        ({"url": URL, "displayurl": "http://x.example.com/\x1b"}, "displayurl", "U+001B"),
        ({"url": URL, "mimetype": "text/\ufffe"}, "mimetype", "U+FFFE"),
        ({"url": URL, "mimetype": "text/plain\r\nX-Injected: 1"}, "mimetype", "not a MIME type"),
        ({"url": URL, "mimetype": "pdf"}, "mimetype", "not a MIME type"),
        ({"url": URL, "acl": {"principals": []}}, "acl.principals", "public"),
        (
            {"url": URL, "acl": {"principals": [principal(access="deny")]}},
            "acl.principals[0].access",
            "deny",
        ),
        (
            {"url": URL, "acl": {"principals": [principal()], "inherit_from": URL}},
            "acl.inherit_from",
            "inherit",
        ),
        (
            {"url": URL, "acl": {"principals": [principal()], "inheritance_type": "x"}},
            "acl.inheritance_type",
            "not one of",
        ),
        (
            {"url": URL, "acl": {"principals": [principal(scope="role")]}},
            "acl.principals[0].scope",
            "user or group",
        ),
        (
            {"url": URL, "acl": {"principals": [principal(name=" bob")]}},
            "acl.principals[0].name",
            "white space",
        ),
        (
            {"url": URL, "acl": {"principals": [principal(namespace="a:b")]}},
            "acl.principals[0].namespace",
            "':'",
        ),
        (
            {"url": URL, "acl": {"principals": [principal(name="a\x01")]}},
            "acl.principals[0].name",
            "U+0001",
        ),
    ],
)
def test_refused_records_name_the_field_and_why(
    store: SeedlistStore, record: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(LoadError) as caught:
        store.load([record])

    assert caught.value.field == field
    assert reason in caught.value.reason
    assert store.position().change == 0


def test_every_field_of_the_schema_is_known(store: SeedlistStore) -> None:
    # The fields shared with feeds that a seedlist has no use for are taken, not refused.
    store.load([{"url": URL, "content": "x", "kind": "document", "overwrite_acls": True}])
    assert store.position().change == 1


def test_acl_tokens_fold_case_insensitive_names_and_drop_duplicates(store: SeedlistStore) -> None:
    acl = {
        "principals": [
            {"name": "Alice", "scope": "user", "case_sensitive": False},
            {"name": "alice", "scope": "user", "case_sensitive": False},
            {"name": "Eng", "scope": "group", "namespace": "corp", "access": "permit"},
        ],
        "inheritance_type": "leaf-node",
    }
    store.load([{"url": URL, "content": "x", "acl": acl}])

    (change,) = store.changes(0, 1, 10, deletions=False, inline_limit=0)

    assert change.acl == ["user:Default:alice", "group:corp:Eng"]


def test_dates_become_rfc3339_utc(store: SeedlistStore) -> None:
    dates = [
        "2024-05-01T12:00:00Z",
        "2024-05-01T14:00:00+02:00",
        "2024-05-01T12:00:00",
        "Wed, 01 May 2024 12:00:00 GMT",
        1714564800,
    ]
    store.load({"url": f"{URL}{i}", "last_modified": d} for i, d in enumerate(dates))

    found = store.changes(0, 10, 10, deletions=False, inline_limit=0)

    assert {c.last_modified for c in found} == {"2024-05-01T12:00:00Z"}


# Change detection: the fingerprint of `fastfeed sync`, of the document as served


def digests(store: SeedlistStore) -> dict[str, bytes]:
    rows = sqlite3.connect(store.path).execute("SELECT url, digest FROM documents")
    return dict(rows.fetchall())


def test_the_fingerprint_is_the_one_sync_compares_records_by(store: SeedlistStore) -> None:
    # A record as the feed writer takes it, given as the seedlist serves it.
    record = {
        "url": URL,
        "mimetype": "text/html",
        "last_modified": "2024-05-01T12:00:00Z",
        "metadata": {"title": "A", "tag": ["x", "y"]},
        "content": "<p>hi</p>",
        "acl": {
            "principals": [
                {"name": "bob", "scope": "user", "access": "permit", "namespace": "Default"}
            ]
        },
    }
    store.load([record])

    rows, *_ = _core.fingerprint_jsonl(orjson.dumps(record) + b"\n")

    assert orjson.loads(rows) == [[URL, digests(store)[URL].hex()]]


def test_what_the_seedlist_does_not_serve_changes_nothing(
    store: SeedlistStore, tmp_path: Path
) -> None:
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    first = [
        {"url": URL, "metadata": {"a": "1", "b": "2"}, "last_modified": 1714564800,
         "acl": {"principals": [{"name": "Alice", "scope": "user", "case_sensitive": False}]},
         "content": "x", "pagerank": 80},
        {"url": URL + ".pdf", "content_path": str(tmp_path / "a.pdf")},
    ]  # fmt: skip
    again = [
        {"pagerank": 90, "lock": True, "content": "x", "url": URL,
         "acl": {"principals": [{"name": "alice", "scope": "user", "access": "permit"}],
                 "inheritance_type": "leaf-node"},
         "last_modified": "Wed, 01 May 2024 12:00:00 GMT", "metadata": {"b": "2", "a": "1"}},
        {"url": URL + ".pdf", "content_base64": "JVBERg==", "mimetype": "application/pdf"},
    ]  # fmt: skip
    store.load(first)

    summary = store.load(again)

    assert (summary.unchanged, summary.updated) == (2, 0)
    assert store.position().change == 2


@pytest.mark.parametrize(
    "change",
    [
        {"content": "y"},
        {"content": b"x"},  # bytes are served by src, text inline
        {"mimetype": "text/html"},
        {"displayurl": "http://docs.example.com/view/a"},
        {"last_modified": 1714564801},
        {"metadata": {"a": ["1", "3"]}},
        {"metadata": {"a": "1", "c": "1"}},
        {"acl": {"principals": [{"name": "alice", "scope": "group"}]}},
        {"acl": {"principals": [{"name": "alice", "scope": "user", "namespace": "corp"}]}},
    ],
)
def test_whatever_the_seedlist_serves_counts(store: SeedlistStore, change: dict[str, Any]) -> None:
    base = {
        "url": URL,
        "content": "x",
        "last_modified": 1714564800,
        "metadata": {"a": "1"},
        "acl": {"principals": [{"name": "alice", "scope": "user"}]},
    }
    store.load([base])

    assert store.load([{**base, **change}]).updated == 1


def test_a_file_s_name_counts_when_it_gives_the_mime_type(
    store: SeedlistStore, tmp_path: Path
) -> None:
    for name in ("a.pdf", "a.html"):
        (tmp_path / name).write_bytes(b"same bytes")
    store.load([{"url": URL, "content_path": str(tmp_path / "a.pdf")}])

    assert store.load([{"url": URL, "content_path": str(tmp_path / "a.html")}]).updated == 1
    assert store.changes(1, 2, 1, deletions=False, inline_limit=0)[0].mimetype == "text/html"


def test_a_store_of_older_digests_is_fingerprinted_again_not_reported_changed(
    store: SeedlistStore,
) -> None:
    records = [{"url": f"{URL}{i}", "content": str(i), "metadata": {"k": "v"}} for i in range(5)]
    store.load([*records, {"url": URL + "gone", "content": "x"}])
    store.delete(URL + "gone")
    fresh = digests(store)
    # As a store made before fingerprints holds them: digests of another form, no version.
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE documents SET digest = randomblob(32) WHERE NOT deleted")
        db.execute("DELETE FROM meta WHERE key = 'fingerprint'")
    before = store.position()

    preview = store.load(records, dry_run=True)
    summary = store.load([*records[1:], {**records[0], "content": "changed"}])

    assert (preview.unchanged, preview.updated) == (5, 0)
    assert (summary.unchanged, summary.updated) == (4, 1)
    assert store.position().change == before.change + 1
    assert {url: d for url, d in digests(store).items() if url != f"{URL}0"} == {
        url: d for url, d in fresh.items() if url != f"{URL}0"
    }
    assert changes(store)[-1] == (f"{URL}0", False)


# Snapshots: the whole source, the documents it lacks deleted, guarded as `fastfeed sync` is


def docs(*numbers: int, version: str = "") -> list[dict[str, Any]]:
    return [{"url": f"{URL}{n}", "content": f"{n}{version}"} for n in numbers]


def test_a_snapshot_deletes_what_it_lacks_keeping_tombstones(store: SeedlistStore) -> None:
    store.load(docs(*range(20)))

    summary = store.load([*docs(*range(2, 19)), *docs(19, version="v2"), *docs(20)], snapshot=True)

    assert (summary.inserted, summary.updated, summary.deleted, summary.unchanged) == (1, 1, 2, 17)
    assert (summary.held, summary.examples) == (20, {"deleted": [f"{URL}0", f"{URL}1"]})
    assert changes(store)[-4:] == [
        (f"{URL}19", False), (f"{URL}20", False), (f"{URL}0", True), (f"{URL}1", True)
    ]  # fmt: skip
    again = store.load(docs(*range(2, 21)), snapshot=True)
    assert (again.deleted, again.updated, again.held) == (0, 1, 19)


def test_a_snapshot_that_deletes_too_much_is_refused_and_keeps_nothing(
    store: SeedlistStore,
) -> None:
    store.load(docs(*range(10)))
    before = store.position()
    half = [*docs(*range(5)), *docs(10, 11)]

    with pytest.raises(MassDelete) as refused:
        store.load(half, snapshot=True)
    with pytest.raises(MassDelete):
        store.load(half, snapshot=True, allow_deletes=4)
    with pytest.raises(MassDelete, match="The snapshot is empty"):
        store.load([], snapshot=True, allow_deletes=0.5)

    assert (refused.value.deleted, refused.value.held) == (5, 10)
    assert "more than allowed (the default, 10% of it); nothing was loaded" in str(refused.value)
    assert "load again with --allow-deletes 5" in str(refused.value)
    assert store.position() == before and len(changes(store)) == 10
    assert store.load(half, snapshot=True, allow_deletes=0.5).deleted == 5
    assert store.load([], snapshot=True, allow_deletes=7).deleted == 7


def test_a_dry_run_shows_what_a_snapshot_would_do_and_keeps_nothing(
    store: SeedlistStore,
) -> None:
    store.load(docs(*range(4)))
    before = store.position()

    preview = store.load(docs(0, 9), snapshot=True, dry_run=True)

    assert (preview.inserted, preview.deleted, preview.unchanged) == (1, 3, 1)
    assert "would delete 3 of the 4 documents" in preview.refused
    assert preview.describe().startswith("would load 1 inserted, 0 updated, 3 deleted")
    assert store.position() == before and len(changes(store)) == 4


@pytest.mark.parametrize(
    ("record", "field", "reason"),
    [
        ({"url": f"{URL}1", "action": "delete"}, "action", "no deletes in it"),
        ({"url": f"{URL}0", "content": "again"}, "url", f"{URL}0 is also at record 0"),
    ],
)
def test_a_snapshot_holds_each_document_once_and_no_deletes(
    store: SeedlistStore, record: dict[str, Any], field: str, reason: str
) -> None:
    store.load(docs(0, 1))

    with pytest.raises(LoadError) as caught:
        store.load([*docs(0, 1), record], snapshot=True)

    assert (caught.value.location, caught.value.field) == ("record 2", field)
    assert reason in caught.value.reason
    assert store.position().change == 2


def test_a_snapshot_deletes_however_many_it_lacks(store: SeedlistStore) -> None:
    store.load(docs(*range(2500)))

    summary = store.load(docs(1234), snapshot=True, allow_deletes=1.0)

    assert (summary.deleted, summary.unchanged) == (2499, 1)
    assert store.load(docs(*range(2500)), snapshot=True).inserted == 2499
