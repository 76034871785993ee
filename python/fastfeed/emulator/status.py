"""The emulator's Feeds page: per datasource, its documents, per-URL ACLs (principals per URL) and
last pushes with their outcome; per groupsource, its groups, members and last groups pushes.

Like the appliance's Crawl and Index > Feeds page, this is the only place (besides `pushes()`)
where a feed that was received but then failed in error shows up.
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


def _push_json(push: Push) -> dict[str, Any]:
    return {
        "id": push.id,
        "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(push.received_at)),
        "client_ip": push.client_ip,
        "datasource": push.datasource,
        "kind": push.kind,
        "feedtype": push.feedtype,
        "bytes": push.bytes,
        "sha256": push.sha256,
        "outcome": push.outcome,
        "records": push.records,
        "added": push.added,
        "deleted": push.deleted,
        "in_error": push.in_error,
    }


def snapshot(index: Index, backlog: int, paused: bool) -> dict[str, Any]:
    """The status as JSON-ready data (served at /status.json)."""
    counts = index.datasource_counts()
    acls = index.acl_counts(ACL_URLS)
    groups = index.group_counts()
    pushes = index.pushes()
    by_source: dict[tuple[str, str], list[Push]] = {}
    for push in pushes:
        if push.datasource:
            by_source.setdefault((push.kind, push.datasource), []).append(push)

    def last(kind: str, name: str) -> list[dict[str, Any]]:
        return [_push_json(p) for p in reversed(by_source.get((kind, name), [])[-LAST_PUSHES:])]

    sources = {name for kind, name in by_source if kind == "feed"}
    groupsources = {name for kind, name in by_source if kind == "groups"}
    return {
        "backlog": backlog,
        "feeder": "paused" if paused else "running",
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
        "pushes": [_push_json(p) for p in reversed(pushes)],
    }


def render_html(status: dict[str, Any]) -> str:
    rows = []
    for source in status["datasources"]:
        pushes = source["last_pushes"] or [None]
        for i, push in enumerate(pushes):
            name = escape(source["name"]) if i == 0 else ""
            count = str(source["documents"]) if i == 0 else ""
            if push is None:
                rows.append(f"<tr><td>{name}</td><td>{count}</td><td colspan=4></td></tr>")
                continue
            rows.append(
                f"<tr><td>{name}</td><td>{count}</td><td>{escape(push['received_at'])}</td>"
                f"<td>{escape(push['feedtype'])}</td><td>{push['records']}</td>"
                f"<td>{escape(push['outcome'])}</td></tr>"
            )
    group_rows = []
    for source in status["groupsources"]:
        push = next(iter(source["last_pushes"]), None)
        group_rows.append(
            f"<tr><td>{escape(source['name'])}</td><td>{source['groups']}</td>"
            f"<td>{source['members']}</td>"
            + (
                f"<td>{escape(push['received_at'])}</td><td>{escape(push['feedtype'])}</td>"
                f"<td>{escape(push['outcome'])}</td></tr>"
                if push
                else "<td colspan=3></td></tr>"
            )
        )
    acl_rows = [
        f"<tr><td>{escape(source['name'])}</td><td>{escape(url)}</td><td>{count}</td></tr>"
        for source in status["datasources"]
        for url, count in source["principals_per_url"].items()
    ]
    refused = [
        f"<li>{escape(p['received_at'])} from {escape(p['client_ip'])}: {escape(p['outcome'])}</li>"
        for p in status["pushes"]
        if p["outcome"].startswith("refused")
    ]
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>fastfeed emulator: Feeds</title></head>
<body>
<h1>Feeds</h1>
<p>Feed files awaiting processing: {status["backlog"]} (feeder {escape(status["feeder"])})</p>
<table border="1">
<tr><th>Data source</th><th>Documents</th><th>Received (UTC)</th><th>Feed type</th>
<th>Records</th><th>Status</th></tr>
{"".join(rows)}
</table>
<h2>Per-URL ACLs</h2>
<p>Principals per URL (the first {ACL_URLS} URLs of each datasource).</p>
<table border="1">
<tr><th>Data source</th><th>URL</th><th>Principals</th></tr>
{"".join(acl_rows)}
</table>
<h2>Groups</h2>
<table border="1">
<tr><th>Groupsource</th><th>Groups</th><th>Members</th><th>Last received (UTC)</th>
<th>Feed type</th><th>Status</th></tr>
{"".join(group_rows)}
</table>
<h2>Refused requests</h2>
<ul>{"".join(refused)}</ul>
</body></html>
"""
