"""`fastfeed seedlist load` and `fastfeed seedlist serve`."""

from __future__ import annotations

import ipaddress
import os
import sys

import click

from fastfeed.cli.commands import group, option
from fastfeed.cli.options import allow_deletes_option, json_option, paths_argument
from fastfeed.cli.reports import ExitCode, emit, failed, mass_delete
from fastfeed.cli.serving import require_server_extra, serve_until_stopped
from fastfeed.errors import FastfeedError

# The store, the server (aiohttp) and lxml are imported by the commands that use them, not here:
# every fastfeed command pays for what this module imports.

HELP = """\
Serve documents as IBM Connections seedlists: Atom feeds (with the wplc extension) that a
search crawler pulls page by page, then pulls again for what changed since.

  load   put JSON Lines records into a seedlist state file (SQLite); run it again with new
         or changed records, or `"action": "delete"` ones, or the whole source (--snapshot):
         each change is numbered so that the next incremental crawl reports it
  serve  answer crawlers over HTTP(S) from that file

examples:
  fastfeed seedlist load docs.jsonl --db docs.sqlite
  fastfeed seedlist serve docs.sqlite --port 9443 --cert cert.pem --key key.pem \\
      --user crawler --password-env SEEDLIST_PASSWORD
  # the crawler starts at https://HOST:9443/seedlist/myserver
"""

LOAD_HELP = """\
Load JSON Lines records (the schema of `fastfeed build`, see the README) into a seedlist state
file, created if missing. A record whose URL is new is inserted; one that differs from the
stored document updates it; an identical one changes nothing (the crawler is not sent it
again); `"action": "delete"` deletes the document and keeps a tombstone, so that incremental
crawls report the deletion. Content (content, content_base64 or content_path, read now) is
stored and served byte for byte.

A document changes when its fingerprint does: the one `fastfeed sync` compares records by, of
the document as the seedlist serves it. Reordering JSON keys or metadata names, respelling a
date, or fields a seedlist has no place for (pagerank, lock...) change nothing.

Each load is one transaction: a refused record (reported as file:line: field: reason) leaves
the state file as it was. Refused besides what `fastfeed build` refuses: text XML 1.0 cannot
carry in URLs, titles or metadata (a seedlist has no base64 form for them), ACLs with deny
principals or inherit_from, and ACLs without principals (a seedlist entry without wplc:acl
is public).

With --snapshot, INPUT is the WHOLE source as it is now (each URL once, no deletes): the
documents the state file holds that it lacks are deleted, and crawlers are told. Deleting much
takes your word, as for `fastfeed sync`: a snapshot that would delete more than 10% of the
documents, or an empty one, is refused before anything is kept (status 3), naming the counts.
--allow-deletes lets it through: a number of documents (500), or a share (0.5 or 50%).
--dry-run says what a load would change, and whether it would be refused, and keeps nothing.

examples:
  fastfeed seedlist load docs.jsonl --db docs.sqlite
  cat changes.jsonl | fastfeed seedlist load - --db docs.sqlite --json
  nightly-export | fastfeed seedlist load - --db docs.sqlite --snapshot
  fastfeed seedlist load export.jsonl --db docs.sqlite --snapshot --dry-run

exit status: 0 loaded, 1 a record or input refused (nothing kept), 2 bad command line,
3 a snapshot refused for deleting too much (nothing kept).
"""

SERVE_HELP = """\
Serve a seedlist state file to crawlers. The first page is /seedlist/myserver (parameters:
Range, page size, default 100, at most 1000; Timestamp, the wplc:timestamp of the last page
of the previous crawl, to get only what changed since). Each page links to the next with
rel="next" (Range, Start, State); the last page carries wplc:timestamp. Binary and long text
content is served at the atom:content src URL, /seedlist/content/ID. Loading records while
serving is fine: a crawl reports what was loaded when it began, the next one the rest.

Malformed Range, Start, State or Timestamp values are answered 400 with a message; stale ones
(from another or a recreated state file, newer than a restored backup, or older than purged
deletions) 410: crawl again without Timestamp.

examples:
  fastfeed seedlist serve docs.sqlite --port 8080
  SEEDLIST_PASSWORD=s3cret fastfeed seedlist serve docs.sqlite --port 9443 \\
      --bind 0.0.0.0 --cert cert.pem --key key.pem --user crawler \\
      --password-env SEEDLIST_PASSWORD
  curl -u crawler:s3cret --cacert ca.pem 'https://localhost:9443/seedlist/myserver?Range=500'
"""


@group(
    "seedlist", help=HELP, short_help="serve documents as IBM Connections seedlists for crawlers"
)
def seedlist() -> None:
    pass


@seedlist.command("load", help=LOAD_HELP, short_help="load records into a state file")
@paths_argument("inputs", "INPUT", "JSON Lines file or - (stdin)")
@option("--db", required=True, metavar="STATE", help="the state file (SQLite)")
@option(
    "--snapshot",
    is_flag=True,
    help="INPUT is the whole source: delete the documents it lacks (guarded by --allow-deletes)",
)
@allow_deletes_option()
@option("--dry-run", is_flag=True, help="say what the load would change; change nothing")
@json_option()
def load_command(
    inputs: tuple[str, ...],
    db: str,
    snapshot: bool,
    allow_deletes: float | int | None,
    dry_run: bool,
    as_json: bool,
) -> int:
    from fastfeed.errors import MassDelete
    from fastfeed.seedlist import LoadError, SeedlistStore
    from fastfeed.seedlist.inputs import read_jsonl

    if allow_deletes is not None and not snapshot:
        raise click.UsageError("--allow-deletes goes with --snapshot: only a snapshot deletes")
    with SeedlistStore(db) as store:
        try:
            summary = store.load_located(
                read_jsonl(inputs),
                snapshot=snapshot,
                allow_deletes=allow_deletes,
                dry_run=dry_run,
            )
        except LoadError as exc:
            hint = f"nothing of this load was kept in {db}; fix the record and load again"
            return failed("seedlist load", str(exc), as_json, hint=hint)
        except MassDelete as exc:
            return mass_delete("seedlist load", exc, as_json)
    for kind, urls in summary.examples.items():
        if urls:
            print(f"  {kind}: {', '.join(urls)}", file=sys.stderr)
    print(f"fastfeed seedlist load: {db}: {summary.describe()}", file=sys.stderr)
    emit(summary.to_dict(), as_json)
    if summary.refused:
        print(f"fastfeed seedlist load: refused: {summary.refused}", file=sys.stderr)
        return ExitCode.REFUSED
    return ExitCode.OK


def _credentials(user: str | None, password_env: str | None) -> tuple[str, str] | None:
    if user is None and password_env is None:
        return None
    if user is None or password_env is None:
        raise FastfeedError("give both --user and --password-env, or neither (no authentication)")
    if not user.strip() or ":" in user:
        # Basic authentication sends "user:password": a colon would end the user name.
        raise FastfeedError(f"--user {user!r}: give a user name, without ':'")
    password = os.environ.get(password_env)
    if not password:
        raise FastfeedError(
            f"--password-env: the variable {password_env} is not set or empty; set it to "
            f"{user}'s password"
        )
    return user, password


@seedlist.command("serve", help=SERVE_HELP, short_help="serve a state file to crawlers")
@click.argument("state", metavar="STATE", help="a state file made by seedlist load")
@option(
    "--port", type=click.IntRange(0, 65535), required=True, help="port to listen on (0: any free)"
)
@option("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
@option("--cert", metavar="PEM", help="server certificate (chain): serve HTTPS")
@option("--key", metavar="PEM", help="its private key")
@option("--user", help="require HTTP basic authentication as this user")
@option(
    "--password-env",
    metavar="VAR",
    help="environment variable holding --user's password (never on the command line)",
)
def serve_command(
    state: str,
    port: int,
    bind: str,
    cert: str | None,
    key: str | None,
    user: str | None,
    password_env: str | None,
) -> int:
    require_server_extra("seedlist serve")
    from fastfeed.seedlist.server import SeedlistServer

    if (cert is None) != (key is None):
        raise FastfeedError("give both --cert and --key for HTTPS, or neither for plain HTTP")
    try:
        address = ipaddress.ip_address(bind)
    except ValueError as exc:
        raise FastfeedError(f"--bind: {exc}") from exc
    credentials = _credentials(user, password_env)
    protections = (("TLS (--cert, --key)", cert), ("authentication (--user)", credentials))
    missing = [what for what, given in protections if not given]
    if not address.is_loopback and missing:
        print(
            f"fastfeed seedlist serve: warning: serving on {bind}, reachable from other "
            f"machines, without {' or '.join(missing)}: anyone who reaches it can read every "
            "document (and passwords would cross the network in clear)",
            file=sys.stderr,
        )
    server = SeedlistServer(
        state,
        host=bind,
        port=port,
        tls=None if cert is None or key is None else (cert, key),
        credentials=credentials,
    )
    try:
        server.start()
    except OSError as exc:
        raise FastfeedError(f"cannot serve on {bind} port {port}: {exc.strerror or exc}") from exc

    def banner() -> None:
        auth = f"basic authentication as {credentials[0]}" if credentials else "no authentication"
        print(f"fastfeed seedlist: serving {state} at {server.url} ({auth}); Ctrl-C to stop")
        sys.stdout.flush()

    try:
        serve_until_stopped(banner)
    finally:
        server.stop()
    print("fastfeed seedlist: stopped")
    return ExitCode.OK
