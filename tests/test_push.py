"""The uploader against a real emulated appliance over HTTPS: answers, retries, TLS, backlog."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from fastfeed import read_manifest
from fastfeed.delivery.results import Outcome, PushSummary
from fastfeed.delivery.settings import PushSettings, Secret, http_client
from fastfeed.emulator import Emulator, Fault
from fastfeed.errors import BacklogError, PushError, SettingsError
from fastfeed.gsa.backlog import fetch_backlog
from fastfeed.gsa.push import push
from fastfeed.sets.manifest import HASHES
from feeds import sha256s

MakeSet = Callable[..., Path]
Settings = Callable[..., PushSettings]


def outcomes(summary: Any) -> list[tuple[str, Outcome]]:
    return [(r.feed.entry.file, r.outcome) for r in summary.results]


def test_every_file_reaches_the_index_byte_for_byte(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", "full", files=3, binary=True)
    manifest = read_manifest(feeds)

    summary = push(feeds, push_settings(emulator))

    assert summary.ok and summary.count(Outcome.ACCEPTED) == 3
    assert summary.records_sent == 15
    pushes = emulator.pushes()
    # The data field arrived exactly as built, with the manifest's datasource and feed type.
    assert [(p.datasource, p.feedtype, p.sha256, p.bytes) for p in pushes] == [
        (e.datasource, e.feedtype, sha256, e.bytes)
        for e, sha256 in zip(manifest, sha256s(feeds), strict=True)
    ]
    emulator.wait_idle()
    documents = emulator.documents("docs")
    assert len(documents) == 15
    assert documents["http://example.com/docs/3"].content == bytes([3]) * 300 + b"\x00\xff"


def test_retries_5xx_internal_error_and_dropped_connections(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", files=1)
    emulator.add_fault(Fault.http_status(503, times=2))
    emulator.add_fault(Fault.answer("Internal Error"))
    emulator.add_fault(Fault.drop_connection(after_bytes=100))

    summary = push(feeds, push_settings(emulator))

    assert outcomes(summary) == [("docs-000001.xml", Outcome.ACCEPTED)]
    assert summary.results[0].attempts == 5
    assert summary.retries == 4
    emulator.wait_idle()
    assert len(emulator.documents("docs")) == 5


def test_retries_are_bounded_and_later_files_of_the_datasource_wait(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", files=3)
    emulator.add_fault(Fault.http_status(503, times=10))

    summary = push(feeds, push_settings(emulator, retries=2))

    assert outcomes(summary) == [
        ("docs-000001.xml", Outcome.FAILED),
        ("docs-000002.xml", Outcome.BLOCKED),
        ("docs-000003.xml", Outcome.BLOCKED),
    ]
    first = summary.results[0]
    assert first.attempts == 3 and "HTTP 503" in first.message
    assert not summary.ok
    assert len(emulator.pushes()) == 3  # three attempts of the first file, nothing else


@pytest.mark.parametrize(
    ("answer", "outcome", "message"),
    [
        # Not retried: sending it again would get the same answer.
        ("Error - feed too strange", Outcome.FAILED, "Error - feed too strange"),
        # In any case, as Google's own feed clients take it.
        ("success\n", Outcome.ACCEPTED, "Success"),
    ],
    ids=["unknown", "lower-case-success"],
)
def test_an_answer_decides_the_file_at_once(
    emulator: Emulator,
    make_feed_set: MakeSet,
    push_settings: Settings,
    answer: str,
    outcome: Outcome,
    message: str,
) -> None:
    feeds = make_feed_set("docs", files=1)
    emulator.add_fault(Fault.answer(answer))

    summary = push(feeds, push_settings(emulator))

    [result] = summary.results
    assert (result.outcome, result.attempts, result.message) == (outcome, 1, message)


def test_insufficient_disk_space_waits_and_sends_again(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", files=1)
    emulator.add_fault(Fault.disk_full(times=2))

    summary = push(feeds, push_settings(emulator))

    assert outcomes(summary) == [("docs-000001.xml", Outcome.ACCEPTED)]
    assert summary.results[0].attempts == 3


def test_insufficient_disk_space_gives_up_when_it_lasts(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", files=1)
    emulator.add_fault(Fault.disk_full(times=5))

    summary = push(feeds, push_settings(emulator, disk_full_retries=1))

    result = summary.results[0]
    assert result.outcome is Outcome.FAILED
    assert "insufficient disk space" in result.message
    assert result.attempts == 2


def test_an_untrusted_ip_stops_the_whole_push(
    make_emulator: Callable[..., Emulator], make_feed_set: MakeSet, push_settings: Settings
) -> None:
    emulator = make_emulator(trusted_ips=["10.9.9.9"])
    sets = [make_feed_set("docs", files=3), make_feed_set("news", files=3)]

    with pytest.raises(PushError) as caught:
        push(sets, push_settings(emulator, concurrency=1))

    assert caught.value.refused
    assert "List of Trusted IP Addresses" in str(caught.value)
    assert "Error - Unauthorized Request" in str(caught.value)
    assert len(emulator.pushes()) == 1  # nothing more was sent after the refusal
    assert caught.value.summary is not None and caught.value.summary.results == []


def test_the_backlog_of_an_appliance_that_does_not_trust_us_says_what_to_do(
    make_emulator: Callable[..., Emulator], push_settings: Settings
) -> None:
    emulator = make_emulator(trusted_ips=["10.9.9.9"])
    settings = push_settings(emulator)

    async def backlog() -> int | None:
        async with http_client(settings) as client:
            return await fetch_backlog(client, settings)

    with pytest.raises(BacklogError) as caught:
        asyncio.run(backlog())

    assert "'Error - Unauthorized Request'" in str(caught.value)
    assert "List of Trusted IP Addresses" in str(caught.value)


@pytest.mark.parametrize("digest", ["xxh3", "blake3", "sha256"])
def test_a_file_changed_since_the_build_is_not_sent(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings, digest: str
) -> None:
    """Whichever digest the manifest carries: blake3 and sha256 in sets built by earlier
    versions."""
    feeds = make_feed_set("docs", "full", files=3)
    built = sha256s(feeds)
    if digest != "xxh3":
        lines = [orjson.loads(line) for line in (feeds / "manifest.jsonl").read_bytes().split()]
        for line in lines:
            hashed = HASHES[digest]()
            hashed.update((feeds / line["file"]).read_bytes())
            del line["digest"]
            if digest == "sha256":  # as versions before BLAKE3 wrote it
                line["sha256"] = hashed.hexdigest()
            else:
                line["digest"] = f"{digest}:{hashed.hexdigest()}"
        (feeds / "manifest.jsonl").write_bytes(b"\n".join(map(orjson.dumps, lines)) + b"\n")
    second = feeds / "docs-000002.xml"
    second.write_bytes(second.read_bytes().replace(b"doc 7", b"doc X"))

    summary = push(feeds, push_settings(emulator))

    assert outcomes(summary) == [
        ("docs-000001.xml", Outcome.ACCEPTED),
        ("docs-000002.xml", Outcome.FAILED),
        ("docs-000003.xml", Outcome.BLOCKED),
    ]
    assert summary.results[1].message.endswith(
        f"{digest} digest differs from the manifest's: it changed since it was built"
    )
    assert [p.sha256 for p in emulator.pushes()] == built[:1]


def test_a_file_changed_while_it_is_streamed_is_abandoned_before_its_last_chunk(
    tmp_path: Path,
) -> None:
    import asyncio
    import random

    from fastfeed import FeedWriter
    from fastfeed.delivery.body import FileChanged, file_chunks
    from fastfeed.delivery.results import FeedFile

    text = "".join(random.Random(1).choices("abcdefgh ", k=300_000))
    with FeedWriter(tmp_path / "s", "docs", compress="never") as writer:
        writer.add_batch([{"url": "http://e.example.com/a", "content": text}])
    feed = FeedFile(tmp_path / "s", writer.manifest[0])

    async def stream() -> int:
        sent = 0
        async for chunk in file_chunks(feed, 1 << 16):
            if not sent:  # 20 bytes overwritten behind the reader, as an editor would
                with open(feed.path, "r+b") as f:
                    f.seek(feed.entry.bytes - 5000)
                    f.write(b"X" * 20)
            sent += len(chunk)
        return sent

    with pytest.raises(FileChanged, match="changed while being sent"):
        asyncio.run(stream())


def test_a_push_whose_file_changes_mid_stream_fails_that_file_and_journals_nothing(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    import base64
    import os

    from fastfeed import FeedWriter
    from fastfeed.sets.journal import Journal

    text = base64.b64encode(os.urandom(30_000_000)).decode()
    with FeedWriter(tmp_path / "s", "docs", compress="never") as writer:
        writer.add_batch([{"url": "http://e.example.com/a", "content": text}])
    [entry] = writer.manifest
    # The appliance reads nothing for a second: the upload stalls once the socket buffers are
    # full, far before the changed bytes near the end of the file.
    emulator.add_fault(Fault.slow(1.0))

    def edit() -> None:
        time.sleep(0.5)
        with open(tmp_path / "s" / entry.file, "r+b") as f:
            f.seek(entry.bytes - 5000)
            f.write(b"X" * 20)

    editor = threading.Thread(target=edit)
    editor.start()
    summary = push(tmp_path / "s", push_settings(emulator, chunk_size=1 << 16))
    editor.join()

    [result] = summary.results
    assert result.outcome is Outcome.FAILED and "changed while being sent" in result.message
    assert [p.sha256 for p in emulator.pushes() if p.outcome == "applied"] == []
    with Journal(tmp_path / "s", push_settings(emulator).target) as journal:
        assert not journal.is_accepted(entry)


def test_an_unverifiable_certificate_is_refused_unless_insecure(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", files=1)

    with pytest.raises(PushError) as caught:
        push(feeds, push_settings(emulator, cacert=None))
    assert caught.value.refused and "--cacert" in str(caught.value)
    assert emulator.pushes() == []

    summary = push(feeds, push_settings(emulator, cacert=None, insecure=True))
    assert summary.ok


def test_plain_http_on_its_own_port(
    make_emulator: Callable[..., Emulator], make_feed_set: MakeSet, push_settings: Settings
) -> None:
    emulator = make_emulator(tls=None)
    feeds = make_feed_set("docs", files=2)

    summary = push(feeds, push_settings(emulator, https=False, cacert=None))

    assert summary.ok and summary.target.startswith("http://")
    assert len(emulator.pushes()) == 2


def test_client_certificate_with_an_encrypted_key(
    tmp_path: Path,
    tls: Any,
    emulator: Emulator,
    make_feed_set: MakeSet,
    push_settings: Settings,
) -> None:
    client = tls.ca.issue_cert("fastfeed-client@example.com")
    cert = tmp_path / "client.pem"
    key = tmp_path / "client.key"
    client.cert_chain_pems[0].write_to_path(str(cert))
    private = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret-pass"),
        )
    )
    feeds = make_feed_set("docs", files=1)
    settings = push_settings(
        emulator,
        client_cert=str(cert),
        client_key=str(key),
        client_key_password=Secret("s3cret-pass"),
    )

    assert "s3cret-pass" not in repr(settings) and "s3cret-pass" not in str(settings)
    summary = push(feeds, settings)
    assert summary.ok and "s3cret-pass" not in str(summary.to_dict())

    wrong = push_settings(
        emulator, client_cert=str(cert), client_key=str(key), client_key_password=Secret("nope")
    )
    with pytest.raises(SettingsError) as caught:
        push(feeds, wrong)
    assert "nope" not in str(caught.value)


def test_trustme_ca_unrelated_to_the_server_is_refused(
    tmp_path: Path, emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))

    with pytest.raises(PushError) as caught:
        push(make_feed_set("docs", files=1), push_settings(emulator, cacert=str(other)))

    assert caught.value.refused and "certificate verify failed" in str(caught.value)


@contextlib.contextmanager
def pushing_held(
    emulator: Emulator, sets: list[Path], settings: PushSettings
) -> Iterator[list[PushSummary]]:
    """Pushes `sets` on a thread of its own while the block looks on; the list yielded holds the
    summary once the push is done. Leaving the block resumes the emulator's (paused) feeder
    and waits for the push."""
    done: list[PushSummary] = []
    pusher = threading.Thread(target=lambda: done.append(push(sets, settings)))
    pusher.start()
    try:
        yield done
    finally:
        emulator.resume_feeder()
        pusher.join(30)


def test_sending_pauses_above_the_backlog_high_mark_and_resumes_at_the_low_mark(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    sets = [make_feed_set(f"ds{i}", files=1) for i in range(6)]
    emulator.pause_feeder()
    settings = push_settings(emulator, backlog_high=2, backlog_low=0, concurrency=1)
    with pushing_held(emulator, sets, settings) as done:
        _wait_until(lambda: emulator.backlog >= 3)
        # Many polls later, still only the files that brought the backlog above the mark.
        time.sleep(0.5)
        assert len(emulator.pushes()) == 3 and not done
    assert done and done[0].ok and len(emulator.pushes()) == 6


def test_a_push_does_not_start_into_a_backlog_already_above_the_mark(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    # Another client's files wait in the backlog before this push starts.
    emulator.pause_feeder()
    earlier = push(make_feed_set("other", files=4), push_settings(emulator))
    assert earlier.ok and emulator.backlog == 4
    sets = [make_feed_set(f"ds{i}", files=1) for i in range(4)]
    settings = push_settings(emulator, backlog_high=2, backlog_low=0, concurrency=4)
    with pushing_held(emulator, sets, settings) as done:
        time.sleep(0.5)  # many polls: with a gate open before the first one, 4 files went out
        assert len(emulator.pushes()) == 4 and not done
    assert done and done[0].ok and len(emulator.pushes()) == 8


def test_an_appliance_without_backlog_count_is_pushed_to_all_the_same(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    emulator.backlog_unsupported = True

    summary = push(
        make_feed_set("docs", files=3), push_settings(emulator, backlog_high=0, backlog_low=0)
    )

    assert summary.ok and summary.backlog is None


def test_files_given_one_by_one_use_their_manifest_entry(
    emulator: Emulator, make_feed_set: MakeSet, push_settings: Settings
) -> None:
    feeds = make_feed_set("docs", "full", files=3)

    summary = push([feeds / "docs-000003.xml", feeds / "docs-000001.xml"], push_settings(emulator))

    assert outcomes(summary) == [
        ("docs-000001.xml", Outcome.ACCEPTED),
        ("docs-000003.xml", Outcome.ACCEPTED),
    ]
    assert [p.feedtype for p in emulator.pushes()] == ["full", "incremental"]


def test_a_directory_without_manifest_is_refused(
    tmp_path: Path, emulator: Emulator, push_settings: Settings
) -> None:
    (tmp_path / "half-built").mkdir()

    with pytest.raises(PushError) as caught:
        push(tmp_path / "half-built", push_settings(emulator))

    assert caught.value.refused and "manifest.jsonl" in str(caught.value)


def test_settings_are_checked_before_anything_is_sent() -> None:
    with pytest.raises(SettingsError, match="backlog marks"):
        PushSettings(host="gsa", backlog_high=1, backlog_low=5)
    with pytest.raises(SettingsError, match="--host"):
        PushSettings(host="")
    assert PushSettings(host="gsa").base_url == "https://gsa:19902"
    assert PushSettings(host="gsa", https=False).base_url == "http://gsa:19900"


def _wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)
