"""Per-URL ACLs end to end: JSON Lines through `fastfeed build` (per-url and legacy formats),
valid against the gsafeed DTD, pushed over real HTTPS, and stored by the emulated appliance as
the input said; bad ACLs are refused naming their input line, and leave no feed behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import TLSFiles, cli_target
from fastfeed import FeedWriter, RecordError, _core, read_manifest
from fastfeed.cli import main
from fastfeed.emulator import Acl, Emulator, Principal
from fastfeed.emulator.security import legacy_acl
from fastfeed.gsa.validate import validate_file

ALICE = {
    "name": "CORP\\alice",
    "scope": "user",
    "access": "permit",
    "namespace": "Default",
    "case_sensitive": False,
}
RECORDS: list[dict[str, Any]] = [
    {
        "kind": "acl",
        "url": "http://share.example.com/dir/",
        "acl": {
            "principals": [{"name": "everyone", "scope": "group", "access": "permit"}],
            "inheritance_type": "parent-overrides",
        },
    },
    {
        "url": "http://share.example.com/dir/a.txt",
        "content": "secret",
        "acl": {
            "principals": [
                ALICE,
                {"name": "interns", "scope": "group", "access": "deny", "case_sensitive": True},
                {
                    "name": "site owners",
                    "scope": "group",
                    "access": "permit",
                    "principal_type": "unqualified",
                },
                {"name": 'a&b <"c">', "scope": "user", "access": "deny", "namespace": "N s"},
            ],
            "inheritance_type": "child-overrides",
            "inherit_from": "http://share.example.com/dir/",
        },
        "overwrite_acls": False,
        "metadata": {"author": "alice"},
    },
    {"url": "http://share.example.com/dir/public.txt", "content": "open"},
]


pytestmark = pytest.mark.usefixtures("clean_env")


def jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def expected_acls(records: list[dict[str, Any]], datasource: str) -> dict[str, Acl]:
    """The ACLs the appliance must hold: the input's, with the gsafeed DTD's defaults."""
    out = {}
    for r in records:
        if "acl" not in r:
            continue
        acl = r["acl"]
        principals = tuple(
            Principal(
                p["name"],
                p["scope"],
                p["access"],
                p.get("namespace"),
                p.get("case_sensitive", True),
                p.get("principal_type"),
            )
            for p in acl["principals"]
        )
        out[r["url"]] = Acl(
            r["url"],
            principals,
            acl.get("inheritance_type", "leaf-node"),
            acl.get("inherit_from"),
            standalone=r.get("kind") == "acl",
            datasource=datasource,
        )
    return out


def pushed_acls(emulator: Emulator, datasource: str) -> dict[str, Acl]:
    emulator.wait_idle()
    assert all(p.outcome == "applied" for p in emulator.pushes())
    return {url: Acl(**{**vars(a), "push_id": 0}) for url, a in emulator.acls(datasource).items()}


def build_validate_push(
    records: list[dict[str, Any]],
    emulator: Emulator,
    tls: TLSFiles,
    *options: str,
    out: str = "out",
) -> Path:
    source = jsonl(Path("docs.jsonl"), records)
    assert main(["build", str(source), "--datasource", "docs", "--out", out, *options]) == 0
    for entry in read_manifest(out):
        assert validate_file(Path(out) / entry.file) == []
    assert main(["push", out, *cli_target(emulator, tls)]) == 0
    return Path(out)


def test_per_url_acls_round_trip(emulator: Emulator, tls: TLSFiles) -> None:
    build_validate_push(RECORDS, emulator, tls, "--max-records", "2")

    assert pushed_acls(emulator, "docs") == expected_acls(RECORDS, "docs")
    # The share's ACL is not a document; the documents are.
    assert set(emulator.documents("docs")) == {
        "http://share.example.com/dir/a.txt",
        "http://share.example.com/dir/public.txt",
    }
    assert emulator.documents("docs")["http://share.example.com/dir/a.txt"].metadata == [
        ("author", "alice")
    ]


def test_legacy_acls_round_trip(emulator: Emulator, tls: TLSFiles) -> None:
    records: list[dict[str, Any]] = [
        {
            "url": "http://insidealpha.example.com/personnel.htm",
            "content": "x",
            "acl": {
                "principals": [
                    {"name": "eng", "scope": "group", "access": "permit"},
                    {"name": "joe", "scope": "user", "access": "permit"},
                    {"name": "joe", "scope": "user", "access": "deny"},
                    {"name": "administration", "scope": "group", "access": "deny"},
                    # The guide strips role suffixes from permitted user names only.
                    {"name": "eng=reader", "scope": "group", "access": "permit"},
                    {"name": "joe=owner", "scope": "user", "access": "deny"},
                    {"name": "ops=peeker", "scope": "group", "access": "deny"},
                ],
                "inheritance_type": "and-both-permit",
                "inherit_from": "http://insidealpha.example.com/",
            },
        }
    ]

    out = build_validate_push(records, emulator, tls, "--acl-format", "legacy")

    assert b"<acl" not in b"".join(p.read_bytes() for p in out.glob("*.xml"))
    assert b'name="google:aclusers"' in next(out.glob("*.xml")).read_bytes()
    # Legacy ACLs keep their principals' order within each meta name, not across them.
    [(url, acl)] = pushed_acls(emulator, "docs").items()
    [(_, want)] = expected_acls(records, "docs").items()
    assert url == want.url
    assert sorted(acl.principals, key=repr) == sorted(want.principals, key=repr)
    assert (acl.inheritance_type, acl.inherit_from) == (want.inheritance_type, want.inherit_from)


def principal(**changes: Any) -> dict[str, Any]:
    return {"name": "alice", "scope": "user", "access": "permit", **changes}


def test_overwrite_acls_without_metadata_leaves_the_documents_metadata_and_acl(
    emulator: Emulator, tls: TLSFiles
) -> None:
    """`overwrite-acls` governs the legacy ACL in a record's metadata: a record with none writes
    no empty <metadata>, which in an incremental feed would replace the document's with none."""
    url = "http://d.example.com/a"
    acl = {"principals": [principal()]}
    first = {"url": url, "content": "v1", "metadata": {"author": "ann"}, "acl": acl}
    build_validate_push([first], emulator, tls, out="first")
    second = {"url": url, "content": "v2", "overwrite_acls": False}

    out = build_validate_push([second], emulator, tls, out="second")

    emulator.wait_idle()
    document = emulator.documents("docs")[url]
    assert (document.content, document.metadata) == (b"v2", [("author", "ann")])
    assert pushed_acls(emulator, "docs") == expected_acls([first], "docs")
    assert b"<metadata" not in next(out.glob("*.xml")).read_bytes()


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (
            {"url": "http://d.example.com/a", "acl": {"principals": [principal(scope="usr")]}},
            "acl: principals[0]: scope 'usr' is not user or group",
        ),
        (
            {"url": "http://d.example.com/a", "acl": {"principals": [principal(access="allow")]}},
            "acl: principals[0]: access 'allow' is not permit or deny",
        ),
        (
            {
                "url": "http://d.example.com/a",
                "acl": {"url": "http://d.example.com/a", "principals": [principal()]},
            },
            "acl: an ACL inside a record is the record's own and takes no url",
        ),
        ({"kind": "acl", "acl": {"principals": [principal()]}}, "url: is required"),
        (
            {"url": "http://d.example.com/a", "acl": {"principals": [principal(name=" ")]}},
            "acl: principals[0]: the name is empty or white space",
        ),
        (
            {
                "kind": "acl",
                "url": "http://d.example.com/a",
                "acl": {"principals": [principal()]},
                "pagerank": 3,
            },
            "pagerank: a standalone ACL (kind acl) carries only url and acl",
        ),
        (
            {
                "url": "http://d.example.com/a",
                "content": "a",
                "acl": {"principals": [principal()]},
                "metadata": {"google:aclusers": "joe"},
            },
            "metadata: 'google:aclusers' gives the record a legacy ACL and acl gives it one too",
        ),
    ],
    ids=[
        "scope",
        "access",
        "url-in-record",
        "standalone-without-url",
        "empty-principal",
        "standalone-with-another-field",
        "acl-and-legacy-metadata",
    ],
)
def test_bad_acls_are_refused_with_their_line_and_leave_no_feed(
    bad: dict[str, Any], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = jsonl(Path("in.jsonl"), [{"url": "http://d.example.com/ok", "content": "ok"}, bad])

    status = main(["build", str(source), "--datasource", "docs", "--out", "out"])

    err = capsys.readouterr().err
    assert status == 1
    assert f"in.jsonl:2: {reason}" in err
    assert not (Path("out") / "manifest.jsonl").exists()
    assert all(validate_file(f) == [] for f in Path("out").glob("*.xml"))


@pytest.mark.parametrize("role", ["=owner", "=peeker", "=reader", "=writer"])
def test_a_legacy_acl_name_the_appliance_would_strip_is_refused(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guide: legacy ACL names ending in these lose the suffix, and =peeker the entry."""
    bad = {"url": "http://d.example.com/a", "content": "a", "acl": {"principals": [principal()]}}
    bad["acl"]["principals"][0]["name"] = f"joe{role}"
    source = jsonl(Path("in.jsonl"), [bad])
    legacy = ["build", str(source), "--datasource", "docs", "--acl-format", "legacy"]

    status = main([*legacy, "--out", "out"])

    assert status == 1
    err = capsys.readouterr().err
    assert f"in.jsonl:1: acl: principals[0]: 'joe{role}' ends in '{role}'" in err
    assert "--acl-format per-url" in err
    assert main(["build", str(source), "--datasource", "docs", "--out", "per-url"]) == 0


@pytest.mark.parametrize("meta", sorted(_core.LEGACY_PRINCIPALS))
@pytest.mark.parametrize("role", ["", "=owner", "=peeker", "=reader", "=writer", "=owners"])
def test_a_legacy_acl_name_is_refused_exactly_when_the_appliance_would_change_it(
    tmp_path: Path, meta: str, role: str
) -> None:
    """The writer and the emulated appliance read the legacy format by one definition."""
    scope, access = _core.LEGACY_PRINCIPALS[meta]
    given = Principal(f"joe{role}", scope, access)
    url = "http://d.example.com/a"
    kept = legacy_acl(url, [(meta, given.name)])
    changed = kept is None or kept.principals != (given,)
    record = {
        "url": url,
        "content": "a",
        "acl": {"principals": [principal(name=given.name, scope=scope, access=access)]},
    }
    writer = FeedWriter(tmp_path / "out", "docs", acl_format="legacy")
    if changed:
        with pytest.raises(RecordError, match=f"ends in '{role}', which the appliance strips"):
            writer.add(record)
    else:
        writer.add(record)
        writer.close()


def test_bad_groups_are_refused_with_their_line(capsys: pytest.CaptureFixture[str]) -> None:
    source = jsonl(
        Path("groups.jsonl"),
        [
            {"group": "ok", "members": [{"name": "m", "scope": "user"}]},
            {"group": "eng", "members": [{"name": "a", "scope": "usr"}]},
        ],
    )

    status = main(["groups", "build", str(source), "--groupsource", "ldap", "--out", "out"])

    err = capsys.readouterr().err
    assert status == 1
    assert "groups.jsonl:2: members: members[0]: scope 'usr' is not user or group" in err
    assert not (Path("out") / "manifest.jsonl").exists()
    assert all(validate_file(f) == [] for f in Path("out").glob("*.xml"))
