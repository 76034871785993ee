"""Groups feeds end to end: built by the Rust core, pushed to /xmlgroups over real HTTPS, and
stored by the emulated appliance exactly as the input said; full groups feeds need consent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import TLSFiles, cli_target
from fastfeed import read_manifest
from fastfeed.cli import main
from fastfeed.delivery.results import Outcome
from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator, Membership, Principal
from fastfeed.errors import PushError
from fastfeed.gsa.groups import GroupsWriter
from fastfeed.gsa.push import push
from fastfeed.gsa.validate import validate_file
from feeds import sha256s

Settings = Callable[..., PushSettings]

GROUPS: list[dict[str, Any]] = [
    {
        "group": "CORP\\eng",
        "namespace": "Corp",
        "case_sensitive": False,
        "members": [
            {"name": "CORP\\alice", "scope": "user"},
            {"name": "interns", "scope": "group", "namespace": "Default"},
            {"name": "Bob", "scope": "user", "case_sensitive": False},
            {"name": "site owners", "scope": "group", "principal_type": "unqualified"},
        ],
    },
    {"group": "solo", "members": [{"name": "m", "scope": "user"}]},
    {"group": "a&b <c>", "members": [{"name": "d\"e'f", "scope": "user"}]},
]


def group(name: str) -> dict[str, object]:
    """A group with one member: the groups DTD has no empty group."""
    return {"group": name, "members": [{"name": "m", "scope": "user"}]}


pytestmark = pytest.mark.usefixtures("clean_env")


def expected(groups: list[dict[str, Any]], groupsource: str) -> dict[tuple[str, str], Any]:
    """What the appliance must hold for `groups`: the input, with the groups DTD's defaults."""

    def principal(item: dict[str, Any], name: str, scope: str) -> Principal:
        return Principal(
            name,
            scope,
            namespace=item.get("namespace", "Default"),
            case_sensitive=item.get("case_sensitive", True),
            principal_type=item.get("principal_type"),
        )

    out = {}
    for g in groups:
        members = tuple(principal(m, m["name"], m["scope"]) for m in g["members"])
        out[(g.get("namespace", "Default"), g["group"])] = (
            principal(g, g["group"], "group"),
            members,
            groupsource,
        )
    return out


def stored(memberships: dict[tuple[str, str], Membership]) -> dict[tuple[str, str], Any]:
    return {key: (m.group, m.members, m.groupsource) for key, m in memberships.items()}


def write_groups(
    out: Path, groupsource: str, groups: list[dict[str, Any]], feedtype: str = "incremental"
) -> Path:
    with GroupsWriter(out, groupsource, feedtype, max_records=2) as writer:  # type: ignore[arg-type]
        writer.add_batch(groups)  # type: ignore[arg-type]
    return out


def test_memberships_round_trip_through_the_appliance(
    tmp_path: Path, emulator: Emulator, push_settings: Settings
) -> None:
    groups_dir = write_groups(tmp_path / "groups", "ldap", GROUPS)
    manifest = read_manifest(groups_dir)
    assert [(e.kind, e.datasource, e.records) for e in manifest] == [
        ("groups", "ldap", 2),
        ("groups", "ldap", 1),
    ]
    for entry in manifest:
        assert validate_file(groups_dir / entry.file, kind="groups") == []

    summary = push(groups_dir, push_settings(emulator))
    emulator.wait_idle()

    assert summary.ok and summary.count(Outcome.ACCEPTED) == 2
    pushes = emulator.pushes()
    assert [(p.kind, p.datasource, p.feedtype, p.sha256) for p in pushes] == [
        ("groups", "ldap", "incremental", sha256) for sha256 in sha256s(groups_dir)
    ]
    assert all(p.outcome == "applied" for p in pushes)
    assert stored(emulator.groups("ldap")) == expected(GROUPS, "ldap")


def test_cli_builds_and_pushes_groups(
    tmp_path: Path, emulator: Emulator, tls: TLSFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "groups.jsonl"
    source.write_bytes(b"".join(orjson.dumps(g) + b"\n" for g in GROUPS))

    built = main(["groups", "build", str(source), "--groupsource", "ad", "--out", "out"])
    pushed = main(["groups", "push", "out", *cli_target(emulator, tls), "--json"])
    emulator.wait_idle()

    out, err = capsys.readouterr()
    assert (built, pushed) == (0, 0)
    assert "wrote 3 groups into 1 file" in err
    assert orjson.loads(out)["results"][0]["kind"] == "groups"
    assert stored(emulator.groups("ad")) == expected(GROUPS, "ad")
    # The journal: pushing again sends nothing.
    assert main(["groups", "push", "out", *cli_target(emulator, tls)]) == 0
    assert len(emulator.pushes()) == 1


def test_a_full_groups_feed_is_refused_without_allow_full(
    tmp_path: Path,
    emulator: Emulator,
    tls: TLSFiles,
    push_settings: Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_groups(
        tmp_path / "other",
        "sharepoint",
        [group("owners")],
    )
    assert push(tmp_path / "other", push_settings(emulator)).ok
    full = write_groups(tmp_path / "all", "ldap", GROUPS, "full")
    assert [e.feedtype for e in read_manifest(full)] == ["full", "incremental"]

    refused = main(["groups", "push", str(full), *cli_target(emulator, tls)])
    plain = main(["push", str(full), *cli_target(emulator, tls)])
    with pytest.raises(PushError, match="full groups feed") as caught:
        push(full, push_settings(emulator))
    _, err = capsys.readouterr()

    assert (refused, plain, caught.value.refused) == (3, 3, True)
    assert "replaces the groups of EVERY groupsource" in err and "--allow-full" in err
    assert len(emulator.pushes()) == 1  # only the sharepoint set: nothing of the full one

    allowed = main(["groups", "push", str(full), *cli_target(emulator, tls), "--allow-full"])
    emulator.wait_idle()
    _, err = capsys.readouterr()

    assert allowed == 0
    assert "WARNING" in err and "replaces the groups of EVERY groupsource" in err
    assert emulator.groups("sharepoint") == {}  # replaced, as the appliance does
    assert stored(emulator.groups()) == expected(GROUPS, "ldap")


def test_groups_push_takes_only_groups_sets(
    emulator: Emulator,
    tls: TLSFiles,
    make_feed_set: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    feeds = make_feed_set("docs", files=1)

    status = main(["groups", "push", str(feeds), *cli_target(emulator, tls)])

    assert status == 3
    assert "not a groups set; push feed sets with `fastfeed push`" in capsys.readouterr().err
    assert emulator.pushes() == []


def test_a_full_groups_feed_goes_alone_after_every_earlier_groups_file(
    tmp_path: Path, emulator: Emulator, push_settings: Settings
) -> None:
    # Three groupsources with concurrency 4: without the rule they would all go at once.
    ldap = write_groups(tmp_path / "ldap", "ldap", GROUPS)  # two files
    full = write_groups(
        tmp_path / "full",
        "ad",
        [group("g")],
        "full",
    )
    after = write_groups(tmp_path / "after", "nis", [group("h")])

    summary = push([ldap, full, after], push_settings(emulator), allow_full_groups=True)
    emulator.wait_idle()

    assert summary.ok
    assert [(p.datasource, p.feedtype) for p in emulator.pushes()] == [
        ("ldap", "incremental"),
        ("ldap", "incremental"),
        ("ad", "full"),
        ("nis", "incremental"),
    ]
    assert set(emulator.groups()) == {("Default", "g"), ("Default", "h")}
