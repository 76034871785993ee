"""`fastfeed emulator` (the local appliance in the foreground until Ctrl-C) and `fastfeed demo`
(the whole job on it)."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from fastfeed.errors import ExitCode, FastfeedError

# The server (aiohttp) and trustme are imported when the emulator runs, not here: every fastfeed
# command pays for what this module imports.

HELP = """\
Run a local search appliance that speaks the GSA feeds protocol, to try `fastfeed push` (or any
feed client) without a real appliance. Like the appliance's feedergate it takes POST /xmlfeed
(multipart/form-data or urlencoded: datasource, feedtype, data) on an HTTP and an HTTPS port,
answers `Success`, and later validates and applies each feed to its index (SQLite, in
--data-dir); GET /getbacklogcount counts the feed files still waiting.

Watch it at /status (HTML, like the Feeds page) or /status.json. Script failures for tests with
POST /_emulator/faults, a JSON object or list, e.g. {"kind": "http_status", "status": 503,
"times": 2}; kinds: http_status, answer (with "body"), disk_full, slow ("seconds"),
drop_connection ("after_bytes"). POST /_emulator/settings {"feeder_paused": true} holds the
backlog; {"backlog_unsupported": true} makes /getbacklogcount answer 404.

It also receives data for Thunderstone Search Appliance profiles: POST
/texis/dowalk/recvdata.xml (profile, data) applies the items at once and answers a
ThunderstoneReplicationResult; untrusted IPs get `Not Allowed`, unknown profiles `No Profile`.

Without --cert/--key, a certificate for 127.0.0.1 and localhost is made at startup, signed by a
new test CA written to DATA_DIR/tls/ca.pem; give that file to clients (--cacert).

examples:
  fastfeed emulator --data-dir /tmp/gsa
  fastfeed push feeds/ --host 127.0.0.1 --cacert /tmp/gsa/tls/ca.pem
  curl -s http://127.0.0.1:19900/status.json
  curl -s -d '{"kind": "disk_full"}' http://127.0.0.1:19900/_emulator/faults
"""


DEMO_HELP = """\
Try fastfeed end to end on this machine, with nothing to set up: starts an emulated appliance
on 127.0.0.1 over HTTPS (with a certificate made for it), builds a small sample corpus (text
and binary documents), pushes it with certificate verification, waits for the emulated feeder
and prints what the index holds and where the feed set is kept.

example:
  fastfeed demo
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "emulator",
        help="run a local search appliance to push feeds to",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--http-port", type=int, default=19900, help="plain HTTP port (default 19900)")
    p.add_argument("--https-port", type=int, default=19902, help="HTTPS port (default 19902)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--cert", metavar="PEM", help="server certificate (chain) for HTTPS")
    p.add_argument("--key", metavar="PEM", help="its private key")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path("emulator-data"),
        help="where the received feeds, the index and the test CA go (default ./emulator-data)",
    )
    p.add_argument(
        "--trusted-ip",
        action=_Append,
        metavar="IP",
        help="accept feeds only from this client IP (repeatable); default: trust all",
    )
    p.add_argument(
        "--drain-rate",
        type=_positive,
        metavar="FILES_PER_S",
        help="feed files the feeder applies per second (default: each as soon as it arrives)",
    )
    p.add_argument(
        "--thunderstone-profile",
        action=_Append,
        metavar="NAME",
        help="a Thunderstone profile that exists at /texis/dowalk/recvdata.xml (repeatable); "
        "data for others is answered No Profile; default: every name exists",
    )
    p.set_defaults(func=run)

    d = commands.add_parser(
        "demo",
        help="try it all on a local emulated appliance",
        description=DEMO_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("--out", metavar="DIR", help="where to keep the sample feed set")
    d.add_argument("--json", action="store_true", help="print the index summary as JSON")
    d.set_defaults(func=run_demo)


class _Append(argparse._AppendAction):
    """`append` that tolerates a non-list default: config's probe for given flags sets one."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        items = getattr(namespace, self.dest, None)
        items = list(items) if isinstance(items, list) else []
        setattr(namespace, self.dest, [*items, values])


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number of files per second")
    return value


def _certificate(data_dir: Path, bind: str) -> tuple[Path, Path, Path]:
    """Makes a test CA and a server certificate; returns (CA, certificate, key) files."""
    import trustme

    directory = data_dir / "tls"
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="fastfeed emulator")
    names = ["127.0.0.1", "localhost", "::1"]
    if bind not in names and not ipaddress.ip_address(bind).is_unspecified:
        names.append(bind)
    cert = ca.issue_cert(*names)
    ca_file, cert_file, key_file = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(ca_file))
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key_file))
    return ca_file, cert_file, key_file


def run(args: argparse.Namespace) -> int:
    require_server_extra("emulator")
    from fastfeed.emulator.appliance import Emulator

    if (args.cert is None) != (args.key is None):
        raise FastfeedError("give both --cert and --key, or neither to use a generated test CA")
    try:
        ipaddress.ip_address(args.bind)
    except ValueError as exc:
        raise FastfeedError(f"--bind: {exc}") from exc
    ca_file = None
    if args.cert is None:
        ca_file, cert, key = _certificate(args.data_dir, args.bind)
    else:
        cert, key = args.cert, args.key
    emulator = Emulator(
        data_dir=args.data_dir,
        tls=(cert, key),
        host=args.bind,
        port=args.https_port,
        http_port=args.http_port,
        trusted_ips=args.trusted_ip,
        drain_per_second=args.drain_rate,
        thunderstone_profiles=args.thunderstone_profile,
    )
    try:
        emulator.start()
    except OSError as exc:
        raise FastfeedError(
            f"cannot listen on {args.bind} ports {args.http_port}/{args.https_port}: {exc.strerror}"
            " (another emulator running? choose others with --http-port/--https-port)"
        ) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"fastfeed emulator: data in {args.data_dir.resolve()}")
        print(f"  feeds over HTTP:  {emulator.http_url}/xmlfeed")
        print(f"  feeds over HTTPS: {emulator.url}/xmlfeed")
        print(f"  Thunderstone:     {emulator.url}/texis/dowalk/recvdata.xml")
        print(f"  status page:      {emulator.http_url}/status")
        if ca_file is not None:
            print(f"  test CA (give clients --cacert): {ca_file.resolve()}")
        trusted = ", ".join(args.trusted_ip) if args.trusted_ip else "all client IPs"
        print(f"  trusting {trusted}; Ctrl-C to stop")
        sys.stdout.flush()
        stop.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        emulator.stop()
    print("fastfeed emulator: stopped")
    return ExitCode.OK


def require_server_extra(command: str) -> None:
    """The emulator, the demo and the seedlist server run on aiohttp and make certificates with
    trustme: the `server` extra, which a pipeline that only builds and pushes does without."""
    try:
        import aiohttp  # noqa: F401
        import trustme  # noqa: F401
    except ImportError as exc:
        raise FastfeedError(
            f"`fastfeed {command}` needs {exc.name}, of the server extra: "
            "pip install 'fastfeed[server]'"
        ) from None


def run_demo(args: argparse.Namespace) -> int:
    require_server_extra("demo")
    from fastfeed.emulator.demo import demo

    return demo(out=args.out, as_json=args.json)
