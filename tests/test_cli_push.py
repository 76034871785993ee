"""The push commands as a user runs them: exit statuses, messages, --json, run, replay, demo."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest
from conftest import cli_target
from fastfeed import read_manifest
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.journal import JOURNAL
from feeds import sha256s

MakeSet = Callable[..., Path]


pytestmark = pytest.mark.usefixtures("clean_env")


def test_push_prints_a_json_summary_and_exits_0(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = make_feed_set("docs", "full", files=2)

    status = main(["push", str(feeds), *cli_target(emulator, tls), "--json"])

    out, err = capsys.readouterr()
    assert status == 0
    summary = json.loads(out)
    assert summary["ok"] and summary["files"]["accepted"] == 2 and summary["records"] == 10
    assert [r["outcome"] for r in summary["results"]] == ["accepted", "accepted"]
    assert "2 accepted" in err


def test_a_bad_journal_line_is_said_as_the_command_s_warning(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = make_feed_set("docs")
    with open(feeds / JOURNAL, "ab") as f:
        f.write(b"[1,2]\n")

    assert main(["push", str(feeds), *cli_target(emulator, tls)]) == 0

    err = capsys.readouterr().err
    assert (
        f"warning: {feeds / JOURNAL}: ignored a line that is not a journal line (line 1); any "
        "file named there is pushed again\n"
    ) in err
    # Not Python's way, with the file and line of fastfeed's code that issued it.
    assert "JournalWarning" not in err and ".py:" not in err


def test_an_untrusted_ip_exits_3_and_says_how_to_fix_it(
    make_emulator: Callable[..., Emulator],
    tls: Any,
    make_feed_set: MakeSet,
    capsys: pytest.CaptureFixture[str],
) -> None:
    emulator = make_emulator(trusted_ips=["10.1.2.3"])

    status = main(["push", str(make_feed_set("docs")), *cli_target(emulator, tls)])

    assert status == 3
    assert "Crawl and Index > Feeds > List of Trusted IP Addresses" in capsys.readouterr().err


def test_a_missing_manifest_exits_3(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()

    assert main(["push", str(tmp_path / "empty"), *cli_target(emulator, tls)]) == 3
    assert "manifest.jsonl" in capsys.readouterr().err


def test_a_set_left_by_a_killed_run_is_said_to_be_run_again(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run pushes each file as it is built and writes the manifest last: killed before,
    it leaves files, some in its journal, and no manifest. Building is not what to redo."""
    feeds = make_feed_set("docs", files=2)
    assert main(["push", str(feeds), *cli_target(emulator, tls)]) == 0
    (feeds / "manifest.jsonl").unlink()
    capsys.readouterr()

    assert main(["push", str(feeds), *cli_target(emulator, tls)]) == 3

    err = capsys.readouterr().err
    assert (
        f"{feeds} is not a finished feed set: a `fastfeed run` into it stopped before its build "
        f"finished, having pushed the files its {JOURNAL} lists; run it again into a new --out"
    ) in err
    assert "fastfeed build" not in err


def test_a_refused_file_exits_1_and_shows_the_appliance_answer(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator.add_fault(Fault.answer("Error - the appliance dislikes this"))

    status = main(["push", str(make_feed_set("docs", files=2)), *cli_target(emulator, tls)])

    err = capsys.readouterr().err
    assert status == 1
    assert "docs-000001.xml: failed: Error - the appliance dislikes this" in err
    assert "docs-000002.xml: blocked" in err


def test_tls_without_the_ca_exits_3_and_insecure_warns(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = make_feed_set("docs", files=1)
    base = ["push", str(feeds), "--host", "127.0.0.1", "--port", str(emulator.port)]

    assert main(base) == 3
    assert "--cacert" in capsys.readouterr().err
    assert main([*base, "--insecure"]) == 0
    assert "certificate is not verified" in capsys.readouterr().err


def test_a_client_key_password_never_shows(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    client = tls.ca.issue_cert("client@example.com")
    pem = Path("client.pem")
    client.private_key_and_cert_chain_pem.write_to_path(str(pem))
    os.environ["FASTFEED_CLIENT_KEY_PASSWORD"] = "hunter2-secret"
    try:
        status = main(
            [
                "push",
                str(make_feed_set("docs")),
                *cli_target(emulator, tls),
                "--client-cert",
                str(pem),
            ]
            + ["--json"]
        )
    finally:
        del os.environ["FASTFEED_CLIENT_KEY_PASSWORD"]
    out, err = capsys.readouterr()
    assert status == 0  # an unencrypted key ignores the password
    assert "hunter2" not in out + err


def test_replay_sends_everything_again_and_push_then_skips_it(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = make_feed_set("docs", "full", files=2)
    assert main(["push", str(feeds), *cli_target(emulator, tls)]) == 0

    assert main(["replay", str(feeds), *cli_target(emulator, tls), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"]["accepted"] == 2
    assert main(["push", str(feeds), *cli_target(emulator, tls), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"]["skipped"] == 2
    assert [p.feedtype for p in emulator.pushes()] == ["full", "incremental"] * 2


def test_backlog_prints_the_count(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator.pause_feeder()
    assert main(["push", str(make_feed_set("docs", files=3)), *cli_target(emulator, tls)]) == 0
    capsys.readouterr()

    assert main(["backlog", *cli_target(emulator, tls)[:6]]) == 0
    assert capsys.readouterr().out.strip() == "3"

    emulator.backlog_unsupported = True
    assert main(["backlog", *cli_target(emulator, tls)[:6]]) == 1
    assert "does not support" in capsys.readouterr().err


def test_run_builds_and_pushes_and_keeps_the_feed_set(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(
        b"".join(
            orjson.dumps({"url": f"http://example.com/{i}", "content": f"document {i} " * 50})
            + b"\n"
            for i in range(200)
        )
    )

    status = main(
        ["run", str(corpus), "--datasource", "docs", "--feedtype", "full", "--max-records", "30"]
        + [*cli_target(emulator, tls), "--json"]
    )

    out, err = capsys.readouterr()
    assert status == 0, err
    kept = next((tmp_path / "fastfeed-feeds").iterdir())
    manifest = read_manifest(kept)
    assert len(manifest) == 7 and manifest[0].feedtype == "full"
    assert json.loads(out)["files"]["accepted"] == 7
    assert (kept / JOURNAL).exists()
    assert [p.sha256 for p in emulator.pushes()] == sha256s(kept)
    emulator.wait_idle()
    assert len(emulator.documents("docs")) == 200


def test_run_does_not_let_the_builder_run_far_ahead_of_the_appliance(
    emulator: Emulator, tls: Any, tmp_path: Path
) -> None:
    """With the appliance's backlog stuck above the high mark the push stops, and the builder
    stops too: it holds at most a few chunks of input (one encoding, one being taken, the
    writer's queue of up to 8, one being written: about 10,000 of these records) besides the
    files waiting for the pusher, so it waits far from the end."""
    records, per_file = 30_000, 100
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(
        b"".join(
            orjson.dumps({"url": f"http://e.com/{i}", "content": f"{i} " + "x" * 4000}) + b"\n"
            for i in range(records)
        )
    )
    emulator.pause_feeder()
    out = tmp_path / "set"
    argv = ["run", str(corpus), "--datasource", "docs", "--max-records", str(per_file)]
    argv += ["--out", str(out), *cli_target(emulator, tls), "--max-ahead", "2"]
    argv += ["--backlog-high", "0", "--backlog-low", "0"]
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(main(argv)))
    runner.start()
    try:
        seen = -1
        while seen != (seen := len(list(out.glob("*.xml")))) or seen == 0:
            time.sleep(0.5)  # until the builder stops producing files
        assert seen < records // per_file / 2
    finally:
        emulator.resume_feeder()
        runner.join(60)
    assert result == [0]
    assert len(read_manifest(out)) == records // per_file


def big_records(first: int, count: int) -> bytes:
    """Records of 40 KB: a hundred of them fill the builder's 4 MB chunk of input, and it
    writes files once a few chunks are in."""
    return b"".join(
        orjson.dumps({"url": f"http://example.com/{i}", "content": f"{i} " + "x" * 40_000}) + b"\n"
        for i in range(first, first + count)
    )


def run_from_a_fifo(
    emulator: Emulator, tls: Any, tmp_path: Path, feedtype: str, *extra: str
) -> tuple[Path, Path, threading.Thread, list[int]]:
    """`fastfeed run FIFO --feedtype FEEDTYPE --max-records 100 --out OUT` started on a thread:
    the FIFO to feed, OUT, the thread, and where its exit status goes."""
    fifo, out = tmp_path / "docs.fifo", tmp_path / "set"
    os.mkfifo(fifo)
    argv = ["run", str(fifo), "--datasource", "docs", "--feedtype", feedtype]
    argv += ["--max-records", "100", "--out", str(out), *cli_target(emulator, tls), *extra]
    status: list[int] = []
    runner = threading.Thread(target=lambda: status.append(main(argv)))
    runner.start()
    return fifo, out, runner, status


def feed_until(feeding: BinaryIO, out: Path, condition: Callable[[], bool]) -> int:
    """Feeds `big_records` a chunk at a time (the builder writes its files a few chunks behind
    its input, and tells of them between chunks) until files were built and `condition`
    holds; returns how many records went in."""
    written = 0
    while written < 600 or not (len(list(out.glob("*.xml"))) >= 2 and condition()):
        assert written < 3000, "the run did not do what it should with its input open"
        feeding.write(big_records(written, 100))
        feeding.flush()
        written += 100
        time.sleep(0.1)
    return written


def nothing_more() -> bool:
    time.sleep(0.5)  # time enough for a push, were one started
    return True


@pytest.mark.parametrize("feedtype", ["full", "incremental"])
def test_run_sends_a_full_feed_once_built_whole_and_others_as_they_are_built(
    emulator: Emulator, tls: Any, tmp_path: Path, feedtype: str
) -> None:
    """Fed by a pipe still open, a run has built files of the input so far. Of a full feed it
    sends none: its first file would replace the datasource with what came so far. Of an
    incremental feed it sends them at once. Once the input ends, every file is sent, in
    order, and the index holds every record."""
    fifo, out, runner, status = run_from_a_fifo(emulator, tls, tmp_path, feedtype)
    try:
        with open(fifo, "wb") as feeding:
            streams = feedtype != "full"
            written = feed_until(
                feeding, out, (lambda: bool(emulator.pushes())) if streams else nothing_more
            )
            assert bool(emulator.pushes()) is streams
            assert not (out / "manifest.jsonl").exists()  # the build is still going
            feeding.write(big_records(written, 100))
            written += 100
    finally:
        runner.join(60)
    assert status == [0]
    assert [p.sha256 for p in emulator.pushes()] == sha256s(out)
    assert [p.feedtype for p in emulator.pushes()][:2] == [feedtype, "incremental"]
    emulator.wait_idle()
    urls = [f"http://example.com/{i}" for i in range(written)]
    assert sorted(emulator.documents("docs")) == sorted(urls)


def test_a_full_run_whose_build_fails_sends_nothing(
    emulator: Emulator,
    tls: Any,
    make_feed_set: MakeSet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bad record after files of the input were built: the datasource keeps what it held,
    since the first file of the full set would have replaced it; the run says the build
    stopped and that nothing was pushed, and exits 1, as a failed build."""
    held = make_feed_set("docs", "full", files=1)
    assert main(["push", str(held), *cli_target(emulator, tls)]) == 0
    emulator.wait_idle()
    before = emulator.documents("docs")
    capsys.readouterr()

    fifo, out, runner, status = run_from_a_fifo(emulator, tls, tmp_path, "full", "--json")
    try:
        with open(fifo, "wb") as feeding:
            written = feed_until(feeding, out, nothing_more)
            feeding.write(b'{"url": "http://example.com/bad"\n')
    finally:
        runner.join(60)

    stdout, err = capsys.readouterr()
    assert status == [1], err
    assert not (out / "manifest.jsonl").exists()
    assert f"docs.fifo:{written + 1}" in err
    assert "the build stopped; nothing was pushed" in err
    answer = json.loads(stdout)
    assert answer["ok"] is False and answer["out"] == str(out)
    assert len(emulator.pushes()) == 1
    emulator.wait_idle()
    assert emulator.documents("docs") == before


def test_help_teaches_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("push", "run", "replay", "backlog", "demo"):
        assert main([command, "--help"]) == 0
        assert "example" in capsys.readouterr().out


def test_an_empty_full_feed_is_pushed_only_when_allowed(
    emulator: Emulator, tls: Any, make_feed_set: MakeSet, tmp_path: Path
) -> None:
    assert (
        main(["push", str(make_feed_set("docs", "full", files=1)), *cli_target(emulator, tls)]) == 0
    )
    empty = tmp_path / "empty"
    argv = ["build", "/dev/null", "--datasource", "docs", "--feedtype", "full", "--out", str(empty)]
    assert main([*argv, "--allow-empty-full"]) == 0

    assert main(["push", str(empty), *cli_target(emulator, tls)]) == 3
    assert main(["run", "/dev/null", "--datasource", "docs", "--feedtype", "full"]
                + cli_target(emulator, tls)) == 3  # fmt: skip
    emulator.wait_idle()
    assert len(emulator.pushes()) == 1 and len(emulator.documents("docs")) == 5

    assert main(["push", str(empty), *cli_target(emulator, tls), "--allow-empty-full"]) == 0
    emulator.wait_idle()
    assert emulator.documents("docs") == {}


def test_an_empty_full_groups_feed_is_neither_built_nor_pushed(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "groups"
    argv = ["groups", "build", "/dev/null", "--groupsource", "ldap", "--feedtype", "full"]
    assert main([*argv, "--out", str(out)]) == 1
    assert "a full groups feed needs at least one membership" in capsys.readouterr().err
    assert not (out / "manifest.jsonl").exists()
    # A set made by hand (or by an older version) is not sent either.
    out.mkdir(exist_ok=True)
    (out / "ldap-groups-000001.xml").write_bytes(b"<xmlgroups>\n</xmlgroups>\n")
    entry = {"file": "ldap-groups-000001.xml", "datasource": "ldap", "feedtype": "full",
             "records": 0, "bytes": 25, "sha256": "0" * 64, "kind": "groups"}  # fmt: skip
    (out / "manifest.jsonl").write_bytes(json.dumps(entry).encode() + b"\n")
    push = ["groups", "push", str(out), *cli_target(emulator, tls), "--allow-full"]
    assert main(push) == 3
    assert "would remove every group of every source" in capsys.readouterr().err
    assert emulator.pushes() == []


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_port_where_nothing_listens_fails_at_once_naming_it(
    make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    started = time.monotonic()
    status = main(["push", str(make_feed_set("docs", files=1)), "--host", "127.0.0.1", "--http"]
                  + ["--port", str(port), "--backlog-interval", "0.05"])  # fmt: skip
    assert status == 3
    assert time.monotonic() - started < 5  # not six retries over 19 s
    assert f"connection refused: nothing listens on port {port} of 127.0.0.1" in (
        capsys.readouterr().err
    )


def test_https_to_the_plain_http_port_says_to_use_http(
    make_emulator: Callable[..., Emulator],
    tls: Any,
    make_feed_set: MakeSet,
    capsys: pytest.CaptureFixture[str],
) -> None:
    emulator = make_emulator(http_port=0)
    argv = ["push", str(make_feed_set("docs", files=1)), "--host", "127.0.0.1"]
    assert main([*argv, "--port", str(emulator.http_port), "--cacert", str(tls.ca_path)]) == 3
    assert f"port {emulator.http_port} answers in plain HTTP, not HTTPS: give --http" in (
        capsys.readouterr().err
    )


def test_plain_http_to_the_https_port_stops_at_once_saying_to_leave_out_http(
    emulator: Emulator, make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    """The TLS server drops the plain request without an answer: without the check, six
    attempts over 20 s, then "ReadError: no detail given"."""
    wrong = ["--host", "127.0.0.1", "--http", "--port", str(emulator.port)]
    started = time.monotonic()
    pushed = main(["push", str(make_feed_set("docs", files=1)), *wrong])
    push_err = capsys.readouterr().err
    polled = main(["backlog", *wrong])
    backlog_err = capsys.readouterr().err

    assert pushed == polled == 3
    assert time.monotonic() - started < 5
    said = f"port {emulator.port} answers in HTTPS, not plain HTTP: leave out --http"
    assert said in push_err and said in backlog_err
    assert emulator.pushes() == []


def test_a_certificate_for_another_host_says_to_change_the_host_not_the_ca(
    make_emulator: Callable[..., Emulator],
    tls: Any,
    make_feed_set: MakeSet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The CA is the right one: telling the user to give it with --cacert sends them astray."""
    elsewhere = tmp_path / "gsa.pem"
    tls.ca.issue_cert("gsa.example.com").private_key_and_cert_chain_pem.write_to_path(elsewhere)
    emulator = make_emulator(tls=(elsewhere, elsewhere))
    argv = ["push", str(make_feed_set("docs", files=1)), "--host", "127.0.0.1"]

    assert main([*argv, "--port", str(emulator.port), "--cacert", str(tls.ca_path)]) == 3
    err = capsys.readouterr().err
    assert (
        "certificate is not valid for '127.0.0.1': give the host by a name its certificate" in err
    )
    assert "holds (check --host)" in err
    assert "CA certificate" not in err


def test_a_missing_tls_file_is_named_with_its_option(
    make_feed_set: MakeSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = str(make_feed_set("docs", files=1))
    missing = str(tmp_path / "corp-ca.pem")
    base = ["push", feeds, "--host", "127.0.0.1", "--port", str(free_port())]

    assert main([*base, "--cacert", missing]) == 3
    assert f"cannot load --cacert {missing}: No such file or directory" in (capsys.readouterr().err)
    assert main([*base, "--client-cert", missing]) == 3
    err = capsys.readouterr().err
    assert f"cannot load --client-cert {missing}: No such file or directory" in err
    assert "Errno" not in err


def test_backlog_without_the_ca_is_refused_with_the_hint_as_push_is(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["backlog", "--host", "127.0.0.1", "--port", str(emulator.port)])
    err = capsys.readouterr().err
    assert status == 3
    assert "TLS with https://127.0.0.1" in err and "--cacert" in err
    assert "ConnectError(" not in err


def test_what_push_is_given_by_mistake_is_named_with_the_command_to_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = tmp_path / "docs.jsonl"
    records.write_text('{"url": "http://e.example.com/a", "content": "a"}\n')
    thunderstone = tmp_path / "ts"
    build = ["build", str(records), "--format", "thunderstone", "--profile", "docs"]
    assert main([*build, "--out", str(thunderstone)]) == 0
    capsys.readouterr()

    target = ["--host", "127.0.0.1", "--json"]
    assert main(["push", str(records), *target]) == 3
    out, err = capsys.readouterr()
    assert "holds JSON Lines records, not a feed set: build it first" in err
    assert "fastfeed run" in err and json.loads(out)["ok"] is False
    assert main(["push", str(thunderstone), *target]) == 3
    assert "is a Thunderstone set: push it with fastfeed thunderstone push" in (
        capsys.readouterr().err
    )


def test_json_summaries_say_ok_false_whenever_the_status_is_not_0(
    emulator: Emulator, make_feed_set: MakeSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TLS failure: the push stops refused, with nothing sent.
    feeds = make_feed_set("docs", files=1)
    assert main(["push", str(feeds), "--host", "127.0.0.1", "--port", str(emulator.port)]
                + ["--json"]) == 3  # fmt: skip
    assert json.loads(capsys.readouterr().out)["ok"] is False
    # A build stopped by a bad record still prints a JSON object.
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "nope"}\n')
    argv = ["build", str(bad), "--datasource", "d", "--out", str(tmp_path / "o"), "--json"]
    assert main(argv) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is False and "url" in result["error"]


def test_bare_fastfeed_shows_the_help_and_version_is_known(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import fastfeed

    assert main([]) == 0
    assert "Usage: fastfeed" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fastfeed {fastfeed.__version__}"


def test_the_tls_probe_of_a_dropped_plain_request_waits_no_longer_than_connect_timeout(
    make_feed_set: MakeSet, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port that drops plain HTTP is asked whether it speaks TLS; one that takes the
    handshake and never answers holds the push for --connect-timeout, not a fixed 5 s."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if conn.recv(1)[:1] == b"\x16":  # a TLS ClientHello: held without an answer
                held.append(conn)
            else:
                conn.close()  # plain HTTP: dropped

    threading.Thread(target=serve, daemon=True).start()
    argv = ["push", str(make_feed_set("docs", files=1)), "--host", "127.0.0.1", "--http"]
    argv += ["--port", str(server.getsockname()[1]), "--connect-timeout", "0.5", "--retries", "0"]
    started = time.monotonic()
    try:
        assert main(argv) == 1
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert time.monotonic() - started < 3
    assert "failed" in capsys.readouterr().err


def test_a_bad_client_certificate_file_key_or_password_is_told_apart(
    make_feed_set: MakeSet, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OpenSSL says "PEM lib" for each of these; the user is told which file or option."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(tls.key_path.read_bytes(), None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"right"),
        )
    )
    base = ["push", str(make_feed_set("docs", files=1)), "--host", "127.0.0.1", "--port",
            str(free_port()), "--cacert", str(tls.ca_path)]  # fmt: skip
    cert, ca = str(tls.cert_path), str(tls.ca_path)
    cases = [
        (["--client-cert", cert, "--client-key", str(locked), "--client-key-password", "wrong"],
         f"the private key in --client-key {locked} cannot be read with the password given: "
         "check --client-key-password"),
        (["--client-cert", cert],
         f"--client-cert {cert} holds no private key in PEM"),
        (["--client-cert", ca],
         f"--client-cert {ca} holds no private key in PEM: give the client certificate's key "
         "with --client-key"),
        (["--client-cert", str(locked), "--client-key", str(tls.key_path)],
         f"{locked} holds no certificate in PEM"),
    ]  # fmt: skip
    for options, said in cases:
        assert main([*base, *options]) == 3
        err = capsys.readouterr().err
        assert said in err, err
