"""`fastfeed state show|export|forget|abandon`: look at and adjust a sync state."""

from __future__ import annotations

import sys
import time

import click
import orjson

from fastfeed.cli.commands import group, option
from fastfeed.cli.options import json_option
from fastfeed.cli.reports import ExitCode
from fastfeed.progress import plural
from fastfeed.sets.state import MAYBE_HELD, SyncState
from fastfeed.sets.sync import abandon_pending, locked

HELP = """\
Look at the state `fastfeed sync` keeps (what the appliance accepted, per URL), or adjust it.

  show    counts, last sync, an unfinished sync's set; with --url, a URL's fingerprint
  export  every URL with its fingerprint and when it was accepted, as JSON Lines
  forget  forget URLs (or all of them), so that the next sync sends them again
  abandon give up an unfinished sync's set, so that the next sync compares anew

examples:
  fastfeed state show docs.state
  fastfeed state show docs.state --url http://docs.example.com/a --json
  fastfeed state export docs.state > held.jsonl
  fastfeed state forget docs.state --url http://docs.example.com/a
  fastfeed state forget docs.state --all --yes
  fastfeed state abandon docs.state
"""


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(seconds))


#: The argument of every state command.
STATE_FILE = click.argument("path", metavar="STATE", help="a state file of fastfeed sync")


@group("state", help=HELP, short_help="look at or adjust a sync state")
def state() -> None:
    pass


@state.command(
    "show",
    help="Show what a sync state holds: its appliance and datasource, the documents held, the "
    "last sync, an unfinished sync's set; with --url, a URL's fingerprint and when the "
    "appliance accepted it.\n\nexample:\n  fastfeed state show docs.state --url "
    "http://docs.example.com/a\n",
    short_help="what a state holds",
)
@STATE_FILE
@option("--url", multiple=True, help="show this URL's fingerprint (repeatable)")
@json_option("print it as JSON")
def show_command(path: str, url: tuple[str, ...], as_json: bool) -> int:
    with SyncState(path, None) as st:
        pending = st.pending_set
        urls = {u: st.fingerprint(u) for u in url}
        info: dict[str, object] = {
            "ok": True,
            "state": path,
            "target": st.target,
            "documents": st.count(),
            "unknown": st.unknown(),
            "maybe_held": st.maybe_held(),
            "last_sync": st.last_sync,
            "pending_set": None if pending is None else str(pending),
            "pending_records": st.pending_count(),
            "urls": {
                u: None if held is None else {"fingerprint": held[0], "accepted": held[1]}
                for u, held in urls.items()
            },
        }
        last = st.last_sync
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(info) + b"\n")
        return ExitCode.OK
    print(f"{path}: {info['target']}")
    print(f"  documents held: {info['documents']:,}")
    print(f"  last sync:      {_when(last)}")
    if info["unknown"]:
        print(
            f"  unknown:        {info['unknown']:,} URLs whose file the feeder failed, or of a "
            "set given up (the next sync sends them again)"
        )
    if info["maybe_held"]:
        print(
            f"  maybe held:     {info['maybe_held']:,} URLs of a set given up that the appliance "
            "held none of before: it may hold them or not (the next sync sends them again, as "
            "new records or deletes)"
        )
    if pending is not None:
        print(f"  unfinished:     {info['pending_records']:,} records of {pending} (sync again)")
    for u, held in urls.items():
        if held is None:
            print(f"  {u}: not held")
        elif held[0] == MAYBE_HELD:
            print(f"  {u}: maybe held (of a set given up, {_when(held[1])})")
        else:
            print(f"  {u}: {held[0]}, accepted {_when(held[1])}")
    return ExitCode.OK


@state.command(
    "export",
    help="Print every URL the state holds, with its fingerprint and when the appliance "
    "accepted it, as JSON Lines, in URL order.\n\nexample:\n  fastfeed state export "
    "docs.state > held.jsonl\n",
    short_help="every URL held, as JSON Lines",
)
@STATE_FILE
def export_command(path: str) -> int:
    out = sys.stdout.buffer
    with SyncState(path, None) as st:
        for url, fingerprint, accepted in st.documents():
            out.write(
                orjson.dumps({"url": url, "fingerprint": fingerprint, "accepted": accepted}) + b"\n"
            )
    return ExitCode.OK


@state.command(
    "forget",
    help="Forget that the appliance holds URLs: the next sync sends them again (as new), for "
    "instance after they were removed from the index by hand. --all forgets every URL (after "
    "an index reset, say: the next sync sends the whole snapshot, and no deletes), with --yes "
    "to say you mean it.\n\nexamples:\n  fastfeed state forget docs.state --url "
    "http://docs.example.com/a\n  fastfeed state forget docs.state --all --yes\n",
    short_help="forget URLs, to send them again",
)
@STATE_FILE
@option("--url", multiple=True, help="a URL to forget (repeatable)")
@option("--all", "forget_all", is_flag=True, help="forget every URL, and any unfinished set")
@option("--yes", is_flag=True, help="with --all: yes, forget everything the state holds")
def forget_command(path: str, url: tuple[str, ...], forget_all: bool, yes: bool) -> int:
    if forget_all == bool(url):
        raise click.UsageError("give the URLs to forget (--url URL), or --all")
    if forget_all and not yes:
        raise click.UsageError(
            "--all forgets every URL: the next sync sends the whole snapshot again, and deletes "
            "nothing that vanished meanwhile; add --yes if that is what you want"
        )
    urls = tuple(dict.fromkeys(url))  # a URL given twice is one to forget
    with locked(path), SyncState(path, None) as st:
        forgotten = st.forget(None if forget_all else urls)
    if forget_all:
        said = "forgot every URL; the next sync sends the whole snapshot again"
    elif not forgotten:
        held = "the URL given" if len(urls) == 1 else f"any of the {len(urls):,} URLs given"
        said = f"forgot nothing: the state does not hold {held}"
    else:
        said = f"forgot {plural(forgotten, 'URL')} of {len(urls):,} given"
        if forgotten < len(urls):
            said += " (the state did not hold the others)"
        said += f"; the next sync sends {'it' if forgotten == 1 else 'them'} again"
    print(f"fastfeed state forget: {said}", file=sys.stderr)
    return ExitCode.OK


@state.command(
    "abandon",
    help="Give up the set an unfinished sync left. A sync first finishes that set; when one of "
    "its files fails every time (a record the appliance refuses, since fixed in the source), it "
    "blocks every later sync. Abandoned, the state holds what the set's push journal says the "
    "appliance accepted; the URLs of its other records may have arrived or not (a file in "
    "flight when the sync stopped), so the next sync compares the snapshot anew and sends them "
    "again, as records or deletes.\n\nexample:\n  fastfeed state abandon docs.state\n",
    short_help="give up an unfinished sync's set",
)
@STATE_FILE
def abandon_command(path: str) -> int:
    with locked(path), SyncState(path, None) as st:
        pending = st.pending_set
        if pending is None:
            print(f"fastfeed state abandon: {path} has no unfinished set", file=sys.stderr)
            return ExitCode.OK
        given_up = abandon_pending(st, pending)
    if given_up.unbuilt:
        print(
            f"fastfeed state abandon: abandoned {pending}: an earlier fastfeed's set whose build "
            "never finished, so nothing of it was sent; nothing of it is left to send",
            file=sys.stderr,
        )
        return ExitCode.OK
    said = []
    if given_up.unread:
        said.append(given_up.unread)
    elif given_up.accepted:
        said.append(
            f"recorded {plural(given_up.accepted, 'record')} its journal says were accepted"
        )
    if given_up.unknown:
        said.append(
            f"the next sync sends again the {plural(given_up.unknown, 'URL')} of its records not "
            "known to be accepted (they may have arrived or not)"
        )
    else:
        said.append("nothing of it is left to send")
    print(f"fastfeed state abandon: abandoned {pending}: {'; '.join(said)}", file=sys.stderr)
    return ExitCode.OK
