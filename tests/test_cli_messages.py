"""What the command line says, word for word where a newcomer reads it: counts in the right
number, hints naming the options of the command at hand, suggestions for a typo, and required
options marked as such."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TLSFiles
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault

pytestmark = pytest.mark.usefixtures("clean_env")

GOOD = '{"url": "http://e.example.com/1", "content": "one"}\n'


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
    listed = [line for line in out.splitlines() if line.startswith(("  INPUT  ", "  DIR|FILE  "))]
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
