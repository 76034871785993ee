"""`fastfeed seedlist load` and `fastfeed seedlist serve` as a user runs them."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
from conftest import TLSFiles
from fastfeed.cli import main
from test_seedlist import crawl


def write_jsonl(path: Path, *records: dict[str, object]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def test_load_reports_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.sqlite"
    first = write_jsonl(tmp_path / "a.jsonl", {"url": "http://e.example.com/1", "content": "x"})
    assert main(["seedlist", "load", str(first), "--db", str(db)]) == 0
    changes = write_jsonl(
        tmp_path / "b.jsonl",
        {"url": "http://e.example.com/1", "action": "delete"},
        {"url": "http://e.example.com/2", "content": "y"},
    )
    capsys.readouterr()

    status = main(["seedlist", "load", str(changes), str(first), "--db", str(db), "--json"])

    out, err = capsys.readouterr()
    assert status == 0
    assert orjson.loads(out) == {
        "ok": True, "inserted": 2, "updated": 0, "deleted": 1, "unchanged": 0, "dry_run": False
    }  # fmt: skip
    assert "2 inserted, 0 updated, 1 deleted" in err


def test_load_reads_standard_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = b'{"url": "http://e.example.com/1", "content": "x"}\n\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines)))

    assert main(["seedlist", "load", "-", "--db", str(tmp_path / "s.sqlite"), "--json"]) == 0

    assert orjson.loads(capsys.readouterr().out)["inserted"] == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            b'{"url": "http://e.example.com/2", "metadata": {"k": "\\u0007"}}',
            "docs.jsonl:3: metadata.k: holds U+0007",
        ),
        (b'{"url": "http://e.example.com/2", "content": "x"', "docs.jsonl:3: invalid JSON"),
        (b'["url"]', "docs.jsonl:3: expected a JSON object, got list"),
    ],
)
def test_load_names_file_line_and_field_and_keeps_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: bytes, message: str
) -> None:
    db = tmp_path / "s.sqlite"
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes(b'{"url": "http://e.example.com/1", "content": "x"}\n\n' + line + b"\n")

    status = main(["seedlist", "load", str(docs), "--db", str(db)])

    err = capsys.readouterr().err
    assert status == 1
    assert f"{tmp_path}/{message}" in err
    assert "nothing of this load was kept" in err
    from fastfeed.seedlist import SeedlistStore

    with SeedlistStore(db) as store:
        assert store.position().change == 0


def test_help_teaches_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["seedlist"], ["seedlist", "load"], ["seedlist", "serve"]):
        assert main([*command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "examples:" in out and "fastfeed seedlist" in out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--user", "crawler"], "give both --user and --password-env"),
        (["--user", "crawler", "--password-env", "FASTFEED_TEST_UNSET"], "is not set"),
        (["--cert", "c.pem"], "give both --cert and --key"),
        (["--bind", "localhost"], "--bind"),
    ],
)
def test_serve_refuses_incomplete_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    write_jsonl(tmp_path / "a.jsonl", {"url": "http://e.example.com/1"})
    db = tmp_path / "s.sqlite"
    assert main(["seedlist", "load", str(tmp_path / "a.jsonl"), "--db", str(db)]) == 0

    assert main(["seedlist", "serve", str(db), "--port", "0", *options]) == 1

    assert message in capsys.readouterr().err


def test_serve_refuses_a_missing_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.sqlite"

    assert main(["seedlist", "serve", str(missing), "--port", "0"]) == 1

    assert "load records into it first" in capsys.readouterr().err
    assert not missing.exists()


def test_serve_over_https_with_basic_auth_until_interrupted(tmp_path: Path, tls: TLSFiles) -> None:
    db = tmp_path / "s.sqlite"
    docs = write_jsonl(tmp_path / "a.jsonl", {"url": "http://e.example.com/1", "content": "hi"})
    assert main(["seedlist", "load", str(docs), "--db", str(db)]) == 0
    password = "never-in-the-output"
    process = subprocess.Popen(
        [sys.executable, "-m", "fastfeed", "seedlist", "serve", str(db), "--port", "0"]
        + ["--cert", str(tls.cert_path), "--key", str(tls.key_path)]
        + ["--user", "crawler", "--password-env", "SEEDLIST_PASSWORD"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SEEDLIST_PASSWORD": password},
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert "Ctrl-C to stop" in banner, banner
        url = banner.split(" at ")[1].split(" ")[0]
        with httpx.Client(verify=tls.client_context()) as anonymous:
            assert anonymous.get(url).status_code == 401
        with httpx.Client(verify=tls.client_context(), auth=("crawler", password)) as crawler:
            assert [e["content"] for e in crawl(crawler, url).entries] == [b"hi"]
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert password not in banner + out
    assert "stopped" in out


@pytest.mark.parametrize(
    ("extra", "warned"),
    [
        ([], "without TLS (--cert, --key) or authentication (--user)"),
        (
            ["--user", "crawler", "--password-env", "SEEDLIST_PASSWORD"],
            "without TLS (--cert, --key): ",
        ),
    ],
)
def test_serving_beyond_loopback_without_tls_or_auth_warns(
    tmp_path: Path, extra: list[str], warned: str
) -> None:
    db = tmp_path / "s.sqlite"
    docs = write_jsonl(tmp_path / "a.jsonl", {"url": "http://e.example.com/1", "content": "hi"})
    assert main(["seedlist", "load", str(docs), "--db", str(db)]) == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "fastfeed", "seedlist", "serve", str(db), "--port", "0"]
        + ["--bind", "0.0.0.0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SEEDLIST_PASSWORD": "secret"},
    )
    try:
        assert process.stdout is not None
        warning = process.stdout.readline()
        assert "warning: serving on 0.0.0.0" in warning and warned in warning, warning
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


@pytest.mark.parametrize("user", ["", " ", "a:b"])
def test_a_user_name_that_is_none_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], user: str
) -> None:
    argv = ["seedlist", "serve", str(tmp_path / "s.sqlite"), "--port", "0", "--user", user]
    assert main([*argv, "--password-env", "HOME"]) == 1
    assert "give a user name, without ':'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "line",
    [
        b'{"url": "http://e.example.com/1", "metadata": {"k": "v1", "k": "v2"}}',
        b'{"url": "http://e.example.com/1", "url": "http://e.example.com/2"}',
    ],
)
def test_a_name_given_twice_is_refused_by_load_as_by_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: bytes
) -> None:
    docs = tmp_path / "a.jsonl"
    docs.write_bytes(line + b"\n")
    assert main(["seedlist", "load", str(docs), "--db", str(tmp_path / "s.sqlite")]) == 1
    assert f"{docs}:1: the name" in capsys.readouterr().err


def test_a_snapshot_load_over_the_guard_shows_what_it_found_then_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.sqlite"
    urls = [f"http://e.example.com/{n}" for n in range(4)]
    first = write_jsonl(tmp_path / "a.jsonl", *({"url": u, "content": "x"} for u in urls))
    assert main(["seedlist", "load", str(first), "--db", str(db)]) == 0
    partial = write_jsonl(tmp_path / "b.jsonl", {"url": urls[0], "content": "x"})
    argv = ["seedlist", "load", str(partial), "--db", str(db), "--snapshot"]
    capsys.readouterr()

    assert main([*argv, "--dry-run", "--json"]) == 3
    out, err = capsys.readouterr()
    preview = err.index("would load 0 inserted, 0 updated, 3 deleted, 1 unchanged")
    assert err.index(f"deleted: {urls[1]}, {urls[2]}, {urls[3]}") < preview < err.index("refused:")
    shown = orjson.loads(out)
    assert not shown["ok"] and shown["held"] == 4 and "--allow-deletes 3" in shown["refused"]

    assert main([*argv, "--json"]) == 3
    out, err = capsys.readouterr()
    assert orjson.loads(out)["deleted"] == 3 and "refused: the snapshot would delete 3" in err
    assert main([*argv, "--allow-deletes", "75%"]) == 0
    assert "0 inserted, 0 updated, 3 deleted, 1 unchanged" in capsys.readouterr().err


def test_a_missing_snapshot_input_is_never_an_empty_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.sqlite"
    first = write_jsonl(tmp_path / "a.jsonl", {"url": "http://e.example.com/1", "content": "x"})
    assert main(["seedlist", "load", str(first), "--db", str(db)]) == 0
    missing = tmp_path / "unmounted" / "export.jsonl"

    status = main(["seedlist", "load", str(missing), "--db", str(db), "--snapshot",
                   "--allow-deletes", "1.0"])  # fmt: skip

    assert status == 1
    assert "No such file or directory; nothing was loaded" in capsys.readouterr().err
    from fastfeed.seedlist import SeedlistStore

    with SeedlistStore(db) as store:
        assert store.position().change == 1


def test_allow_deletes_goes_with_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = write_jsonl(tmp_path / "a.jsonl", {"url": "http://e.example.com/1"})
    argv = ["seedlist", "load", str(docs), "--db", str(tmp_path / "s.sqlite")]

    with pytest.raises(SystemExit) as usage:
        main([*argv, "--allow-deletes", "5"])

    assert usage.value.code == 2 and "goes with --snapshot" in capsys.readouterr().err
