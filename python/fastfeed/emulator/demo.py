"""`fastfeed demo`: the whole path, build to index, on one machine with nothing to set up.

It uses the real pieces only: the emulated appliance over HTTPS with a certificate made for
127.0.0.1, the real builder, and the real uploader verifying that certificate against the
demo's own CA, so what works here is what will run against an appliance.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
import zlib
from pathlib import Path

import orjson
import trustme

from fastfeed.delivery.settings import PushSettings
from fastfeed.emulator import Emulator
from fastfeed.gsa.push import push
from fastfeed.gsa.writer import FeedWriter
from fastfeed.progress import Progress
from fastfeed.sets.records import Record

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


def demo(out: str | None = None, as_json: bool = False) -> bool:
    started = time.monotonic()
    kept = Path(out or Path("fastfeed-feeds") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    with tempfile.TemporaryDirectory(prefix="fastfeed-demo-") as scratch:
        tmp = Path(scratch)
        ca = trustme.CA(organization_name="fastfeed demo CA")
        server = ca.issue_cert("127.0.0.1", "localhost")
        ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
        server.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))

        sets = {"demo_wiki": kept / "wiki", "demo_files": kept / "files"}
        with FeedWriter(sets["demo_wiki"], "demo_wiki", "full", max_records=100) as writer:
            writer.add_batch(sample_pages(300))
        with FeedWriter(sets["demo_files"], "demo_files", "incremental", max_records=40) as files:
            files.add_batch(sample_files(80))
        built = writer.manifest + files.manifest
        say(f"built {sum(e.records for e in built)} records into {len(built)} feed files in {kept}")

        server_pem = tmp / "server.pem"
        with Emulator(data_dir=tmp / "appliance", tls=(server_pem, server_pem)) as emulator:
            say(f"emulated appliance listening on {emulator.url} (HTTPS, demo CA)")
            settings = PushSettings(
                host="127.0.0.1",
                port=emulator.port,
                cacert=str(tmp / "ca.pem"),
                backoff_base=0.2,
                backlog_interval=0.5,
            )
            summary = push(list(sets.values()), settings, progress=Progress())
            say(f"pushed: {summary.describe()}")
            emulator.wait_idle(timeout=20)
            counts = {name: len(emulator.documents(name)) for name in sets}
    result = {
        "ok": summary.ok,
        "index": counts,
        "feed_sets": {name: str(path) for name, path in sets.items()},
        "seconds": round(time.monotonic() - started, 2),
    }
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    else:
        print("the emulated index holds:")
        for name, count in counts.items():
            print(f"  {name}: {count} documents")
        print(f"feed sets kept in {kept} (push them to a real appliance with `fastfeed push`)")
    return summary.ok
