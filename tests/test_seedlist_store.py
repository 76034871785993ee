"""The seedlist store: what loading records records, and what it refuses before any page is
served (so that every page stays well-formed and no ACL is served more permissive)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastfeed.errors import LoadError
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
