"""`fastfeed push FILE.xml` of a lone feed file, one no `fastfeed build` made (no manifest
beside it): pushed by its header, validated whole first, never journalled."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_target
from fastfeed import _core
from fastfeed.cli import main
from fastfeed.delivery.results import Outcome
from fastfeed.emulator import Emulator
from fastfeed.errors import PushError
from fastfeed.gsa import files
from fastfeed.gsa.files import HEAD_BYTES, HEADER, NOT_JOURNALLED, lone_head
from fastfeed.gsa.push import Pusher
from fastfeed.sets.journal import JOURNAL

pytestmark = pytest.mark.usefixtures("clean_env")

DOCTYPE = '<!DOCTYPE gsafeed PUBLIC "-//Google//DTD GSA Feeds//EN" "">'


def feed(header: str, group: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{DOCTYPE}\n<gsafeed>\n{header}\n{group}\n'
        "</gsafeed>\n"
    )


def one_record(datasource: str, feedtype: str) -> str:
    """A feed of one record."""
    return feed(
        header(datasource, feedtype), f"<group>{record('http://example.com/a', 'a')}</group>"
    )


def header(datasource: str, feedtype: str) -> str:
    return (
        f"<header>\n<datasource>{datasource}</datasource>\n<feedtype>{feedtype}</feedtype>\n"
        "</header>"
    )


def record(url: str, text: str) -> str:
    return f'<record url="{url}" mimetype="text/plain"><content>{text}</content></record>'


GROUPS = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<xmlgroups>\n<membership>\n'
    '<principal scope="GROUP" namespace="Default">eng</principal>\n'
    '<members><principal scope="USER" namespace="Default">alice</principal></members>\n'
    "</membership>\n</xmlgroups>\n"
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(
    capsys: pytest.CaptureFixture[str], emulator: Emulator, tls: Any, *args: str
) -> tuple[int, str, str]:
    status = main(["push", *args, *cli_target(emulator, tls)])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_hand_written_full_feed_then_an_incremental_one_are_indexed_by_their_headers(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = tmp_path / "loose"
    full = write(
        loose / "sample_feed.xml",
        feed(
            header("handmade", "full"),
            "<group>\n"
            + record("http://example.com/a", "alpha")
            + "\n"
            + record("http://example.com/b", "beta")
            + "\n</group>",
        ),
    )
    incremental = write(
        loose / "update.xml",
        feed(
            header("handmade", "incremental"),
            f"<group>{record('http://example.com/c', 'gamma')}</group>\n"
            '<group action="delete"><record url="http://example.com/a" mimetype="text/plain"/>'
            "</group>",
        ),
    )

    status, out, err = run(capsys, emulator, tls, str(full), str(incremental), "--json")

    assert status == 0, err
    summary = json.loads(out)
    results = summary["results"]
    assert [(r["datasource"], r["feedtype"], r["records"], r["outcome"]) for r in results] == [
        ("handmade", "full", 2, "accepted"),
        ("handmade", "incremental", 2, "accepted"),
    ]
    pushes = emulator.pushes()
    assert [(p.datasource, p.feedtype, p.bytes) for p in pushes] == [
        ("handmade", "full", full.stat().st_size),
        ("handmade", "incremental", incremental.stat().st_size),
    ]
    emulator.wait_idle()
    documents = emulator.documents("handmade")
    assert sorted(documents) == ["http://example.com/b", "http://example.com/c"]
    assert documents["http://example.com/c"].content == b"gamma"
    # Its directory is not ours: no journal there, and the user is told that a second push
    # sends it again.
    assert sorted(p.name for p in loose.iterdir()) == ["sample_feed.xml", "update.xml"]
    assert f"{full}: {NOT_JOURNALLED}" in err

    status, out, err = run(capsys, emulator, tls, str(full), "--json")

    assert status == 0 and json.loads(out)["files"]["accepted"] == 1
    assert len(emulator.pushes()) == 3


def test_a_lone_groups_feed_goes_to_xmlgroups_with_the_groupsource_given(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = write(tmp_path / "groups.xml", GROUPS)

    status, _, err = run(capsys, emulator, tls, str(groups))

    assert status == 3
    assert "groups feed (<xmlgroups>), which does not name its groupsource" in err
    assert f"fastfeed push {groups} --groupsource NAME" in err
    assert emulator.pushes() == []

    status, out, err = run(capsys, emulator, tls, str(groups), "--groupsource", "ldap", "--json")

    assert status == 0, err
    [result] = json.loads(out)["results"]
    assert (result["kind"], result["datasource"], result["feedtype"], result["records"]) == (
        "groups",
        "ldap",
        "incremental",
        1,
    )
    emulator.wait_idle()
    assert list(emulator.groups("ldap")) == [("Default", "eng")]


def test_an_invalid_file_is_refused_naming_its_line_and_nothing_is_sent(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "a.xml", one_record("docs", "incremental"))
    # The DTD requires a record's mimetype: the appliance would drop this feed.
    bad = write(
        tmp_path / "b.xml",
        feed(
            header("docs", "incremental"),
            '<group>\n<record url="http://example.com/bad"><content>x</content></record>\n</group>',
        ),
    )

    status, out, err = run(capsys, emulator, tls, str(good), str(bad), "--json")

    assert status == 3
    error = json.loads(out)["error"]
    assert error.startswith(f"{bad}:9: ")
    assert "mimetype" in error and "nothing was sent" in error
    assert emulator.pushes() == []


def test_an_empty_full_feed_needs_allow_empty_full(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = write(tmp_path / "empty.xml", feed(header("docs", "full"), "<group>\n</group>"))

    status, _, err = run(capsys, emulator, tls, str(empty))

    assert status == 3
    assert "is a full feed with no records: it would remove every document" in err
    assert "--allow-empty-full" in err
    assert emulator.pushes() == []

    status, _, err = run(capsys, emulator, tls, str(empty), "--allow-empty-full")

    assert status == 0, err
    assert [(p.datasource, p.feedtype, p.outcome) for p in emulator.pushes()][0][:2] == (
        "docs",
        "full",
    )


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        (feed("", f"<group>{record('http://example.com/a', 'a')}</group>"), "no <header>"),
        (
            feed(
                "<header><datasource>docs</datasource></header>",
                f"<group>{record('http://example.com/a', 'a')}</group>",
            ),
            "no <feedtype> in its <header>",
        ),
    ],
)
def test_a_file_without_a_header_is_refused_naming_what_is_missing(
    emulator: Emulator,
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    missing: str,
) -> None:
    path = write(tmp_path / "headless.xml", text)

    status, _, err = run(capsys, emulator, tls, str(path))

    assert status == 3
    assert f"{path} has {missing}" in err and HEADER in err
    assert emulator.pushes() == []


def test_the_header_is_looked_for_in_the_head_of_the_file_only(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A comment longer than the head before the header: reading on would mean reading a file of
    # any size (a 10 GB one) to find what a feed puts first.
    text = one_record("docs", "incremental").replace(
        "<header>", f"<!-- {'x' * HEAD_BYTES} --><header>"
    )
    path = write(tmp_path / "late.xml", text)

    status, _, err = run(capsys, emulator, tls, str(path))

    assert status == 3
    assert f"{path} has no <header> in its first 1 MiB" in err
    assert emulator.pushes() == []


def test_a_gzipped_feed_is_refused_with_the_way_to_push_it(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = one_record("docs", "incremental")
    path = tmp_path / "feed.xml.gz"
    path.write_bytes(gzip.compress(text.encode()))

    status, _, err = run(capsys, emulator, tls, str(path))

    assert status == 3
    assert f"gunzip -k {path}" in err
    assert emulator.pushes() == []


def test_a_file_missing_from_its_sets_manifest_is_refused_saying_how_to_push_it(
    emulator: Emulator,
    tls: Any,
    make_feed_set: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    feeds = make_feed_set("docs", files=1)
    stray = write(feeds / "stray.xml", one_record("docs", "incremental"))

    status, _, err = run(capsys, emulator, tls, str(stray))

    assert status == 3
    assert f"stray.xml not in {feeds}/manifest.jsonl: of a feed set, only the files it lists" in err
    # Once out of the set's directory, it is pushed as what it is: a lone file.
    assert f"move it out of {feeds} (a directory without a manifest) and push it as a lone" in err
    assert emulator.pushes() == [] and not (feeds / JOURNAL).exists()
    moved = stray.rename(feeds.parent / "stray.xml")

    status, _, err = run(capsys, emulator, tls, str(moved))

    assert status == 0, err
    assert [p.datasource for p in emulator.pushes()] == ["docs"]


def test_a_lone_file_changed_after_its_validation_is_not_sent(
    emulator: Emulator, tmp_path: Path, push_settings: Callable[..., Any]
) -> None:
    path = write(tmp_path / "feed.xml", one_record("docs", "full"))
    lone = lone_head(path).validated()
    # Same size, other bytes: what was validated is no longer what would be sent.
    path.write_text(path.read_text().replace(">a<", ">b<"))

    async def push() -> Any:
        async with Pusher(push_settings(emulator)) as pusher:
            pusher.submit(lone, None)
            pusher.close_input()
            return await pusher.run()

    [result] = asyncio.run(push()).results
    assert result.outcome is Outcome.FAILED
    assert "differs from that of the bytes validated: it changed since it was validated" in (
        result.message
    )
    assert "manifest" not in result.message and "built" not in result.message
    assert emulator.pushes() == []


@pytest.mark.parametrize("name", ["bad name", "a/b", ""])
def test_a_groupsource_the_appliance_would_refuse_is_refused_before_anything_is_sent(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    groups = write(tmp_path / "groups.xml", GROUPS)

    status, _, err = run(capsys, emulator, tls, str(groups), "--groupsource", name)

    assert status == 3
    assert f"groupsource '{name}': {_core.datasource_problem(name)}" in err
    assert emulator.pushes() == []


@pytest.mark.parametrize("given", ["a lone feed", "a feed set"])
def test_a_groupsource_given_with_no_lone_groups_feed_is_refused(
    emulator: Emulator,
    tls: Any,
    tmp_path: Path,
    make_feed_set: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    given: str,
) -> None:
    """Not ignored: the user meant it for something, and it names nothing here."""
    path = (
        write(tmp_path / "loose" / "a.xml", one_record("docs", "incremental"))
        if given == "a lone feed"
        else make_feed_set("docs", files=1)
    )

    status, _, err = run(capsys, emulator, tls, str(path), "--groupsource", "ldap")

    assert status == 3
    assert "groupsource 'ldap' is given, but no lone groups feed (<xmlgroups>) is" in err
    assert "leave it out" in err
    assert emulator.pushes() == []


def test_groups_push_and_replay_push_a_lone_groups_feed_with_its_groupsource(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = write(tmp_path / "groups.xml", GROUPS)

    for command in (["groups", "push"], ["replay"]):
        status = main([*command, str(groups), "--groupsource", "ldap", *cli_target(emulator, tls)])

        err = capsys.readouterr().err
        assert status == 0, err
        assert f"{groups}: {NOT_JOURNALLED}" in err
    assert [(p.datasource, p.feedtype) for p in emulator.pushes()] == [
        ("ldap", "incremental"),
        ("ldap", "incremental"),
    ]
    emulator.wait_idle()
    assert list(emulator.groups("ldap")) == [("Default", "eng")]


def test_groups_push_refuses_a_lone_feed_before_validating_it_naming_the_command(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Invalid past its header (a record without a mimetype): the refusal is not about that.
    path = write(
        tmp_path / "feed.xml",
        feed(
            header("docs", "incremental"),
            '<group><record url="http://example.com/a"><content>x</content></record></group>',
        ),
    )

    status = main(["groups", "push", str(path), *cli_target(emulator, tls)])

    err = capsys.readouterr().err
    assert status == 3
    assert f"{path} is a feed (<gsafeed>), not a groups feed: push it with `fastfeed push " in err
    assert "mimetype" not in err
    assert emulator.pushes() == []


def test_a_lone_file_of_the_appliances_limit_is_refused_unread(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guide: "An XML feed must be less than 1 GB in size." Sparse: no disk is used, and
    reading it would take seconds."""
    path = tmp_path / "huge.xml"
    with path.open("wb") as f:
        f.truncate(_core.FEED_MAX_BYTES)

    status, _, err = run(capsys, emulator, tls, str(path))

    assert status == 3
    assert f"{path} holds {_core.FEED_MAX_BYTES} bytes: the appliance takes a feed file of " in err
    assert "less than 1000000000 bytes (1 GB)" in err
    assert emulator.pushes() == []


def test_a_lone_file_that_grew_past_the_limit_after_its_head_was_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is checked on the bytes as they are validated, which are those sent: a file
    that grew (or still grows) is refused once they reach it, not read to its end."""
    path = write(tmp_path / "feed.xml", one_record("docs", "incremental"))
    limit = path.stat().st_size + 100
    monkeypatch.setattr(files, "FEED_MAX_BYTES", limit)
    head = lone_head(path)
    with path.open("a") as f:
        f.write(" " * 100)  # still a valid feed: blanks after its root element
    with pytest.raises(PushError, match=f"holds {limit} bytes: the appliance takes a feed"):
        head.validated()


def test_a_lone_file_replaced_after_its_head_is_read_is_sent_by_the_header_validated(
    emulator: Emulator,
    tls: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The header is taken from the pass that validates and hashes the bytes sent: sending
    another datasource's records under the first header's name would index them there."""
    path = write(tmp_path / "feed.xml", one_record("docs", "incremental"))
    read_head = files._head

    def replaced_after(path: Path) -> tuple[str, dict[str, str] | None]:
        head = read_head(path)
        write(path, one_record("other", "full"))
        return head

    monkeypatch.setattr(files, "_head", replaced_after)

    status, out, err = run(capsys, emulator, tls, str(path), "--json")

    assert status == 0, err
    [result] = json.loads(out)["results"]
    assert (result["datasource"], result["feedtype"]) == ("other", "full")
    [pushed] = emulator.pushes()
    size = path.stat().st_size
    assert (pushed.datasource, pushed.feedtype, pushed.bytes) == ("other", "full", size)
