"""What the command line says, word for word where a newcomer reads it: counts in the right
number, hints naming the options of the command at hand, suggestions for a typo, and required
options marked as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TLSFiles
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.manifest import read_manifest

pytestmark = pytest.mark.usefixtures("clean_env")

GOOD = '{"url": "http://e.example.com/1", "content": "one"}\n'


def records(count: int) -> str:
    """`count` good records, as JSON Lines."""
    return "".join(
        f'{{"url": "http://e.example.com/{n}", "content": "{n}"}}\n' for n in range(count)
    )


def sync_argv(source: str, emulator: Emulator, tls: TLSFiles, tmp_path: Path) -> list[str]:
    """`fastfeed sync` of `source` to the emulator, its state in `tmp_path`."""
    state = str(tmp_path / "d.state")
    target = ["--host", "127.0.0.1", "--port", str(emulator.port), "--cacert", str(tls.ca_path)]
    return ["sync", source, "--datasource", "d", "--state", state, *target]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_one_retry_is_one_retry(
    emulator: Emulator, tls: TLSFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = str(tmp_path / "feeds")
    assert (
        main(["build", write(tmp_path / "a.jsonl", GOOD), "--datasource", "d", "--out", feeds]) == 0
    )
    emulator.add_fault(Fault.http_status(503))
    capsys.readouterr()

    status = main(["push", feeds, "--host", "127.0.0.1", "--port", str(emulator.port),
                   "--cacert", str(tls.ca_path), "--backoff-base", "0.01"])  # fmt: skip

    err = capsys.readouterr().err
    assert status == 0
    assert "1 accepted; 1 record, " in err and err.endswith(", 1 retry\n")


def test_one_refused_record_or_line_is_said_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = write(tmp_path / "a.jsonl", GOOD + '{"url": "not a url"}\n')
    member = '{"name": "alice", "scope": "user"}'
    groups = write(
        tmp_path / "g.jsonl", f'{{"group": "g", "members": [{member}]}}\n{{"group": ""}}\n'
    )

    built = main(["build", records, "--datasource", "d", "--out", str(tmp_path / "o"),
                  "--on-error", "skip"])  # fmt: skip
    build_err = capsys.readouterr().err
    grouped = main(["groups", "build", groups, "--groupsource", "l", "--out", str(tmp_path / "g"),
                    "--on-error", "skip"])  # fmt: skip
    groups_err = capsys.readouterr().err

    assert built == grouped == 1
    assert "1 record was refused and saved to" in build_err
    assert "1 line was refused and saved to" in groups_err


def thunderstone_set(tmp_path: Path) -> str:
    out = str(tmp_path / "ts")
    source = write(tmp_path / "a.jsonl", GOOD)
    assert (
        main(["build", source, "--format", "thunderstone", "--profile", "docs", "--out", out]) == 0
    )
    return out


def test_a_one_file_thunderstone_push_counts_one_file(
    emulator: Emulator, tls: TLSFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{emulator.url}/texis/dowalk/recvdata.xml"
    sent = thunderstone_set(tmp_path)
    capsys.readouterr()

    status = main(
        ["thunderstone", "push", sent, "--url", url, "--cacert", str(tls.ca_path), "--json"]
    )

    out, err = capsys.readouterr()
    assert status == 0
    # The index update that follows the file is a request, not a file.
    assert json.loads(out)["files"]["accepted"] == 1
    assert f"{url}: 1 accepted; 1 record," in err
    assert [r.items[0][0] for r in emulator.thunderstone_requests()] == ["I", "UI"]


def test_thunderstone_connection_hints_name_the_url_and_its_port(
    make_emulator: Callable[..., Emulator],
    tls: TLSFiles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sent = thunderstone_set(tmp_path)
    plain = make_emulator(tls=None)
    path = "/texis/dowalk/recvdata.xml"
    capsys.readouterr()

    # Nothing listens on the default HTTPS port (443) of loopback: it is named, not "None".
    refused = main(["thunderstone", "push", sent, "--url", f"https://127.0.0.1{path}"])
    refused_err = capsys.readouterr().err
    wrong_scheme = main(
        ["thunderstone", "push", sent, "--url", f"https://127.0.0.1:{plain.port}{path}"]
    )
    wrong_scheme_err = capsys.readouterr().err

    assert refused == wrong_scheme == 3
    assert "nothing listens on port 443 of 127.0.0.1 (check the host and port in --url)" in (
        refused_err
    )
    assert "--host" not in refused_err and "None" not in refused_err
    assert f"port {plain.port} answers in plain HTTP, not HTTPS: give an http:// --url" in (
        wrong_scheme_err
    )
    assert "--http" not in wrong_scheme_err.replace("http://", "")


def test_a_mistyped_command_or_option_gets_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for typo in (["pusj", "feeds/"], ["push", "feeds/", "--hots", "gsa"]):
        with pytest.raises(SystemExit) as stopped:
            main(typo)
        assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "No such command 'pusj'. Did you mean 'push'?" in err
    assert "No such option '--hots'. (Did you mean one of: '--host'" in err


def test_the_help_marks_required_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    help_ = " ".join(capsys.readouterr().out.split())
    assert "--datasource DATASOURCE datasource name, [a-zA-Z_][a-zA-Z0-9_-]* [required]" in help_
    with pytest.raises(SystemExit) as stopped:
        main(["run", "docs.jsonl", "--host", "gsa"])
    assert stopped.value.code == 2
    assert "--datasource is required (or FASTFEED_DATASOURCE" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["build"], ["sync"], ["groups", "push"]])
def test_help_fits_the_terminal_and_names_each_argument_once(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    prose = out.split("examples:")[0]  # examples are shown as written, to be copied
    assert max(len(line) for line in prose.splitlines()) <= 72
    # The argument's own line, once (click lists arguments under a heading of its own).
    listed = [
        line for line in out.splitlines() if line.startswith(("  INPUT...  ", "  DIR|FILE...  "))
    ]
    assert len(listed) == 1


SYNCS = {
    "gsa": ["sync", "--datasource", "d", "--host", "127.0.0.1"],
    "thunderstone": [
        "thunderstone",
        "sync",
        "--profile",
        "p",
        "--url",
        "https://127.0.0.1/recvdata.xml",
    ],
}


@pytest.mark.parametrize("command", SYNCS.values(), ids=SYNCS.keys())
def test_a_sync_with_bad_settings_sends_nothing_and_exits_3_naming_the_setting(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the help says: 3, nothing sent, for bad settings, whichever the receiver."""
    state = tmp_path / "s.state"
    snapshot = write(tmp_path / "a.jsonl", GOOD)

    status = main([*command, snapshot, "--state", str(state), "--timeout", "0"])

    assert status == 3
    assert "timeout" in capsys.readouterr().err
    assert not state.exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["biuld", "x.jsonl"], "No such command 'biuld'. Did you mean 'build'?"),
        (["seedlist", "lod"], "No such command 'lod'. Did you mean 'load'?"),
    ],
)
def test_a_mistyped_command_is_told_the_closest_one(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_a_thunderstone_url_in_http_to_the_https_port_says_to_give_https(
    emulator: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sent = thunderstone_set(tmp_path)
    url = f"http://127.0.0.1:{emulator.port}/texis/dowalk/recvdata.xml"
    capsys.readouterr()

    assert main(["thunderstone", "push", sent, "--url", url]) == 3
    assert f"port {emulator.port} answers in HTTPS, not plain HTTP: give an https:// --url" in (
        capsys.readouterr().err
    )


def test_the_usage_shows_that_commands_take_several_paths(
    capsys: pytest.CaptureFixture[str],
) -> None:
    usages = {}
    for command in (["build"], ["push"], ["replay"], ["sync"], ["seedlist", "load"]):
        assert main([*command, "--help"]) == 0
        usages[command[-1]] = capsys.readouterr().out.splitlines()[0]
    assert usages["build"] == "Usage: fastfeed build [OPTIONS] INPUT..."
    assert usages["push"] == "Usage: fastfeed push [OPTIONS] DIR|FILE..."
    assert usages["replay"].endswith(" DIR...") and usages["sync"].endswith(" INPUT...")
    assert usages["load"].endswith(" INPUT...")


def test_the_help_gives_the_range_the_command_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["push", "--help"]) == 0
    help_ = " ".join(capsys.readouterr().out.split())
    assert "--concurrency N files in flight at once, across datasources (default 4) [x>=1]" in help_
    with pytest.raises(SystemExit) as stopped:
        main(["push", "feeds", "--host", "gsa", "--concurrency", "0"])
    assert stopped.value.code == 2
    assert "'--concurrency': 0 is not in the range x>=1" in capsys.readouterr().err


def test_the_emulator_help_lists_every_fault_kind(capsys: pytest.CaptureFixture[str]) -> None:
    from fastfeed.emulator.faults import KINDS

    assert main(["emulator", "--help"]) == 0
    help_ = " ".join(capsys.readouterr().out.split())
    for kind in (*KINDS, "disk_full"):
        assert f" {kind}" in help_


def test_forget_says_what_it_forgot_in_the_right_number(
    emulator: Emulator, tls: TLSFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "docs.state")
    source = write(tmp_path / "a.jsonl", GOOD)
    assert main(["sync", source, "--datasource", "d", "--state", state, "--host", "127.0.0.1",
                 "--port", str(emulator.port), "--cacert", str(tls.ca_path)]) == 0  # fmt: skip
    capsys.readouterr()

    assert main(["state", "forget", state, "--url", "http://e.example.com/1",
                 "--url", "http://e.example.com/gone"]) == 0  # fmt: skip
    assert capsys.readouterr().err == (
        "fastfeed state forget: forgot 1 URL of 2 given (the state did not hold the others); "
        "the next sync sends it again\n"
    )
    # Given twice, a URL is one; none held is said so.
    for urls in (["http://nope/"], ["http://nope/"] * 2):
        assert main(["state", "forget", state, *[f"--url={u}" for u in urls]]) == 0
        assert capsys.readouterr().err == (
            "fastfeed state forget: forgot nothing: the state does not hold the URL given\n"
        )


def test_a_sync_says_it_first_finished_the_set_an_earlier_one_left(
    emulator: Emulator, tls: TLSFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Else the user reads "nothing to send" while the sync just sent the rest of a set."""
    lines = records(4)
    source = write(tmp_path / "a.jsonl", lines)
    argv = [*sync_argv(source, emulator, tls, tmp_path), "--retries", "0", "--max-records", "2"]
    emulator.add_fault(Fault.slow(0))  # the first file goes through, the second fails
    emulator.add_fault(Fault.http_status(503, times=100))
    assert main([*argv, "--out", str(tmp_path / "s1")]) == 1
    emulator.clear_faults()
    capsys.readouterr()

    assert main([*argv, "--out", str(tmp_path / "s2")]) == 0
    err = capsys.readouterr().err
    assert "first finished the set an earlier sync left unfinished (2 records)" in err
    assert "nothing to send (0 new, 0 changed, 0 deleted, 4 unchanged)" in err


def test_an_input_that_cannot_be_read_whole_is_not_said_to_be_skippable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--on-error skip sets refused records aside; a truncated Parquet file stops the build
    whatever it says, so the hint must not send the user there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.table({"url": ["http://e.example.com/1"], "content": ["one"]}), whole)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[:100])
    bad = write(tmp_path / "bad.jsonl", GOOD + '{"url": "not a url"}\n')

    for on_error in ("stop", "skip"):
        out = str(tmp_path / f"o-{on_error}")
        argv = ["build", str(cut), "--datasource", "d", "--out", out, "--on-error", on_error]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert f"{out} has no manifest and cannot be pushed. Fix the input and build again" in err
        assert "--on-error skip" not in err
    assert main(["build", bad, "--datasource", "d", "--out", str(tmp_path / "o-bad")]) == 1
    assert "Fix the record (or use --on-error skip)" in capsys.readouterr().err


def test_a_flood_of_warnings_is_cut_short_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-bytes 100 (meant as 100MB) puts every record alone in a file, each with a warning:
    the first ones are shown, the rest counted, and the summary stays in sight."""
    lines = records(30)
    source = write(tmp_path / "a.jsonl", lines)

    argv = ["build", source, "--datasource", "d", "--out", str(tmp_path / "o"), "--max-bytes"]
    assert main([*argv, "100", "--json"]) == 0
    out, err = capsys.readouterr()

    assert err.count("warning: ") == 20
    *_, more, summary = err.splitlines()
    assert more == "fastfeed build: 10 more warnings not shown"
    assert summary.startswith("wrote 30 records into 30 files")
    assert json.loads(out)["warnings"] == 30


@pytest.mark.parametrize("command", ["sync", "thunderstone sync"])
def test_a_sync_cuts_its_flood_of_warnings_short_as_a_build_does(
    command: str,
    emulator: Emulator,
    tls: TLSFiles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = write(tmp_path / "a.jsonl", records(30))
    argv = sync_argv(source, emulator, tls, tmp_path)
    if command == "thunderstone sync":
        url = f"{emulator.url}/texis/dowalk/recvdata.xml"
        state = str(tmp_path / "news.state")
        argv = ["thunderstone", "sync", source, "--profile", "news", "--state", state,
                "--url", url, "--cacert", str(tls.ca_path)]  # fmt: skip
    argv += ["--max-bytes", "100", "--out", str(tmp_path / "s"), "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert err.count("warning: ") == 20
    assert f"fastfeed {command}: 10 more warnings not shown" in err
    assert json.loads(out)["warnings"] == 30


def test_stdout_closed_by_its_reader_ends_the_command_quietly(
    emulator: Emulator, tls: TLSFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fastfeed state export docs.state | head -1`: no "error: Broken pipe" once head has
    its line, and the status a program killed by SIGPIPE has (141)."""
    import os
    import subprocess
    import sys

    state = str(tmp_path / "docs.state")
    source = write(tmp_path / "a.jsonl", GOOD)
    assert main(["sync", source, "--datasource", "d", "--state", state, "--host", "127.0.0.1",
                 "--port", str(emulator.port), "--cacert", str(tls.ca_path)]) == 0  # fmt: skip
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before the first line is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fastfeed", "state", "export", state],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_dash_read_from_a_terminal_says_what_the_command_waits_for(tmp_path: Path) -> None:
    """`fastfeed build -` typed without a pipe would wait for the keyboard in silence."""
    import os
    import subprocess
    import sys
    import time

    line = b'{"url": "http://e.example.com/1", "content": "one"}\n'
    argv = [sys.executable, "-m", "fastfeed", "build", "-", "--datasource", "d", "--out"]
    keyboard, terminal = os.openpty()
    child = subprocess.Popen(
        [*argv, str(tmp_path / "typed")], stdin=terminal, stderr=subprocess.PIPE, text=True
    )
    os.close(terminal)
    try:
        os.write(keyboard, line)
        for _ in range(50):  # Ctrl-D until the reader takes it as the end
            os.write(keyboard, b"\x04")
            time.sleep(0.1)
            if child.poll() is not None:
                break
        _, err = child.communicate(timeout=30)
    finally:
        os.close(keyboard)
    piped = subprocess.run(
        [*argv, str(tmp_path / "piped")], input=line, capture_output=True, timeout=60
    )

    assert child.returncode == 0 and piped.returncode == 0
    assert err.startswith(
        "fastfeed build: reading JSON Lines from the terminal until Ctrl-D; pipe the records in, "
        "or give a file instead of -\n"
    )
    assert b"terminal" not in piped.stderr


def test_one_ctrl_d_ends_what_is_typed_at_a_terminal(tmp_path: Path) -> None:
    """Lines typed one by one, then Ctrl-D on an empty line: the build ends with them. (Ctrl-D
    once had to be typed twice when lines came before it.)"""
    import time

    keyboard, terminal = os.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "fastfeed", "build", "-", "--datasource", "d", "--out",
         str(tmp_path / "typed")],
        stdin=terminal, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(terminal)
    try:
        for n in range(3):
            os.write(
                keyboard, f'{{"url": "http://e.example.com/{n}", "content": "{n}"}}\n'.encode()
            )
            time.sleep(0.1)
        os.write(keyboard, b"\x04")
        _, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        os.close(keyboard)

    assert child.returncode == 0, err
    assert sum(e.records for e in read_manifest(tmp_path / "typed")) == 3


def closed_pipe() -> int:
    """The writing end of a pipe whose reader is gone: writing to it fails with EPIPE."""
    import os

    reader, writer = os.pipe()
    os.close(reader)
    return writer


def fastfeed(*argv: str, **streams: Any) -> subprocess.CompletedProcess[str]:
    """Runs `fastfeed` in a process of its own, with the given stdin, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "fastfeed", *argv], text=True, timeout=60, **streams
    )


def test_a_failed_command_with_json_and_stdout_closed_ends_141_without_a_traceback(
    tmp_path: Path,
) -> None:
    """The error handler's JSON answer hits the closed stdout inside the error's handling."""
    writer = closed_pipe()
    try:
        commands = [
            ["build", str(tmp_path / "nonexist.jsonl"), "--datasource", "d", "--out",
             str(tmp_path / "z"), "--json"],
            ["backlog", "--host", "127.0.0.1", "--port", "1", "--json", "--retries", "0"],
        ]  # fmt: skip
        for argv in commands:
            done = fastfeed(*argv, stdout=writer, stderr=subprocess.PIPE)
            assert done.returncode == 141, done.stderr
            assert "Traceback" not in done.stderr
    finally:
        os.close(writer)


def test_a_closed_stderr_neither_stops_a_build_nor_changes_its_status(tmp_path: Path) -> None:
    """Warnings (one a file, --max-bytes 100) and the summary have nowhere to go: the build
    still writes all its files and its manifest, and says its result on stdout."""
    lines = records(50)
    source = write(tmp_path / "a.jsonl", lines)
    writer = closed_pipe()
    try:
        out = tmp_path / "o"
        argv = ["build", source, "--datasource", "d", "--out", str(out), "--max-bytes", "100"]
        done = fastfeed(*argv, "--json", stdout=subprocess.PIPE, stderr=writer)
    finally:
        os.close(writer)
    assert done.returncode == 0
    assert json.loads(done.stdout)["ok"] is True
    assert len(read_manifest(out)) == 50


def test_a_closed_stdin_given_as_dash_is_said_plainly(tmp_path: Path) -> None:
    """`fastfeed build - <&-`: Python has no sys.stdin at all."""
    argv = ["build", "-", "--datasource", "d", "--out", str(tmp_path / "o")]
    done = fastfeed(*argv, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(0))
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "fastfeed build: error: standard input is closed, so - has nothing to read: pipe the "
        "records in, or give a file instead of -\n"
    )
