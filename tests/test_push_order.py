"""The ordering rule: a full file alone and first, manifest order within a datasource,
datasources side by side, and a failure holding back the rest of its datasource only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastfeed import read_manifest
from fastfeed.delivery.results import Outcome
from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator, Fault
from fastfeed.gsa.push import push
from feeds import sha256s

MakeSet = Callable[..., Path]
Settings = Callable[..., PushSettings]


def received(emulator: Emulator, datasource: str | None = None) -> list[str]:
    """sha256 of the files the appliance accepted, in the order it finished receiving them."""
    return [
        p.sha256
        for p in emulator.pushes()
        if not p.outcome.startswith("refused") and datasource in (None, p.datasource)
    ]


def test_a_full_file_goes_alone_and_first_even_when_slow(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", "full", files=4)
    emulator.add_fault(Fault.slow(seconds=1.0))  # the full file: others would overtake it

    summary = push(feeds, push_settings(emulator, concurrency=4))

    assert summary.ok
    assert received(emulator) == sha256s(feeds)
    assert [p.feedtype for p in emulator.pushes()] == ["full"] + ["incremental"] * 3


def test_files_of_one_datasource_keep_manifest_order_by_default(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", "incremental", files=3)
    emulator.add_fault(Fault.slow(seconds=1.0))

    push(feeds, push_settings(emulator, concurrency=3))

    assert received(emulator) == sha256s(feeds)


def test_overlap_incremental_lets_later_files_overtake_a_slow_one(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", "incremental", files=3)
    emulator.add_fault(Fault.slow(seconds=2.0))

    summary = push(feeds, push_settings(emulator, concurrency=2, overlap_incremental=True))

    assert summary.ok
    got = received(emulator)
    # Files 1 and 2 race to the server and the fault holds whichever comes first; file 3 starts
    # in the other's slot and finishes before the held one, which sequential sending never allows.
    assert sorted(got) == sorted(sha256s(feeds))
    assert got[2] != sha256s(feeds)[2]


def test_overlap_incremental_still_sends_a_full_file_alone(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", "full", files=3)
    emulator.add_fault(Fault.slow(seconds=1.0))

    push(feeds, push_settings(emulator, concurrency=3, overlap_incremental=True))

    assert received(emulator)[0] == sha256s(feeds)[0]


def test_datasources_are_pushed_side_by_side(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    slow_set = make_feed_set("docs", "full", files=3)
    fast_set = make_feed_set("news", "full", files=3)
    # Whichever file arrives first is held; the other datasource must not wait for it.
    emulator.add_fault(Fault.slow(seconds=3.0))

    summary = push([slow_set, fast_set], push_settings(emulator, concurrency=2))

    assert summary.ok
    first_three = {p.datasource for p in emulator.pushes()[:3]}
    assert len(first_three) == 1  # one datasource went through while the other's file was held
    for feeds in (slow_set, fast_set):
        datasource = read_manifest(feeds)[0].datasource
        assert received(emulator, datasource) == sha256s(feeds)


def test_a_failure_holds_back_its_datasource_only_and_the_next_run_resumes_in_order(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    docs = make_feed_set("docs", "full", files=3)
    news = make_feed_set("news", "full", files=2)
    emulator.add_fault(Fault.answer("Error - something the appliance disliked"))
    settings = push_settings(emulator, concurrency=1)

    first = push([docs, news], settings)

    assert [r.outcome for r in first.results] == [
        Outcome.FAILED,
        Outcome.BLOCKED,
        Outcome.BLOCKED,
        Outcome.ACCEPTED,
        Outcome.ACCEPTED,
    ]
    second = push([docs, news], settings)
    assert [r.outcome for r in second.results] == [Outcome.ACCEPTED] * 3 + [Outcome.SKIPPED] * 2
    assert received(emulator, "docs") == sha256s(docs)
    assert received(emulator, "news") == sha256s(news)
