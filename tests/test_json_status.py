"""Every command's --json: one JSON object on stdout whose `ok` is true exactly when the exit
status is 0, with an `error` when the command stopped, so that a script can read either."""

from __future__ import annotations

import json
import socket
import string
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TLSFiles
from fastfeed.cli import main
from fastfeed.emulator import Emulator

pytestmark = pytest.mark.usefixtures("clean_env")

GOOD = '{"url": "http://e.example.com/1", "content": "one"}\n'
BAD = '{"url": "http://e.example.com/1", "content": "one"}\n{"url": "not a url"}\n'
GROUPS_GOOD = '{"group": "eng", "members": [{"name": "alice", "scope": "user"}]}\n'
GROUPS_BAD = GROUPS_GOOD + '{"group": "", "members": []}\n'


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def connection(emulator: Emulator, tls: TLSFiles) -> str:
    return f"--host 127.0.0.1 --port {emulator.port} --cacert {tls.ca_path}"


def pacing() -> str:
    return "--backoff-base 0.01 --backlog-interval 0.05 --retries 0"


def run(command: str) -> None:
    assert main(command.split()) == 0


def placeholders(tmp: Path, emulator: Emulator, tls: TLSFiles) -> dict[str, Callable[[], str]]:
    """What the command lines below name in braces, made when a line names it."""
    appliance = f"{connection(emulator, tls)} {pacing()}"
    recvdata = f"--url {emulator.url}/texis/dowalk/recvdata.xml --cacert {tls.ca_path}"
    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        nowhere = f"--host 127.0.0.1 --port {s.getsockname()[1]} --cacert {tls.ca_path}"
    good, bad = (lambda: write(tmp / "a.jsonl", GOOD)), (lambda: write(tmp / "a.jsonl", BAD))
    return {
        "good": good,
        "bad": bad,
        "empty": lambda: write(tmp / "a.jsonl", ""),
        "groups": lambda: write(tmp / "g.jsonl", GROUPS_GOOD),
        "bad_groups": lambda: write(tmp / "g.jsonl", GROUPS_BAD),
        "out": lambda: str(tmp / "out"),
        "missing": lambda: str(tmp / "missing"),
        "appliance": lambda: appliance,
        "connection": lambda: connection(emulator, tls),
        "recvdata": lambda: f"{recvdata} --backoff-base 0.01 --retries 0",
        "nowhere": lambda: nowhere,
        "feeds": lambda: (run(f"build {good()} --datasource d --out {tmp}/feeds"), f"{tmp}/feeds")[
            1
        ],
        "groups_set": lambda: (
            run(
                f"groups build {write(tmp / 'g.jsonl', GROUPS_GOOD)} --groupsource l --out {tmp}/g"
            ),
            f"{tmp}/g",
        )[1],
        "ts_set": lambda: (
            run(f"build {good()} --format thunderstone --profile docs --out {tmp}/ts"),
            f"{tmp}/ts",
        )[1],
        "state": lambda: str(tmp / "st"),
        "synced": lambda: (
            run(f"sync {good()} --datasource d --state {tmp}/st {appliance}"),
            f"{tmp}/st",
        )[1],
    }


#: command: (a command line that succeeds, one that fails).
CASES = {
    "build": (
        "build {good} --datasource d --out {out}",
        "build {bad} --datasource d --out {out}",
    ),
    # Refused by the command itself rather than by the input: an empty full feed.
    "build (refused)": (
        "build {good} --datasource d --feedtype full --out {out}",
        "build {empty} --datasource d --feedtype full --out {out}",
    ),
    "push": ("push {feeds} {appliance}", "push {feeds} {nowhere}"),
    "replay": ("replay {feeds} {appliance}", "replay {missing} {appliance}"),
    "run": (
        "run {good} --datasource d --out {out} {appliance}",
        "run {bad} --datasource d --out {out} {appliance}",
    ),
    "sync": (
        "sync {good} --datasource d --state {state} {appliance}",
        "sync {bad} --datasource d --state {state} {appliance}",
    ),
    "backlog": ("backlog {connection}", "backlog {nowhere}"),
    "groups build": (
        "groups build {groups} --groupsource ldap --out {out}",
        "groups build {bad_groups} --groupsource ldap --out {out} --on-error skip",
    ),
    "groups push": ("groups push {groups_set} {appliance}", "groups push {feeds} {appliance}"),
    # The failing one meets an appliance that does not trust this machine: Not Allowed.
    "thunderstone push": ("thunderstone push {ts_set} {recvdata}",) * 2,
    "thunderstone sync": (
        "thunderstone sync {good} --profile docs --state {state} {recvdata}",
        "thunderstone sync {bad} --profile docs --state {state} {recvdata}",
    ),
    "seedlist load": ("seedlist load {good} --db {out}", "seedlist load {bad} --db {out}"),
    "state show": ("state show {synced}", "state show {missing}"),
}


@pytest.mark.parametrize("succeeds", [True, False], ids=["succeeds", "fails"])
@pytest.mark.parametrize("command", CASES)
def test_json_ok_is_the_exit_status(
    command: str,
    succeeds: bool,
    tmp_path: Path,
    make_emulator: Callable[..., Emulator],
    tls: TLSFiles,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The failing Thunderstone push meets an appliance that does not trust this machine.
    untrusted = command == "thunderstone push" and not succeeds
    emulator = make_emulator(trusted_ips=["192.0.2.1"] if untrusted else None)
    line = CASES[command][0 if succeeds else 1]
    made = placeholders(tmp_path, emulator, tls)
    names = {name for _, name, _, _ in string.Formatter().parse(line) if name}
    argv = line.format(**{name: made[name]() for name in sorted(names)}).split()
    capsys.readouterr()

    status = main([*argv, "--json"])

    out, err = capsys.readouterr()
    [line] = out.splitlines()
    result = json.loads(line)
    assert (status == 0) is succeeds, err
    assert result["ok"] is succeeds
    if status not in (0, 1) or "error" in result:
        assert result["ok"] is False and result["error"], result


@pytest.mark.parametrize(
    "argv", [["build", "x.jsonl"], ["push", "feeds", "--concurrency", "many"], ["sync", "x.jsonl"]]
)
def test_a_wrong_command_line_answers_json_too(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script reading --json gets its answer on stdout even when the line was wrong (exit 2,
    the usage on stderr as ever)."""
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--json"])

    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and "Usage:" in err
    [line] = out.splitlines()
    result = json.loads(line)
    assert result["ok"] is False and result["error"]
