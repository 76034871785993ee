"""`fastfeed demo`: the whole path, build to index, on one machine with nothing to set up.

It uses the real pieces only: the emulated appliance over HTTPS with a certificate made for
127.0.0.1, the real builder, and the real uploader verifying that certificate against the
demo's own CA, so what works here is what will run against an appliance.

Everything it makes (the feed sets, the CA, the emulator's data) goes into one directory, a new
temporary one unless --out names it, so the user's working tree is left as it was.
"""

from __future__ import annotations

import random
import shlex
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fastfeed.cli.commands import command, option
from fastfeed.cli.options import json_option
from fastfeed.cli.reports import ExitCode, emit
from fastfeed.cli.serving import require_server_extra, serve_until_stopped
from fastfeed.progress import plural

if TYPE_CHECKING:
    from fastfeed.sets.records import Record

# The emulator (aiohttp), the builder, the uploader and trustme are imported when the demo
# runs, not here: every fastfeed command pays for what this module imports.

HELP = """\
Try fastfeed end to end on this machine, with nothing to set up: starts an emulated appliance
on 127.0.0.1 over HTTPS (with a certificate made for it), builds a small sample corpus (text
and binary documents) into two feed sets, pushes them with certificate verification, waits for
the emulated feeder and prints what the index holds and where the feed sets are kept.

Everything goes into one directory (--out, default a new temporary directory, printed): the
feed sets under feeds/, the demo's CA as ca.pem, the emulator's data under appliance/.

With --keep-running, the emulated appliance stays up after the demo until Ctrl-C: the demo
prints its status page and the `fastfeed push` command that sends the sets to it, to try the
other commands against it (a push of the same sets skips what was accepted; `fastfeed replay`
sends them again).

examples:
  fastfeed demo
  fastfeed demo --out demo/ --keep-running
"""

#: The demo's feed sets: datasource, and the directory under feeds/.
SETS = {"demo_wiki": "wiki", "demo_files": "files"}


TOPICS = ("search", "feeds", "indexing", "crawling", "metadata", "security", "backups")


def sample_pages(count: int) -> list[Record]:
    rng = random.Random(7)
    return [
        {
            "url": f"http://intranet.example.com/wiki/page-{i}",
            "mimetype": "text/html",
            "content": f"<html><head><title>Page {i}</title></head><body><p>"
            + " ".join(rng.choices(TOPICS, k=40))
            + "</p></body></html>",
            "metadata": {"topic": rng.choice(TOPICS), "author": f"user{i % 13}"},
            "last_modified": 1_700_000_000 + i * 3600,
        }
        for i in range(count)
    ]


def sample_files(count: int) -> list[Record]:
    """Binary documents: some compress (zlib streams of text), some do not (random bytes)."""
    rng = random.Random(11)
    records: list[Record] = []
    for i in range(count):
        if i % 2:
            content = rng.randbytes(2048)
        else:
            content = zlib.compress((" ".join(rng.choices(TOPICS, k=400))).encode())
        records.append(
            {
                "url": f"http://files.example.com/share/file-{i}.bin",
                "mimetype": "application/octet-stream",
                "content": content,
                "metadata": {"kind": "binary", "size": str(len(content))},
            }
        )
    return records


def say(text: str) -> None:
    """Narration goes to stderr, leaving stdout to the result (`--json`)."""
    print(text, file=sys.stderr)


def push_command_line(sets: list[Path], port: int, ca: Path) -> str:
    """The command that pushes the demo's sets to its emulated appliance, to copy."""
    options = ["--host", "127.0.0.1", "--port", str(port), "--cacert", str(ca)]
    return shlex.join(["fastfeed", "push", *map(str, sets), *options])


@command("demo", help=HELP, short_help="try it all on a local emulated appliance")
@option(
    "--out",
    metavar="DIR",
    help="where the feed sets, the CA and the emulator's data go (default: a new temporary "
    "directory)",
)
@option(
    "--keep-running",
    is_flag=True,
    help="keep the emulated appliance up after the demo, until Ctrl-C",
)
@json_option("print the index summary as JSON")
def demo_command(out: str | None, keep_running: bool, as_json: bool) -> int:
    # Before anything is written into it: a second demo into the same directory would write
    # over the first one's CA, then stop on its feed sets.
    if out and Path(out).exists() and (not Path(out).is_dir() or any(Path(out).iterdir())):
        raise click.UsageError(
            f"--out {out} is not an empty directory: give the demo a new one (or none: it "
            "makes a temporary one)"
        )
    require_server_extra("demo")
    import trustme

    from fastfeed.delivery.settings import PushSettings
    from fastfeed.emulator import Emulator
    from fastfeed.gsa.push import push
    from fastfeed.gsa.writer import FeedWriter
    from fastfeed.progress import Progress

    started = time.monotonic()
    kept = Path(out) if out else Path(tempfile.mkdtemp(prefix="fastfeed-demo-"))
    sets = {name: kept / "feeds" / directory for name, directory in SETS.items()}
    ca_file, server_file = kept / "ca.pem", kept / "server.pem"
    ca = trustme.CA(organization_name="fastfeed demo CA")
    kept.mkdir(parents=True, exist_ok=True)
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(server_file)
    )

    with FeedWriter(sets["demo_wiki"], "demo_wiki", "full", max_records=100) as writer:
        writer.add_batch(sample_pages(300))
    with FeedWriter(sets["demo_files"], "demo_files", "incremental", max_records=40) as files:
        files.add_batch(sample_files(80))
    built = writer.manifest + files.manifest
    say(
        f"built {plural(sum(e.records for e in built), 'record')} into "
        f"{plural(len(built), 'feed file')} in {kept / 'feeds'}"
    )

    with Emulator(
        data_dir=kept / "appliance", tls=(server_file, server_file), http_port=0
    ) as emulator:
        say(f"emulated appliance listening on {emulator.url} (HTTPS, demo CA)")
        settings = PushSettings(
            host="127.0.0.1",
            port=emulator.port,
            cacert=str(ca_file),
            backoff_base=0.2,
            backlog_interval=0.5,
        )
        summary = push(list(sets.values()), settings, progress=Progress())
        say(f"pushed: {summary.describe()}")
        emulator.wait_idle(timeout=20)
        counts = {name: len(emulator.documents(name)) for name in sets}
        again = push_command_line(list(sets.values()), emulator.port, ca_file)
        result = {
            "ok": summary.ok,
            "index": counts,
            "out": str(kept),
            "feed_sets": {name: str(path) for name, path in sets.items()},
            "seconds": round(time.monotonic() - started, 2),
        }
        if keep_running:
            result.update(status=f"{emulator.http_url}/status", push=again)
        emit(result, as_json)
        if not as_json:
            print("the emulated index holds:")
            for name, count in counts.items():
                print(f"  {name}: {count} documents")
            print(f"everything the demo made is in {kept}")
        if keep_running:
            _keep_running(emulator.http_url, again, as_json)
        else:
            paths = shlex.join(["fastfeed", "push", *map(str, sets.values())])
            say(
                f"push the feed sets to an appliance with: {paths} --host APPLIANCE; to keep "
                "this emulated one running for more tries: fastfeed demo --keep-running"
            )
    return ExitCode.OK if summary.ok else ExitCode.FAILED


def _keep_running(status_url: str | None, again: str, as_json: bool) -> None:
    def banner() -> None:
        print(
            f"the emulated appliance keeps running; status page: {status_url}/status\n"
            f"push the sets to it (what it accepted is skipped): {again}\n"
            "Ctrl-C to stop",
            file=sys.stderr if as_json else sys.stdout,
        )
        sys.stdout.flush()

    serve_until_stopped(banner)
