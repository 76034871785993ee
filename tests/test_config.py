"""Layered settings through the real command-line parser: flags > FASTFEED_* > TOML > defaults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from fastfeed.cli import fastfeed


def parse(argv: list[str]) -> SimpleNamespace:
    """The values a command line gives its command, after every layer, as `fastfeed` would
    pass them (a usage error exits with status 2 after saying why, as `main` does)."""
    ctx = click.Context(fastfeed, info_name="fastfeed")
    command: click.Command = fastfeed
    try:
        while isinstance(command, click.Group):
            name, *argv = argv
            found = command.get_command(ctx, name)
            assert found is not None, name
            command = found
            if isinstance(command, click.Group):
                ctx = click.Context(command, info_name=name, parent=ctx)
            else:
                ctx = command.make_context(name, argv, parent=ctx)
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    return SimpleNamespace(**ctx.params)


pytestmark = pytest.mark.usefixtures("clean_env")


def test_flags_win_over_environment_which_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fastfeed.toml").write_text(
        'host = "from-file"\nconcurrency = 2\nretries = 7\n[push]\nbacklog-high = 80\n'
    )
    monkeypatch.setenv("FASTFEED_CONCURRENCY", "5")
    monkeypatch.setenv("FASTFEED_HOST", "from-env")

    args = parse(["push", "feeds/", "--host", "from-flag"])

    assert args.host == "from-flag"
    assert args.concurrency == 5
    assert args.retries == 7
    assert args.backlog_high == 80
    assert args.backlog_low == 20  # the default


def test_a_command_table_wins_over_top_level_keys(tmp_path: Path) -> None:
    (tmp_path / "fastfeed.toml").write_text(
        'host = "gsa"\nconcurrency = 2\n[replay]\nconcurrency = 1\n'
    )

    assert parse(["push", "d"]).concurrency == 2
    assert parse(["replay", "d"]).concurrency == 1


def test_build_options_come_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTFEED_MAX_BYTES", "50MB")
    monkeypatch.setenv("FASTFEED_DATASOURCE", "docs")
    monkeypatch.setenv("FASTFEED_OUT", "feeds")

    args = parse(["build", "in.jsonl"])

    assert args.max_bytes == 50_000_000
    assert (args.datasource, args.out) == ("docs", "feeds")


def test_required_options_are_still_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(["push", "feeds/"])
    assert caught.value.code == 2
    assert "--host is required" in capsys.readouterr().err


def test_booleans_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fastfeed.toml").write_text('host = "gsa"\nconcurrency = 3\n')
    monkeypatch.setenv("FASTFEED_HTTP", "yes")
    monkeypatch.setenv("FASTFEED_OVERLAP_INCREMENTAL", "0")

    args = parse(["push", "feeds/", "--concurrency", "9"])

    assert args.http is True and args.overlap_incremental is False
    assert args.concurrency == 9


def test_an_abbreviated_flag_is_refused_naming_the_flags_meant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # argparse took --conc for --concurrency; click does not guess, so that a new option can
    # never change what an old command line means. It says what was meant instead.
    with pytest.raises(SystemExit) as caught:
        parse(["push", "feeds/", "--host", "gsa", "--conc", "9"])
    assert caught.value.code == 2
    assert "'--concurrency'" in capsys.readouterr().err


def test_an_explicit_config_file(tmp_path: Path) -> None:
    settings = tmp_path / "elsewhere.toml"
    settings.write_text('[backlog]\nhost = "gsa.example.com"\nport = 19900\nhttp = true\n')

    args = parse(["backlog", "--config", str(settings)])

    assert (args.host, args.port, args.http) == ("gsa.example.com", 19900, True)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('hots = "gsa"\n', "unknown setting 'hots' (did you mean 'host'?)"),
        (
            '[push]\nhost = "gsa"\nconcurency = 2\n',
            "[push] has no setting 'concurency' (did you mean 'concurrency'?)",
        ),
        ('[psuh]\nhost = "gsa"\n', "[psuh] is not a fastfeed command"),
        ("max-byte = 10\n", "unknown setting 'max-byte' (did you mean 'max-bytes'?)"),
        (
            "[build]\nmax-byte = 10\n",
            "[build] has no setting 'max-byte' (did you mean 'max-bytes'?)",
        ),
        ('host = "gsa"\nconcurrency = "many"\n', "invalid value 'many' for --concurrency"),
        ('host = "gsa"\ninsecure = "maybe"\n', "expected true or false for --insecure"),
        (
            'host = "gsa"\n[build]\ncompress = "sometimes"\n',
            "is not one of 'auto', 'always', 'never'",
        ),
        ("host = \n", "not valid TOML"),
    ],
)
def test_mistakes_in_the_file_are_reported_with_where_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, message: str
) -> None:
    (tmp_path / "fastfeed.toml").write_text(toml)
    command = (
        ["build", "x", "--datasource", "d", "--out", "o"] if "build" in toml else ["push", "d"]
    )

    with pytest.raises(SystemExit) as caught:
        parse(command)

    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "fastfeed.toml" in err


def test_a_build_takes_a_file_that_holds_other_commands_settings_too(tmp_path: Path) -> None:
    # In a process of its own, as a user runs it: `fastfeed` imports only the command it runs,
    # and the file's keys must still be checked against every command's options.
    (tmp_path / "fastfeed.toml").write_text(
        'host = "gsa.example.com"\nconcurrency = 2\n[push]\nretries = 3\n'
        '[build]\ndatasource = "d"\n'
    )
    (tmp_path / "docs.jsonl").write_text('{"url": "http://docs.example.com/a", "content": "a"}\n')
    build = [sys.executable, "-m", "fastfeed", "build", "docs.jsonl"]

    done = subprocess.run([*build, "--out", "out"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "manifest.jsonl").is_file()

    (tmp_path / "fastfeed.toml").write_text('hots = "gsa"\n')
    done = subprocess.run([*build, "--out", "again"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "fastfeed.toml: unknown setting 'hots'" in done.stderr


def test_a_bad_environment_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FASTFEED_MAX_BYTES", "lots")

    with pytest.raises(SystemExit):
        parse(["build", "x", "--datasource", "d", "--out", "o"])

    assert "FASTFEED_MAX_BYTES" in capsys.readouterr().err


def test_actions_of_a_command_take_their_own_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fastfeed.toml").write_text(
        '[seedlist]\nbind = "0.0.0.0"\n[seedlist.load]\ndb = "docs.sqlite"\n'
        "[seedlist.serve]\nport = 9443\n"
    )
    load = parse(["seedlist", "load", "docs.jsonl"])
    assert load.db == "docs.sqlite"  # required, and satisfied by [seedlist.load]
    serve = parse(["seedlist", "serve", "docs.sqlite"])
    assert (serve.port, serve.bind) == (9443, "0.0.0.0")  # [seedlist] applies to every action
    monkeypatch.setenv("FASTFEED_PORT", "8443")
    assert parse(["seedlist", "serve", "docs.sqlite"]).port == 8443


def test_a_misspelt_action_table_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "fastfeed.toml").write_text("[seedlist.lode]\ndb = 'x'\n")
    with pytest.raises(SystemExit):
        parse(["seedlist", "load", "docs.jsonl", "--db", "x"])
    assert "[seedlist.lode] is not a fastfeed command" in capsys.readouterr().err


def test_lists_come_comma_separated_from_the_environment_and_as_toml_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTFEED_TRUSTED_IP", "192.0.2.1,192.0.2.2")
    (tmp_path / "fastfeed.toml").write_text('[emulator]\nthunderstone-profile = ["a", "b"]\n')

    args = parse(["emulator"])

    assert args.trusted_ip == ("192.0.2.1", "192.0.2.2")
    assert args.thunderstone_profile == ("a", "b")
    assert parse(["emulator", "--trusted-ip", "192.0.2.9"]).trusted_ip == ("192.0.2.9",)


def test_every_push_setting_has_its_option() -> None:
    # The push commands hand their options to PushSettings by name: a field renamed on one side
    # only would silently lose its option.
    from dataclasses import fields

    from fastfeed import PushSettings

    push = fastfeed.get_command(click.Context(fastfeed), "push")
    assert push is not None
    options = {p.name for p in push.params}
    internal = {"https", "chunk_size"}  # --http says the first; the second is not a setting
    assert {f.name for f in fields(PushSettings)} - internal <= options


def test_run_takes_the_options_of_build_and_push() -> None:
    def names(*path: str) -> set[str | None]:
        command: click.Command | None = fastfeed
        for word in path:
            assert isinstance(command, click.Group)
            command = command.get_command(click.Context(command), word)
        assert command is not None
        return {p.name for p in command.params}

    # run writes GSA feeds into its own --out; it prints push's JSON summary.
    build_only = {"format_", "profile"}
    assert names("build") - build_only <= names("run")
    # --groupsource names that of lone groups files, which run never pushes.
    assert names("push") - {"paths", "groupsource"} <= names("run")
