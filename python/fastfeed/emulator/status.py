"""The emulator's Feeds page: per datasource, its documents, per-URL ACLs and last feeds with their
status; per groupsource, its groups, members and last groups feeds; the requests the feedergate
rejected. Also the one line the log gives each push.

Like the appliance's Crawl and Index > Feeds page, this is the only place (besides `pushes()` and
the log) where a feed that was received but then failed in error shows up. An admin keeps it
open: it refreshes itself every few seconds.
"""

from __future__ import annotations

import time
from html import escape
from typing import Any

from fastfeed.emulator.index import Index, Push

#: The appliance's Feeds page shows the last five feeds of each datasource.
LAST_PUSHES = 5
#: URLs whose principal counts are listed per datasource (the counts of all are in `acls`).
ACL_URLS = 100
#: Rejected requests listed on the page (/status.json's `pushes` has them all).
LAST_REJECTED = 20
REFRESH_SECONDS = 5


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _push_json(push: Push, applying: int | None = None) -> dict[str, Any]:
    return {
        "id": push.id,
        "received_at": _utc(push.received_at),
        "client_ip": push.client_ip,
        "datasource": push.datasource,
        "kind": push.kind,
        "feedtype": push.feedtype,
        "filename": push.filename,
        "bytes": push.bytes,
        "sha256": push.sha256,
        "outcome": push.outcome,
        "status": push.status(applying=push.id == applying),
        "reason": push.reason,
        "records": push.records,
        "added": push.added,
        "deleted": push.deleted,
        "in_error": push.in_error,
    }


def snapshot(
    index: Index, backlog: int, paused: bool, applying: int | None = None
) -> dict[str, Any]:
    """The status as JSON-ready data (served at /status.json); `applying` is the push the
    feeder is applying now, if any."""
    counts = index.datasource_counts()
    acls = index.acl_counts(ACL_URLS)
    groups = index.group_counts()
    pushes = index.pushes()
    by_source: dict[tuple[str, str], list[Push]] = {}
    for push in pushes:
        if push.datasource:
            by_source.setdefault((push.kind, push.datasource), []).append(push)

    def last(kind: str, name: str) -> list[dict[str, Any]]:
        newest = reversed(by_source.get((kind, name), [])[-LAST_PUSHES:])
        return [_push_json(p, applying) for p in newest]

    sources = {name for kind, name in by_source if kind == "feed"}
    groupsources = {name for kind, name in by_source if kind == "groups"}
    return {
        "updated_at": _utc(time.time()),
        "backlog": backlog,
        "feeder": "paused" if paused else "running",
        "applying": applying,
        "datasources": [
            {
                "name": name,
                "documents": counts.get(name, 0),
                "acls": acls.get(name, (0, {}))[0],
                "principals_per_url": acls.get(name, (0, {}))[1],
                "last_pushes": last("feed", name),
            }
            for name in sorted(set(counts) | set(acls) | sources)
        ],
        "groupsources": [
            {
                "name": name,
                "groups": groups.get(name, (0, 0))[0],
                "members": groups.get(name, (0, 0))[1],
                "last_pushes": last("groups", name),
            }
            for name in sorted(set(groups) | groupsources)
        ],
        # Refusals often carry no datasource, so every request is also listed, newest first.
        "pushes": [_push_json(p, applying) for p in reversed(pushes)],
    }


# The log


def describe(push: Push) -> str:
    """A push as the log names it: `push 3 (docs, incremental, feed.xml, 1,234 bytes)`."""
    parts = [push.datasource or "no datasource", push.feedtype or "no feed type"]
    if push.filename:
        parts.append(push.filename)
    parts.append(f"{push.bytes:,} bytes")
    what = "groups push" if push.kind == "groups" else "push"
    return f"{what} {push.id} ({', '.join(parts)})"


def outcome_line(push: Push) -> str:
    """What became of a push, in the Feeds page's words, with its counts and reason."""
    status = push.status()
    counts = _counts(push)
    line = f"{status}: {counts}" if counts else status
    return f"{line}: {push.reason}" if push.reason else line


def _counts(push: Push) -> str:
    if push.status() not in ("processed", "failed") or not push.records:
        return ""
    noun = "membership" if push.kind == "groups" else "record"
    plural = "" if push.records == 1 else "s"
    counts = f"{push.records:,} {noun}{plural}, {push.added:,} added, {push.deleted:,} deleted"
    return f"{counts}, {push.in_error:,} in error" if push.in_error else counts


# The page

STYLE = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #d9e2ec; --head: #f0f4f8; --brand: #1a5fb4; }
* { box-sizing: border-box; }
body { margin: 0; background: #f7f9fb; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
header { background: var(--brand); color: #fff; padding: 10px 24px; display: flex;
  align-items: baseline; justify-content: space-between; flex-wrap: wrap; gap: 8px; }
header h1 { font-size: 18px; margin: 0; font-weight: 600; }
header h1 span { font-weight: 400; opacity: .85; }
header .stamp { font-size: 13px; opacity: .9; }
header .stamp.down { background: #c62828; padding: 2px 8px; border-radius: 4px; opacity: 1; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 24px 32px; }
.tiles { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 8px; }
.tile { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px;
  min-width: 130px; }
.tile b { display: block; font-size: 20px; font-variant-numeric: tabular-nums; }
.tile span { color: var(--muted); font-size: 12px; }
.tile.busy { border-color: #f0b429; background: #fffbea; }
h2 { font-size: 16px; margin: 24px 0 8px; padding-bottom: 4px;
  border-bottom: 2px solid var(--line); }
.source { background: #fff; border: 1px solid var(--line); border-radius: 6px; margin: 12px 0;
  overflow: hidden; }
.source h3 { margin: 0; padding: 8px 14px; background: var(--head); font-size: 15px;
  display: flex; gap: 16px; align-items: baseline; flex-wrap: wrap; }
.source h3 small { color: var(--muted); font-weight: 400; font-size: 13px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 5px 10px; border-top: 1px solid var(--line);
  vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; background: #fff; }
.source > table:first-child tr:first-child th { border-top: 0; }
tr:nth-child(even) td { background: #fafbfc; }
/* The same columns in every source's table, so that they line up down the page. */
table.pushes { table-layout: fixed; }
table.pushes td { overflow-wrap: anywhere; }
.pushes th:nth-child(1) { width: 165px; } .pushes th:nth-child(2) { width: 200px; }
.pushes th:nth-child(3) { width: 110px; } .pushes th:nth-child(4) { width: 110px; }
.pushes th:nth-child(5) { width: 95px; } .pushes th:nth-child(6) { width: 115px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.when { white-space: nowrap; font-variant-numeric: tabular-nums; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; white-space: nowrap; }
.received { background: #e3f2fd; color: #0d47a1; }
.in-progress { background: #fff3c4; color: #8d6e00; }
.processed { background: #e3f9e5; color: #1b5e20; }
.failed { background: #ffe3e3; color: #b71c1c; }
.rejected { background: #eceff1; color: #b71c1c; border: 1px solid #e57373; }
.reason { color: #b71c1c; font-size: 12px; margin-top: 2px; overflow-wrap: anywhere; }
.none { color: var(--muted); font-style: italic; padding: 8px 14px; margin: 0; }
details { padding: 6px 14px; border-top: 1px solid var(--line); }
details summary { cursor: pointer; color: var(--brand); }
details td { overflow-wrap: anywhere; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""

# Reloads the page's content in place every REFRESH_SECONDS (keeping the scroll position and
# the open sections), and says so when the emulator stops answering.
SCRIPT = """
let refreshes = 0;
async function refresh() {
  const stamp = document.querySelector(".stamp");
  try {
    const answer = await fetch(location.pathname, {cache: "no-store"});
    if (!answer.ok) throw new Error(answer.status);
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const open = [...document.querySelectorAll("details[open]")].map((d) => d.id);
    document.getElementById("page").replaceWith(page.getElementById("page"));
    for (const id of open) document.getElementById(id)?.setAttribute("open", "");
    document.body.dataset.refreshes = ++refreshes;
  } catch (error) {
    stamp.textContent = "the emulator is not answering: is it still running?";
    stamp.classList.add("down");
  }
}
setInterval(refresh, REFRESH_MS);
""".replace("REFRESH_MS", str(REFRESH_SECONDS * 1000))


def _n(value: int) -> str:
    return f"{value:,}"


def _when(iso: str) -> str:
    return escape(iso.replace("T", " ").removesuffix("Z"))


def _none(what: str) -> str:
    return f'<p class="none">none{what}</p>'


def _status_cell(push: dict[str, Any]) -> str:
    status = push["status"]
    cell = f'<span class="badge {status.replace(" ", "-")}">{status}</span>'
    if push["reason"]:
        cell += f'<div class="reason">{escape(push["reason"])}</div>'
    return f"<td>{cell}</td>"


def _records_cell(push: dict[str, Any]) -> str:
    # Only an applied (or partly applied) feed has records: a feed still waiting or one the
    # feedergate rejected shows a dash, never "0" as if it had been processed empty.
    if push["status"] not in ("processed", "failed") or not push["records"]:
        return '<td class="num muted">—</td>'
    detail = f"+{_n(push['added'])} −{_n(push['deleted'])}"
    if push["in_error"]:
        detail += f", {_n(push['in_error'])} in error"
    return (
        f'<td class="num">{_n(push["records"])}'
        f'<div class="muted" title="added, deleted">{detail}</div></td>'
    )


def _feed_cell(push: dict[str, Any]) -> str:
    # The urlencoded form carries no file name: then the push id is all there is to name it.
    number = f'<span class="muted">push #{push["id"]}</span>'
    if push["filename"]:
        return f"<td>{escape(push['filename'])}<br>{number}</td>"
    return f"<td>{number}</td>"


def _pushes_table(pushes: list[dict[str, Any]], records: str) -> str:
    if not pushes:
        return _none(" yet")
    rows = "".join(
        f'<tr><td class="when">{_when(p["received_at"])}</td>{_feed_cell(p)}'
        f"<td>{escape(p['feedtype'])}</td><td>{escape(p['client_ip'])}</td>"
        f'<td class="num">{_n(p["bytes"])}</td>{_records_cell(p)}{_status_cell(p)}</tr>'
        for p in pushes
    )
    return (
        '<table class="pushes"><tr><th>Received (UTC)</th><th>Feed</th><th>Feed type</th>'
        "<th>Client</th>"
        f'<th class="num">Bytes</th><th class="num">{records}</th><th>Status</th></tr>'
        f"{rows}</table>"
    )


def _datasource(source: dict[str, Any]) -> str:
    name = escape(source["name"])
    acls = ""
    if source["principals_per_url"]:
        rows = "".join(
            f'<tr><td>{escape(url)}</td><td class="num">{_n(count)}</td></tr>'
            for url, count in source["principals_per_url"].items()
        )
        shown = len(source["principals_per_url"])
        acls = (
            f'<details id="acls-{name}"><summary>Principals per URL ({_n(shown)} of'
            f" {_n(source['acls'])} ACLs)</summary><table><tr><th>URL</th>"
            f'<th class="num">Principals</th></tr>{rows}</table></details>'
        )
    return (
        f'<section class="source" id="datasource-{name}"><h3>{name}'
        f"<small>{_n(source['documents'])} documents · {_n(source['acls'])} ACLs</small></h3>"
        f"{_pushes_table(source['last_pushes'], 'Records')}{acls}</section>"
    )


def _groupsource(source: dict[str, Any]) -> str:
    name = escape(source["name"])
    return (
        f'<section class="source" id="groupsource-{name}"><h3>{name}'
        f"<small>{_n(source['groups'])} groups · {_n(source['members'])} members</small></h3>"
        f"{_pushes_table(source['last_pushes'], 'Memberships')}</section>"
    )


def _rejected(pushes: list[dict[str, Any]]) -> str:
    rejected = [p for p in pushes if p["status"] == "rejected"][:LAST_REJECTED]
    if not rejected:
        return _none("")
    endpoint = {"feed": "/xmlfeed", "groups": "/xmlgroups"}
    rows = "".join(
        f'<tr><td class="when">{_when(p["received_at"])}</td><td>{escape(p["client_ip"])}</td>'
        f"<td>{endpoint.get(p['kind'], escape(p['kind']))}</td>"
        f"<td>{escape(p['datasource']) or '<span class=muted>—</span>'}</td>"
        f'<td class="num">{_n(p["bytes"])}</td><td class="reason">{escape(p["reason"])}</td></tr>'
        for p in rejected
    )
    return (
        '<div class="source"><table><tr><th>Received (UTC)</th><th>Client</th><th>Endpoint</th>'
        f'<th>Source</th><th class="num">Bytes</th><th>Reason</th></tr>{rows}</table></div>'
    )


def _tile(value: str, label: str, busy: bool = False) -> str:
    return f'<div class="tile{" busy" if busy else ""}"><b>{value}</b><span>{label}</span></div>'


def render_html(status: dict[str, Any]) -> str:
    sources, groupsources = status["datasources"], status["groupsources"]
    applying = status["applying"]
    feeder = escape(status["feeder"])
    if applying is not None and status["feeder"] == "running":
        feeder = f"applying push #{applying}"
    tiles = "".join(
        [
            _tile(_n(status["backlog"]), "feed files in the backlog", busy=status["backlog"] > 0),
            _tile(feeder, "feeder", busy=status["feeder"] == "paused"),
            _tile(_n(len(sources)), "data sources"),
            _tile(_n(sum(s["documents"] for s in sources)), "documents"),
            _tile(_n(sum(s["acls"] for s in sources)), "per-URL ACLs"),
            _tile(_n(sum(s["groups"] for s in groupsources)), "groups"),
        ]
    )
    datasources = "".join(map(_datasource, sources)) or _none(": push a feed to /xmlfeed")
    groups = "".join(map(_groupsource, groupsources)) or _none(": push groups to /xmlgroups")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Feeds · fastfeed emulator</title>
<link rel="icon" href="data:,">
<noscript><meta http-equiv="refresh" content="{REFRESH_SECONDS}"></noscript>
<style>{STYLE}</style>
<script>{SCRIPT}</script>
</head><body><div id="page">
<header><h1>fastfeed emulator <span>· Crawl and Index › Feeds</span></h1>
<div class="stamp">updated {_when(status["updated_at"])} UTC · refreshes every
{REFRESH_SECONDS} s</div></header>
<main>
<div class="tiles">{tiles}</div>
<h2>Data sources</h2>
{datasources}
<h2>Groupsources</h2>
{groups}
<section id="rejected"><h2>Requests rejected by the feedergate</h2>
{_rejected(status["pushes"])}</section>
<footer>The last {LAST_PUSHES} feeds of each source, newest first. Received: accepted by the
feedergate, waiting in the backlog; in progress: being applied; processed: applied to the
index; failed: failed in error, with the reason; rejected: refused by the feedergate, never
fed. The same data as JSON: /status.json.</footer>
</main></div></body></html>
"""
