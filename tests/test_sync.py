"""`fastfeed sync` against the emulator over HTTPS: the index equals each snapshot, only the
difference is sent, a killed sync loses nothing, and mass deletes take the user's word."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastfeed import InputError, MassDelete, PushSettings, SettingsError, StateError, sync
from fastfeed.cli import main
from fastfeed.emulator import Emulator, Fault
from fastfeed.sets.journal import JOURNAL
from fastfeed.sets.state import SyncState

Settings = Callable[..., PushSettings]

pytestmark = pytest.mark.usefixtures("clean_env")


def doc(n: int, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "url": f"http://docs.example.com/{n}",
        "content": f"document {n}",
        "metadata": {"team": "eng", "n": str(n)},
        "acl": {"principals": [{"name": "alice", "scope": "user", "access": "permit"}]},
    }
    record.update(fields)
    return record


def write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


def received(emulator: Emulator) -> int:
    """Records the emulator has received, across every push."""
    emulator.wait_idle()
    return sum(p.records for p in emulator.pushes())


def index(emulator: Emulator) -> dict[str, tuple[bytes | None, list[tuple[str, str]]]]:
    emulator.wait_idle()
    return {u: (d.content, sorted(d.metadata)) for u, d in emulator.documents("docs").items()}


def expected(
    records: list[dict[str, Any]],
) -> dict[str, tuple[bytes | None, list[tuple[str, str]]]]:
    return {r["url"]: (r["content"].encode(), sorted(r["metadata"].items())) for r in records}


def test_a_second_sync_sends_only_the_difference_and_the_index_equals_the_snapshot(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    first = [doc(n) for n in range(20)]
    summary = sync([write(tmp_path / "a.jsonl", first)], state, "docs", push_settings(emulator),
                   out_dir=tmp_path / "s1")  # fmt: skip
    assert summary.ok and summary.diff.new == 20 and received(emulator) == 20
    assert index(emulator) == expected(first)

    second = [doc(n) for n in range(20) if n not in (3, 4)]  # 2 deleted
    second[0]["content"] = "changed content"  # content
    second[1]["metadata"]["team"] = "ops"  # one metadata value
    acl = second[2]["acl"]["principals"]
    acl.append({"name": "bob", "scope": "user", "access": "permit"})  # one ACL principal
    second += [doc(n) for n in (20, 21, 22)]  # 3 new
    summary = sync([write(tmp_path / "b.jsonl", second)], state, "docs", push_settings(emulator),
                   out_dir=tmp_path / "s2")  # fmt: skip

    d = summary.diff
    assert (d.new, d.changed, d.deleted, d.unchanged) == (3, 3, 2, 15)
    assert received(emulator) == 20 + 3 + 3 + 2  # only the difference was sent
    assert index(emulator) == expected(second)
    principals = emulator.acls("docs")[second[2]["url"]].principals
    assert sorted(p.name for p in principals) == ["alice", "bob"]
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        assert st.count() == 21 and st.pending_set is None and st.last_sync is not None


def test_an_unchanged_snapshot_sends_nothing_whatever_its_order(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n, last_modified="2024-06-01T00:00:00Z") for n in range(10)]
    sync([write(tmp_path / "a.jsonl", records)], state, "docs", push_settings(emulator),
         out_dir=tmp_path / "s1")  # fmt: skip
    # The same records, in another order, with their JSON keys and metadata names reordered
    # and the date given as seconds since the epoch.
    shuffled = [
        dict(reversed(list({**r, "metadata": dict(reversed(list(r["metadata"].items()))),
                            "last_modified": 1717200000}.items())))
        for r in reversed(records)
    ]  # fmt: skip
    summary = sync([write(tmp_path / "b.jsonl", shuffled)], state, "docs",
                   push_settings(emulator), out_dir=tmp_path / "s2")  # fmt: skip

    assert summary.pushed is None and summary.diff.unchanged == 10
    assert received(emulator) == 10
    assert not (tmp_path / "s2").exists()


@pytest.mark.parametrize("kept", [0, 5])
def test_a_snapshot_that_deletes_much_is_refused_unless_allowed(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, kept: int
) -> None:
    state = tmp_path / "docs.state"
    sync([write(tmp_path / "a.jsonl", [doc(n) for n in range(10)])], state, "docs",
         push_settings(emulator), out_dir=tmp_path / "s1")  # fmt: skip
    smaller = write(tmp_path / "b.jsonl", [doc(n) for n in range(kept)])

    with pytest.raises(MassDelete) as refused:
        sync([smaller], state, "docs", push_settings(emulator), out_dir=tmp_path / "s2")
    assert (refused.value.deleted, refused.value.held) == (10 - kept, 10)
    assert f"{10 - kept:,} of the 10 documents" in str(refused.value)
    assert received(emulator) == 10 and not (tmp_path / "s2").exists()

    summary = sync([smaller], state, "docs", push_settings(emulator), out_dir=tmp_path / "s3",
                   allow_deletes=10 - kept)  # fmt: skip
    assert summary.ok and set(index(emulator)) == {doc(n)["url"] for n in range(kept)}


def test_a_push_that_fails_leaves_the_state_at_what_the_appliance_accepted(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(30)]
    settings = push_settings(emulator, retries=1)
    # A 503 and a disk full are retried: every file gets through.
    emulator.add_fault(Fault(kind="http_status", status=503, times=1))
    emulator.add_fault(Fault.disk_full())
    first = sync([write(tmp_path / "a.jsonl", records)], state, "docs", settings,
                 out_dir=tmp_path / "s1", max_records=10)  # fmt: skip
    assert first.ok and received(emulator) == 30
    old = {url: fp for url, fp in _fingerprints(state, emulator, records).items()}

    # Two changed records in two files; the first file's connection drops at every attempt.
    records[5]["content"] = "new"
    records[25]["content"] = "new"
    emulator.add_fault(Fault(kind="drop_connection", after_bytes=10, times=2))
    changed = write(tmp_path / "b.jsonl", records)
    second = sync([changed], state, "docs", settings, out_dir=tmp_path / "s2", max_records=1)

    assert not second.ok
    assert index(emulator)[records[5]["url"]][0] == b"document 5"  # never arrived
    assert _fingerprints(state, emulator, records) == old  # nor recorded as held
    emulator.clear_faults()
    third = sync([changed], state, "docs", settings, out_dir=tmp_path / "s3")
    assert third.ok and third.resumed == 2 and third.pushed is None
    assert index(emulator) == expected(records)


def _fingerprints(state: Path, emulator: Emulator, records: list[dict[str, Any]]) -> dict[str, Any]:
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        return {r["url"]: st.fingerprint(r["url"])[0] for r in records}  # type: ignore[index]


#: The command line in a process of its own (one to kill).
_CLI = [sys.executable, "-c", "import sys; from fastfeed.cli import main; sys.exit(main())"]


def _child_sync(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*_CLI, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _rerun(argv: list[str], cwd: Path) -> dict[str, Any]:
    """Runs a sync to its end, as a user would after the kill; returns its --json summary."""
    done = subprocess.run([*_CLI, *argv, "--json"], cwd=cwd, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("when", "kind"),
    [
        ("reading", "jsonl"),
        ("sending the first file", "jsonl"),
        ("after some files", "jsonl"),
        # A table's rows are read in place, never copied: the re-run reads the file again.
        ("sending the first file", "parquet"),
        ("after some files", "parquet"),
    ],
)
def test_a_sync_killed_at_any_point_loses_nothing(
    make_emulator: Callable[..., Emulator], tls: Any, tmp_path: Path, when: str, kind: str
) -> None:
    emulator = make_emulator()
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(12)]
    src = write(tmp_path / "a.jsonl", records)
    if kind == "parquet":
        src = str(tmp_path / "a.parquet")
        pq.write_table(pa.Table.from_pylist(records), src)
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    given = str(fifo) if when == "reading" else src
    argv = ["sync", given, "--datasource", "docs", "--state", str(state), "--host", "127.0.0.1",
            "--port", str(emulator.port), "--cacert", str(tls.ca_path), "--max-records", "1",
            "--out", str(tmp_path / "s1")]  # fmt: skip
    # Each answer takes 0.3 s, so that the sync can be caught sending.
    emulator.add_fault(Fault(kind="slow", seconds=0.3, times=100))
    child = _child_sync(argv, tmp_path)
    journal = tmp_path / "s1" / JOURNAL
    manifest = tmp_path / "s1" / "manifest.jsonl"

    def reached() -> bool:
        if when == "reading":
            return any(tmp_path.glob(".docs.state.sync-*/input-0.jsonl"))
        if when == "sending the first file":
            return manifest.exists()
        return journal.exists() and journal.read_bytes().count(b"\n") >= 3

    with contextlib.ExitStack() as stack:
        if when == "reading":  # half the export written, the rest never comes
            export = stack.enter_context(open(fifo, "wb"))
            export.write(Path(src).read_bytes()[:700])
            export.flush()
        deadline = time.monotonic() + 30
        while not reached() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    emulator.clear_faults()

    again = [src if a == given else a for a in argv[:-2]]
    summary = _rerun([*again, "--out", str(tmp_path / "s2")], tmp_path)
    assert index(emulator) == expected(records)
    if when == "reading":  # nothing was sent: everything is new
        assert summary["resumed"] == 0 and summary["new"] == 12
        assert received(emulator) == 12
        assert not list(tmp_path.glob(".docs.state.sync-*"))  # the killed one's work is gone
    else:  # the interrupted set is finished first, then nothing is left to send
        assert summary["resumed"] > 0 and summary["new"] == 0 and summary["unchanged"] == 12
        # Only the file in flight when killed may have been sent twice.
        assert received(emulator) <= 12 + 1


def test_the_command_line_dry_run_shows_what_would_be_sent(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "a.jsonl", [doc(n) for n in range(4)])
    argv = ["sync", src, "--datasource", "docs", "--state", str(tmp_path / "docs.state"),
            "--host", "127.0.0.1", "--port", str(emulator.port), "--cacert",
            str(tls.ca_path)]  # fmt: skip

    assert main([*argv, "--dry-run", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["new"] == 4 and "would send 4 new" in err
    assert "http://docs.example.com/0" in err  # examples
    assert received(emulator) == 0

    assert main(argv) == 0
    with pytest.raises(SystemExit) as usage:
        main([*argv[:4], *argv[6:]])
    assert usage.value.code == 2 and "--state is required" in capsys.readouterr().err
    empty = write(tmp_path / "empty.jsonl", [])
    assert main(["sync", empty, *argv[2:]]) == 3
    assert "--allow-deletes" in capsys.readouterr().err


def test_directories_and_standard_input_are_snapshots_too(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = tmp_path / "share"
    (share / "sub").mkdir(parents=True)
    for name, text in [("a.txt", "alpha"), ("sub/b.txt", "beta"), ("c.txt", "gamma")]:
        (share / name).write_text(text)
    state = tmp_path / "share.state"
    settings = push_settings(emulator)
    base = "http://files.example.com/share/"

    def run(out: str) -> Any:
        return sync([str(share)], state, "docs", settings, base_url=base, out_dir=tmp_path / out,
                    allow_deletes=1)  # fmt: skip

    assert run("s1").diff.new == 3
    (share / "c.txt").unlink()
    (share / "a.txt").write_text("alpha, changed")
    d = run("s2").diff
    assert (d.new, d.changed, d.deleted, d.unchanged) == (0, 1, 1, 1)
    assert {u: c.content for u, c in emulator.documents("docs").items()} == {
        base + "a.txt": b"alpha, changed",
        base + "sub/b.txt": b"beta",
    }

    # A state inside the directory would be read as a document of it.
    with pytest.raises(SettingsError, match="inside the directory"):
        sync([str(share)], share / "in.state", "docs", settings, base_url=base)

    # Standard input, read twice: the records to send are read again from a copy.
    records = [doc(n) for n in range(3)]
    stdin = tmp_path / "stdin.jsonl"
    write(stdin, records)
    with stdin.open("rb") as f:
        monkeypatch.setattr("sys.stdin", type("In", (), {"buffer": f})())
        summary = sync(["-"], tmp_path / "in.state", "other", settings, out_dir=tmp_path / "s3")
    assert summary.ok and summary.diff.new == 3
    emulator.wait_idle()
    assert len(emulator.documents("other")) == 3


def test_a_url_twice_in_a_snapshot_is_refused_naming_both_lines(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    src = write(tmp_path / "a.jsonl", [doc(1), doc(2), doc(1, content="again")])
    with pytest.raises(InputError) as refused:
        sync([src], tmp_path / "s.state", "docs", push_settings(emulator), out_dir=tmp_path / "o")
    assert refused.value.location == f"{src}:3"
    assert f"{src}:1" in str(refused.value)
    assert received(emulator) == 0


def test_a_refused_record_stops_the_sync_naming_where_it_was_given(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "s.state"
    src = write(tmp_path / "a.jsonl", [doc(1), doc(2, pagerank=5)])
    # The pagerank range is a rule of the feed, checked when the feed is built.
    with pytest.raises(InputError) as refused:
        sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "o")
    assert refused.value.location == f"{src}:2" and "pagerank" in str(refused.value)
    assert received(emulator) == 0
    with SyncState(state, f"127.0.0.1:{emulator.port} datasource docs") as st:
        assert st.count() == 0 and st.pending_set is None


def test_the_state_command_shows_exports_and_forgets(
    emulator: Emulator, push_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "docs.state"
    records = [doc(n) for n in range(3)]
    src = write(tmp_path / "a.jsonl", records)
    sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s1")
    url = records[0]["url"]

    assert main(["state", "show", str(state), "--url", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["documents"] == 3 and shown["target"].endswith("datasource docs")
    assert len(shown["urls"][url]["fingerprint"]) == 32 and shown["pending_set"] is None
    assert main(["state", "export", str(state)]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(e["url"] for e in exported) == sorted(r["url"] for r in records)

    assert main(["state", "forget", str(state), "--url", url]) == 0
    again = sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s2")
    assert (again.diff.new, again.diff.unchanged) == (1, 2)

    # Not a state: said so, and left alone.
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    assert main(["state", "show", str(other)]) == 1
    assert "not a sync state" in capsys.readouterr().err


def test_a_thunderstone_profile_is_kept_equal_to_the_snapshot(
    emulator: Emulator, tls: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{emulator.url}/texis/dowalk/recvdata.xml"
    state = tmp_path / "news.state"
    records = [{"url": f"http://news.example.com/{n}", "content": f"story {n}"} for n in range(6)]

    def run(src: str, out: str, *more: str) -> dict[str, Any]:
        argv = ["thunderstone", "sync", src, "--profile", "news", "--state", str(state),
                "--url", url, "--cacert", str(tls.ca_path), "--out", str(tmp_path / out),
                "--json", *more]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]

    assert run(write(tmp_path / "a.jsonl", records), "s1")["new"] == 6
    records[0]["content"] = "story 0, updated"
    del records[5]
    second = run(write(tmp_path / "b.jsonl", records), "s2", "--allow-deletes", "1")
    assert (second["changed"], second["deleted"], second["unchanged"]) == (1, 1, 4)
    assert second["push"]["records"] == 2  # the difference only
    held = emulator.thunderstone_documents("news")
    assert sorted(held) == sorted(r["url"] for r in records)
    assert held[records[0]["url"]].fields["Body"] == "story 0, updated"


def test_a_snapshot_holds_no_deletes(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    src = write(tmp_path / "a.jsonl", [doc(1), {"url": doc(2)["url"], "action": "delete"}])
    with pytest.raises(InputError) as refused:
        sync([src], tmp_path / "s.state", "docs", push_settings(emulator), out_dir=tmp_path / "o")
    assert refused.value.location == f"{src}:2" and "no deletes" in str(refused.value)


def test_a_state_serves_one_appliance_and_datasource(
    emulator: Emulator, push_settings: Settings, tmp_path: Path
) -> None:
    state = tmp_path / "docs.state"
    src = write(tmp_path / "a.jsonl", [doc(1)])
    sync([src], state, "docs", push_settings(emulator), out_dir=tmp_path / "s1")
    with pytest.raises(StateError, match="is the state of 127.0.0.1:.* datasource docs"):
        sync([src], state, "other", push_settings(emulator), out_dir=tmp_path / "s2")
    assert received(emulator) == 1


def test_ctrl_c_during_a_sync_says_how_to_finish_it(
    make_emulator: Callable[..., Emulator], tls: Any, tmp_path: Path
) -> None:
    emulator = make_emulator()
    records = [doc(n) for n in range(6)]
    argv = ["sync", write(tmp_path / "a.jsonl", records), "--datasource", "docs", "--state",
            str(tmp_path / "docs.state"), "--host", "127.0.0.1", "--port", str(emulator.port),
            "--cacert", str(tls.ca_path), "--max-records", "1"]  # fmt: skip
    emulator.add_fault(Fault(kind="slow", seconds=0.3, times=100))
    child = _child_sync([*argv, "--out", str(tmp_path / "s1")], tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "s1" / JOURNAL).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 130
    assert b"run the same sync again" in err
    emulator.clear_faults()

    assert main([*argv, "--out", str(tmp_path / "s2")]) == 0
    assert index(emulator) == expected(records)
