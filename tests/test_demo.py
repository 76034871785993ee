"""`fastfeed demo` as a newcomer runs it: what it prints can be copied and works."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastfeed import read_manifest
from fastfeed.cli import main


def test_demo_runs_end_to_end_into_the_directory_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["demo", "--json", "--out", str(tmp_path / "demo")])

    result = json.loads(capsys.readouterr().out)
    assert status == 0 and result["ok"]
    assert result["index"] == {"demo_wiki": 300, "demo_files": 80}
    assert result["out"] == str(tmp_path / "demo")
    for path in result["feed_sets"].values():
        assert Path(path).parent == tmp_path / "demo" / "feeds"
        assert read_manifest(path)


def test_a_second_demo_into_the_same_directory_is_refused_before_touching_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    ca = (out / "ca.pem").read_bytes()
    capsys.readouterr()

    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--out", str(out)])
    assert stopped.value.code == 2
    assert f"--out {out} is not an empty directory: give the demo a new one" in (
        capsys.readouterr().err
    )
    assert (out / "ca.pem").read_bytes() == ca  # the first demo's CA still trusts its server


def test_the_demo_leaves_the_working_directory_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again

    assert main(["demo"]) == 0

    assert list((tmp_path / "work").iterdir()) == []
    [kept] = (tmp_path / "tmp").iterdir()
    assert f"everything the demo made is in {kept}" in capsys.readouterr().out


def test_keep_running_serves_until_ctrl_c_and_its_push_hint_works(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "fastfeed", "demo", "--keep-running", "--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not lines or "Ctrl-C to stop" not in lines[-1]:
            assert time.monotonic() < deadline and demo.poll() is None, demo.communicate()
            assert demo.stdout is not None
            lines.append(demo.stdout.readline())
        status_url = next(line for line in lines if "status page:" in line).split()[-1]
        hint = next(line for line in lines if "push the sets to it" in line).split(": ", 1)[1]

        assert httpx.get(status_url, timeout=10).status_code == 200
        argv = shlex.split(hint)
        assert argv[:2] == ["fastfeed", "push"]
        pushed = subprocess.run(
            [sys.executable, "-m", "fastfeed", *argv[1:], "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert pushed.returncode == 0, pushed.stderr
        assert json.loads(pushed.stdout)["files"]["skipped"] == 5
    finally:
        demo.send_signal(signal.SIGINT)
        demo.communicate(timeout=30)
    assert demo.returncode == 0
