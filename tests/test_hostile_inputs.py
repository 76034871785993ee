"""Inputs that once built a short or empty feed, which pushed as a full feed empties a datasource:
pipes and devices read as empty, unreadable subtrees skipped in silence, a build reading its own
output. Each must give every record, or stop with a message naming what could not be read."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from fastfeed import read_manifest
from fastfeed.cli import main
from fastfeed.sets import inputs as inputs_module
from feeds import decode_set

DOCS = [{"url": f"http://docs.example.com/{i}", "content": f"document {i}"} for i in range(3)]
BASE = "http://f.example.com/"
DATA = b"".join(orjson.dumps(d) + b"\n" for d in DOCS)


def build_args(source: str, out: Path, *extra: str) -> list[str]:
    return [
        "build",
        source,
        "--datasource",
        "docs",
        "--feedtype",
        "full",
        "--out",
        str(out),
        *extra,
    ]


def urls(out: Path) -> list[str]:
    return sorted(f.url for f in decode_set(out))


def feed_in_background(path: str, data: bytes) -> threading.Thread:
    """Writes `data` into a FIFO or pipe path from another thread, as a shell would."""

    def write() -> None:
        with open(path, "wb") as sink:
            sink.write(data)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


@pytest.fixture
def pipe_of() -> Iterator[Callable[[bytes], str]]:
    """Makes real pipes holding given bytes, named as `<(...)` names one: /dev/fd/N."""
    opened: list[tuple[int, threading.Thread]] = []

    def make(data: bytes) -> str:
        read_end, write_end = os.pipe()

        def write() -> None:
            with os.fdopen(write_end, "wb") as sink:
                sink.write(data)

        thread = threading.Thread(target=write)
        thread.start()
        opened.append((read_end, thread))
        return f"/dev/fd/{read_end}"

    yield make
    for read_end, thread in opened:
        thread.join()
        os.close(read_end)


def test_a_pipe_as_input_gives_every_record(
    pipe_of: Callable[[bytes], str], tmp_path: Path
) -> None:
    assert main(build_args(pipe_of(DATA), tmp_path / "out")) == 0
    assert urls(tmp_path / "out") == sorted(d["url"] for d in DOCS)


def test_a_named_fifo_as_input_gives_every_record(tmp_path: Path) -> None:
    fifo = tmp_path / "docs.fifo"
    os.mkfifo(fifo)
    writer = feed_in_background(str(fifo), DATA)
    assert main(build_args(str(fifo), tmp_path / "out")) == 0
    writer.join()
    assert urls(tmp_path / "out") == sorted(d["url"] for d in DOCS)


def test_dev_stdin_as_input_gives_every_record(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastfeed", *build_args("/dev/stdin", tmp_path / "out")],
        input=DATA,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    assert urls(tmp_path / "out") == sorted(d["url"] for d in DOCS)


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_chunks_of_a_pipe_keep_every_line_and_its_number(
    pipe_of: Callable[[bytes], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ending: bytes,
) -> None:
    """Blocks far smaller than lines, and lines of every length about them: each line whole
    and in order (the longer ones through the temporary file), a refused one named by its
    number, the last one kept without its newline."""
    monkeypatch.setattr(inputs_module, "CHUNK_BYTES", 64)
    records = [
        {"url": f"http://docs.example.com/{i}", "content": "z" * (i * 37 % 300)} for i in range(40)
    ]
    lines = [orjson.dumps(r) for r in records]
    lines[25] = orjson.dumps({**records[25], "pagerank": 3})
    source = pipe_of(b"\n".join(lines) + ending)
    assert main(build_args(source, tmp_path / "out", "--on-error", "skip")) == 1
    assert (tmp_path / "out" / "rejected.log").read_text().startswith(f"{source}:26: pagerank:")
    assert [f.url for f in decode_set(tmp_path / "out")] == [
        r["url"] for i, r in enumerate(records) if i != 25
    ]


def test_groups_from_a_pipe_are_all_written(
    pipe_of: Callable[[bytes], str], tmp_path: Path
) -> None:
    groups = b"".join(
        orjson.dumps({"group": f"g{i}", "members": [{"name": "u", "scope": "user"}]}) + b"\n"
        for i in range(5)
    )
    source = pipe_of(groups)
    argv = ["groups", "build", source, "--groupsource", "ldap", "--out", str(tmp_path / "out")]
    assert main([*argv, "--feedtype", "full"]) == 0
    assert sum(e.records for e in read_manifest(tmp_path / "out")) == 5


def test_an_endless_line_from_a_device_is_refused_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bound is lowered so that the test reads 20 MB of /dev/zero, not the hard ceiling's worth.
    monkeypatch.setattr(inputs_module, "MAX_STREAMED_LINE", 20_000_000)
    assert main(build_args("/dev/zero", tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "/dev/zero:1: the line is longer than 20 MB" in err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    # --on-error skip stops on it the same way: the hint does not send the user there.
    assert "--on-error skip" not in err
    assert "Fix the input and build again" in err


def test_a_long_line_from_a_pipe_that_tmpdir_cannot_hold_names_the_line_and_tmpdir(
    tmp_path: Path,
) -> None:
    """A line longer than a block (4 MB) from a pipe waits in a temporary file: one that cannot
    be written there (a full $TMPDIR; here, files limited to 2 MB) stops the build naming the
    line, the directory, and what to do, not only the system's error."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    line = orjson.dumps({"url": "http://docs.example.com/long", "content": "x" * 10_000_000})

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))

    done = subprocess.run(
        [sys.executable, "-m", "fastfeed", *build_args("-", tmp_path / "out")],
        input=DATA + line + b"\n",
        capture_output=True,
        env={**os.environ, "TMPDIR": str(spool)},
        preexec_fn=limit_files,
    )
    assert done.returncode == 1
    err = done.stderr.decode()
    assert f"<stdin>:4: cannot hold the line in a temporary file in {spool} (File too large)" in err
    assert "set TMPDIR to a directory on a file system with room for it" in err
    assert "--on-error skip" not in err  # the disk failed, not the line: skipping cannot help
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_an_empty_pipe_makes_no_full_feed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastfeed", *build_args("/dev/stdin", tmp_path / "out")],
        input=b"",
        capture_output=True,
    )
    assert done.returncode == 1
    assert b"a full feed with no records would remove every document of 'docs'" in done.stderr
    assert b"--allow-empty-full" in done.stderr
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def unprivileged(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Runs the CLI where file permissions apply: as root, without the capabilities that
    override them (the tests run as root in CI)."""
    command = [sys.executable, "-m", "fastfeed", *argv]
    if os.geteuid() == 0:
        drop = "--bounding-set=-dac_override,-dac_read_search"
        command = ["setpriv", drop, "--", *command]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.fixture
def tree_with_a_locked_directory(tmp_path: Path) -> Iterator[Path]:
    tree = tmp_path / "tree"
    (tree / "locked").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "locked" / "b.txt").write_text("b")
    (tree / "locked").chmod(0)
    yield tree
    (tree / "locked").chmod(0o755)


def test_an_unreadable_directory_stops_the_build_naming_it(
    tree_with_a_locked_directory: Path, tmp_path: Path
) -> None:
    tree = tree_with_a_locked_directory
    done = unprivileged([*build_args(str(tree), tmp_path / "out"), "--base-url", BASE])
    assert done.returncode == 1
    assert f"{tree / 'locked'}: cannot read the directory: Permission denied" in done.stderr
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_an_unreadable_directory_is_a_rejected_entry_with_skip(
    tree_with_a_locked_directory: Path, tmp_path: Path
) -> None:
    tree = tree_with_a_locked_directory
    argv = [*build_args(str(tree), tmp_path / "out"), "--base-url", BASE]
    done = unprivileged([*argv, "--on-error", "skip"])
    assert done.returncode == 1, done.stderr
    assert urls(tmp_path / "out") == [f"{BASE}a.txt"]
    log = (tmp_path / "out" / "rejected.log").read_text()
    assert f"{tree / 'locked'}: cannot read the directory: Permission denied" in log


def test_an_unreadable_file_stops_the_build_naming_it(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a")
    (tree / "secret.txt").write_text("s")
    (tree / "secret.txt").chmod(0)
    done = unprivileged([*build_args(str(tree), tmp_path / "out"), "--base-url", BASE])
    assert done.returncode == 1
    assert str(tree / "secret.txt") in done.stderr and "Permission denied" in done.stderr
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_fifo_in_a_directory_is_refused_not_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a")
    os.mkfifo(tree / "pipe")
    assert main([*build_args(str(tree), tmp_path / "out"), "--base-url", BASE]) == 1
    assert f"{tree / 'pipe'}: not a regular file" in capsys.readouterr().err


def test_a_build_never_reads_its_own_output(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(50):
        (tree / f"{i:02}.txt").write_text(f"file {i}")
    # Small files, so that the set's first file is finished while the walk goes on.
    argv = [
        *build_args(str(tree), tree / "out"),
        "--base-url",
        BASE,
        "--max-records",
        "3",
    ]
    assert main(argv) == 0
    assert urls(tree / "out") == sorted(f"{BASE}{i:02}.txt" for i in range(50))


def test_a_non_empty_output_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_bytes(DATA)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert main(build_args(str(source), tmp_path / "out")) == 1
    assert f"{tmp_path / 'out'} is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["notes.txt"]


LOOSE = [
    ({"url": "http://docs.example.com/a\nb", "content": "x"}, "url", "control character"),
    ({"url": "http://docs.example.com:99999999/a", "content": "x"}, "url", "not one of 1 to 65535"),
    ({"url": "http://docs.example.com:0/a", "content": "x"}, "url", "not one of 1 to 65535"),
    ({"url": "http://[::1]:70000/a", "content": "x"}, "url", "not one of 1 to 65535"),
    (
        {"url": "http://docs.example.com/a", "content": "x", "mimetype": '"/><record'},
        "mimetype",
        "is not a MIME type like text/plain",
    ),
]


@pytest.mark.parametrize(("record", "field", "reason"), LOOSE)
def test_every_command_refuses_the_same_loose_values(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record: dict[str, str],
    field: str,
    reason: str,
) -> None:
    from fastfeed import LoadError
    from fastfeed.seedlist import SeedlistStore

    source = tmp_path / "docs.jsonl"
    source.write_bytes(orjson.dumps(record) + b"\n")
    assert main(build_args(str(source), tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert f"{source}:1: {field}:" in err and reason in err
    with pytest.raises(LoadError) as refused:
        SeedlistStore(tmp_path / "seedlist.db").load([record])
    assert refused.value.field == field and reason in refused.value.reason


def test_good_ports_and_mime_types_still_pass(tmp_path: Path) -> None:
    records = [
        {"url": "http://docs.example.com:8080/a", "content": "x", "mimetype": "text/plain"},
        {"url": "http://[::1]:443/b", "content": "x", "mimetype": "text/html; charset=utf-8"},
        {"url": "https://docs.example.com:/c", "content": "x"},
    ]
    source = tmp_path / "docs.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    assert main(build_args(str(source), tmp_path / "out")) == 0
    assert len(urls(tmp_path / "out")) == 3


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            b'{"url": "http://e.example.com/a", "metadata": {"k": "v1", "k": "v2"}}\n',
            "docs.jsonl:1: metadata: the name 'k' is given twice: give its values as one list",
        ),
        (
            b'\xef\xbb\xbf{"url": "http://e.example.com/a", "content": "x"}\n',
            "docs.jsonl:1: the line starts with a byte order mark",
        ),
    ],
    ids=["metadata-name-twice-refused-not-overwritten", "byte-order-mark-named-as-such"],
)
@pytest.mark.parametrize("end", [b"\n", b""], ids=["newline", "last-line-without-newline"])
def test_a_line_json_reads_loosely_is_refused_saying_why(
    line: bytes, said: str, end: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_bytes(line.rstrip(b"\n") + end)
    assert main(build_args(str(source), tmp_path / "out")) == 1
    assert said in capsys.readouterr().err


def test_a_huge_epoch_is_said_briefly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_bytes(
        b'{"url": "http://e.example.com/a", "content": "x", "last_modified": 1e300}\n'
    )
    assert main(build_args(str(source), tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "last_modified: 1e300 seconds since the epoch is out of range" in err
    assert len(err) < 400


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_a_content_path_that_never_ends_or_blocks_or_is_too_big_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "device":
        path, reason = "/dev/zero", "is not a regular file"
    elif kind == "fifo":
        path, reason = str(tmp_path / "pipe"), "is not a regular file"
        os.mkfifo(path)  # no writer: opening it to read would wait for ever
    else:
        path, reason = str(tmp_path / "sparse.bin"), "is 1000000000 bytes, more than a feed file"
        with open(path, "wb") as f:
            f.truncate(1_000_000_000)  # a gigabyte that takes no disk
    source = tmp_path / "docs.jsonl"
    source.write_bytes(
        orjson.dumps({"url": "http://e.example.com/a", "content_path": path}) + b"\n"
    )
    started = time.monotonic()
    assert main(build_args(str(source), tmp_path / "out")) == 1
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert f"{source}:1: content_path: {path} {reason}" in err


def test_an_input_truncated_during_the_build_stops_it_with_a_message_not_sigbus(
    tmp_path: Path,
) -> None:
    # About 24 MB: six chunks. The first finished feed file (the first chunk's) truncates the
    # input, while the next chunk is already being encoded and the rest is still to be mapped.
    source = tmp_path / "docs.jsonl"
    text = "y" * 3000
    with open(source, "wb") as f:
        for i in range(8000):
            f.write(orjson.dumps({"url": f"http://e.example.com/{i}", "content": text}) + b"\n")
    script = textwrap.dedent(
        f"""
        import os, sys
        import fastfeed
        source = {str(source)!r}
        def truncate(entry):
            if os.path.getsize(source) > 4096:
                os.truncate(source, 4096)
        try:
            fastfeed.build([source], {str(tmp_path / "out")!r}, "docs", max_records=500,
                           compress="never", on_file=truncate)
        except fastfeed.InputError as exc:
            print(exc)
            sys.exit(1)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1, (done.returncode, done.stderr)  # -7 was SIGBUS
    assert f"{source}: the file shrank while it was read" in done.stdout
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")] == []


def cut_in_a_record(records: int) -> tuple[bytes, int]:
    """`records` whole lines then half of the next, as `head -c` leaves a download: the bytes,
    and the number of the cut line."""
    data = b"".join(
        orjson.dumps({"url": f"http://docs.example.com/{i}", "content": "z" * 300}) + b"\n"
        for i in range(records + 1)
    )
    return data[: len(data) - 200], records + 1


@pytest.mark.parametrize("read_as", ["file", "pipe", "long line from a pipe"])
def test_an_input_cut_in_a_record_stops_the_build_even_skipping(
    pipe_of: Callable[[bytes], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    read_as: str,
) -> None:
    """Refused as a bad record, the cut line was skipped and the records before it made a
    full feed, which pushed deletes every document after the cut."""
    data, line = cut_in_a_record(5)
    if read_as == "file":
        source = str(tmp_path / "docs.jsonl")
        Path(source).write_bytes(data)
    else:
        if read_as == "long line from a pipe":
            monkeypatch.setattr(inputs_module, "CHUNK_BYTES", 64)  # its start in the spool
        source = pipe_of(data)
    assert main(build_args(source, tmp_path / "out", "--on-error", "skip")) == 1
    err = capsys.readouterr().err
    said = f"{source}:{line}: the input ends in a line that is no whole record, at byte"
    assert f"{said} {len(data)}" in err
    assert "was it cut short" in err and "--on-error skip" not in err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert not (tmp_path / "out" / "rejected.jsonl").exists()


@pytest.mark.parametrize(
    "last",
    [
        b'\xef\xbb\xbf{"url": "http://a.example.com/b1", "content": "cut here',
        b"\xef\xbb",
        b'{"url": "http://a.example.com/b1", "n": nul, "content": "ab',
        b'{"url": "http://a.example.com/b1", "content": "a\tb", "c": "d',
    ],
    ids=["after-a-byte-order-mark", "in-a-byte-order-mark", "after-a-bad-value", "after-a-tab"],
)
def test_a_cut_after_a_fault_stops_the_build_even_skipping(
    last: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken for a bad record for the fault before the cut, the line was skipped: the full
    feed of the other inputs then deleted every document of the one cut short."""
    whole, cut = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    whole.write_bytes(b'{"url": "http://a.example.com/a1", "content": "x"}\n')
    cut.write_bytes(last)
    args = build_args(str(whole), tmp_path / "out", "--on-error", "skip")
    assert main([*args, str(cut)]) == 1
    assert f"{cut}:1: the input ends in a line that is no whole record" in capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_a_cut_input_stops_the_api_builds_and_a_sync(tmp_path: Path) -> None:
    import fastfeed

    data, line = cut_in_a_record(3)
    source = tmp_path / "docs.jsonl"
    source.write_bytes(data)
    cut = f"{source}:{line}: the input ends in a line that is no whole record"
    with pytest.raises(fastfeed.InputError, match=cut) as stopped:
        fastfeed.build([str(source)], tmp_path / "a", "docs", "full", on_error="skip")
    assert not stopped.value.skippable
    with pytest.raises(fastfeed.InputError, match=cut):
        fastfeed.build_thunderstone([str(source)], tmp_path / "b", "docs", on_error="skip")
    groups = tmp_path / "groups.jsonl"
    groups.write_bytes(b'{"group": "g", "members": [{"name": "u", "scope": "user"}]}\n{"gro')
    with pytest.raises(fastfeed.InputError, match=f"{groups}:2: the input ends in a line"):
        fastfeed.build_groups([str(groups)], tmp_path / "c", "ldap", "full", on_error="skip")
    settings = fastfeed.PushSettings(host="127.0.0.1", port=9)  # never reached
    with pytest.raises(fastfeed.InputError, match=cut):
        fastfeed.sync([str(source)], tmp_path / "s.state", "docs", settings, out_dir=tmp_path / "d")
    with fastfeed.SeedlistStore(tmp_path / "s.sqlite") as store:
        from fastfeed.seedlist.inputs import read_jsonl

        with pytest.raises(fastfeed.LoadError, match=cut):
            store.load_located(read_jsonl([str(source)]))


@pytest.mark.parametrize("last", [b'{"url": "http://docs.example.com/last"}', b"  "])
def test_a_whole_last_line_needs_no_newline(tmp_path: Path, last: bytes) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_bytes(DATA + last)
    assert main(build_args(str(source), tmp_path / "out")) == 0
    assert len(urls(tmp_path / "out")) == len(DOCS) + (last.strip() != b"")


def test_a_bad_last_line_that_is_whole_is_still_a_record_to_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_bytes(DATA + b'{"url": "http://docs.example.com/x", "pagerank": 200}')
    assert main(build_args(str(source), tmp_path / "out", "--on-error", "skip")) == 1
    assert (tmp_path / "out" / "rejected.log").read_text().startswith(f"{source}:4: pagerank:")
    assert len(urls(tmp_path / "out")) == len(DOCS)
