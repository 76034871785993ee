"""`fastfeed emulator`: the local appliance in the foreground until Ctrl-C."""

from __future__ import annotations

import ipaddress
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from fastfeed.cli.commands import command, option
from fastfeed.cli.reports import ExitCode
from fastfeed.cli.serving import require_server_extra, serve_until_stopped
from fastfeed.errors import FastfeedError

# The server (aiohttp) and trustme are imported when the emulator runs, not here: every fastfeed
# command pays for what this module imports.

HELP = """\
Run a local search appliance that speaks the GSA feeds protocol, to try `fastfeed push` (or any
feed client) without a real appliance. Like the appliance's feedergate it takes POST /xmlfeed
(multipart/form-data or urlencoded: datasource, feedtype, data) on an HTTP and an HTTPS port,
answers `Success`, and later validates and applies each feed to its index (SQLite, in
--data-dir); GET /getbacklogcount counts the feed files still waiting.

Watch it at /status (HTML, like the Feeds page; it refreshes itself) or /status.json. It logs
one line per request and per applied or failed feed to stderr (not the status page's own
refreshes).

Script failures for tests with POST /_emulator/faults, a JSON object or list, e.g.
{"kind": "http_status", "status": 503, "times": 2}; kinds: http_status, answer (with "body"),
disk_full, slow ("seconds"), drop_connection ("after_bytes"), fail_in_feeder (accepted, then
failed by the feeder, as its feed log tells). POST /_emulator/settings
{"feeder_paused": true} holds the backlog; {"backlog_unsupported": true} makes
/getbacklogcount answer 404.

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


@command("emulator", help=HELP, short_help="run a local search appliance to push feeds to")
@option(
    "--http-port",
    type=click.IntRange(0, 65535),
    default=19900,
    help="plain HTTP port (default 19900)",
)
@option(
    "--https-port", type=click.IntRange(0, 65535), default=19902, help="HTTPS port (default 19902)"
)
@option("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
@option("--cert", metavar="PEM", help="server certificate (chain) for HTTPS")
@option("--key", metavar="PEM", help="its private key")
@option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path("emulator-data"),
    help="where the received feeds, the index and the test CA go (default ./emulator-data)",
)
@option(
    "--trusted-ip",
    multiple=True,
    metavar="IP",
    help="accept feeds only from this client IP (repeatable); default: trust all",
)
@option(
    "--drain-rate",
    type=click.FloatRange(0, min_open=True),
    metavar="FILES_PER_S",
    help="feed files the feeder applies per second (default: each as soon as it arrives)",
)
@option(
    "--thunderstone-profile",
    multiple=True,
    metavar="NAME",
    help="a Thunderstone profile that exists at /texis/dowalk/recvdata.xml (repeatable); "
    "data for others is answered No Profile; default: every name exists",
)
def emulator_command(
    http_port: int,
    https_port: int,
    bind: str,
    cert: str | None,
    key: str | None,
    data_dir: Path,
    trusted_ip: tuple[str, ...],
    drain_rate: float | None,
    thunderstone_profile: tuple[str, ...],
) -> int:
    require_server_extra("emulator")
    from fastfeed.emulator.appliance import Emulator

    if (cert is None) != (key is None):
        raise FastfeedError("give both --cert and --key, or neither to use a generated test CA")
    try:
        ipaddress.ip_address(bind)
    except ValueError as exc:
        raise FastfeedError(f"--bind: {exc}") from exc
    ca_file = None
    if cert is None or key is None:
        ca_file, cert_file, key_file = _certificate(data_dir, bind)
    else:
        cert_file, key_file = Path(cert), Path(key)
    emulator = Emulator(
        data_dir=data_dir,
        tls=(cert_file, key_file),
        host=bind,
        port=https_port,
        http_port=http_port,
        trusted_ips=list(trusted_ip) or None,
        drain_per_second=drain_rate,
        thunderstone_profiles=list(thunderstone_profile) or None,
    )

    def banner() -> None:
        print(f"fastfeed emulator: data in {data_dir.resolve()}")
        print(f"  feeds over HTTP:  {emulator.http_url}/xmlfeed")
        print(f"  feeds over HTTPS: {emulator.url}/xmlfeed")
        print(f"  Thunderstone:     {emulator.url}/texis/dowalk/recvdata.xml")
        print(f"  status page:      {emulator.http_url}/status")
        if ca_file is not None:
            print(f"  test CA (give clients --cacert): {ca_file.resolve()}")
        trusted = ", ".join(trusted_ip) if trusted_ip else "all client IPs"
        print(f"  trusting {trusted}; Ctrl-C to stop")
        sys.stdout.flush()

    # Logging from the start: feeds left in the backlog by an earlier run apply at once.
    with _log_to_stderr():
        try:
            emulator.start()
        except OSError as exc:
            raise FastfeedError(
                f"cannot listen on {bind} ports {http_port}/{https_port}: {exc.strerror}"
                " (another emulator running? choose others with --http-port/--https-port)"
            ) from exc
        try:
            serve_until_stopped(banner)
        finally:
            emulator.stop()
    print("fastfeed emulator: stopped")
    return ExitCode.OK


@contextmanager
def _log_to_stderr() -> Iterator[None]:
    """The emulator's log (quiet in the Python API) on stderr, in UTC as the status page."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    logger = logging.getLogger("fastfeed.emulator")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


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
