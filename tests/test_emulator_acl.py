"""The emulated appliance's secure-search storage: per-URL ACLs from feeds (acl elements on
records, standalone acl entities, legacy google:acl* metadata) and groups from /xmlgroups,
driven over real HTTPS with hand-written feeds."""

from __future__ import annotations

import httpx
import pytest
import test_emulator
from fastfeed.emulator import Acl, Emulator, Membership, Principal
from fastfeed.emulator.feeder import MAX_REPORTED
from test_emulator import feed, group, push, record

client = test_emulator.client  # the HTTPS client fixture, trusting the test CA

GUIDE_STANDALONE_ACL = """<acl url='http://dummyhost.corp.google.com/'
inheritance-type='child-overrides' inherit-from='http://corp.google.com/'>
<!-- spaces are stripped from principal text content -->
<principal scope="user" access="permit">edward</principal>
<principal scope="user" access="deny"> william </principal>
<principal scope="group" access="permit">nobles</principal>
<!-- empty, will be skipped -->
<principal scope="group" access="permit"> </principal>
<principal scope="group" access="deny">playwrights</principal>
</acl>"""


def acl_record(url: str) -> str:
    return (
        f'<record url="{url}" mimetype="text/plain"><acl inherit-from="http://dummyhost.corp.'
        'google.com/" inheritance-type="parent-overrides">'
        '<principal scope="user" access="permit" namespace="Default" case-sensitivity-type='
        '"everything-case-insensitive">CORP\\alice</principal>'
        '<principal scope="group" access="deny" principal-type="unqualified">'
        "site owners</principal></acl><content>secret</content></record>"
    )


def legacy_record(url: str, *metas: tuple[str, str], overwrite: str | None = None) -> str:
    attr = f' overwrite-acls="{overwrite}"' if overwrite else ""
    inner = "".join(f'<meta name="{n}" content="{c}"/>' for n, c in metas)
    return (
        f'<record url="{url}" mimetype="text/plain"><metadata{attr}>{inner}</metadata>'
        "<content>x</content></record>"
    )


def groups_feed(*memberships: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<xmlgroups>\n'
        + "\n".join(memberships)
        + "\n</xmlgroups>\n"
    ).encode()


def membership(group_name: str, *members: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    inner = "".join(
        f'<principal scope="{"GROUP" if m.startswith("@") else "USER"}">{m.lstrip("@")}</principal>'
        for m in members
    )
    return (
        f'<membership><principal scope="GROUP"{extra}>{group_name}</principal>'
        f"<members>{inner}</members></membership>"
    )


def test_record_and_standalone_acls_are_stored_as_fed(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    data = feed(
        "share",
        "incremental",
        group(GUIDE_STANDALONE_ACL, acl_record("http://dummyhost.corp.google.com/a")),
    )

    assert push(client, emulator, "share", "incremental", data).text == "Success"
    emulator.wait_idle()

    assert emulator.pushes()[0].outcome == "applied"
    acls = emulator.acls("share")
    assert acls["http://dummyhost.corp.google.com/"] == Acl(
        url="http://dummyhost.corp.google.com/",
        principals=(
            Principal("edward", "user", "permit"),
            Principal("william", "user", "deny"),  # stripped
            Principal("nobles", "group", "permit"),
            # the whitespace-only principal is skipped
            Principal("playwrights", "group", "deny"),
        ),
        inheritance_type="child-overrides",
        inherit_from="http://corp.google.com/",
        standalone=True,
        datasource="share",
        push_id=1,
    )
    assert acls["http://dummyhost.corp.google.com/a"] == Acl(
        url="http://dummyhost.corp.google.com/a",
        principals=(
            Principal("CORP\\alice", "user", "permit", "Default", case_sensitive=False),
            Principal("site owners", "group", "deny", principal_type="unqualified"),
        ),
        inheritance_type="parent-overrides",
        inherit_from="http://dummyhost.corp.google.com/",
        datasource="share",
        push_id=1,
    )
    # The share's ACL is an entity of the index, not a document.
    assert set(emulator.documents("share")) == {"http://dummyhost.corp.google.com/a"}
    [source] = emulator.status()["datasources"]
    assert source["acls"] == 2
    assert source["principals_per_url"] == {
        "http://dummyhost.corp.google.com/": 4,
        "http://dummyhost.corp.google.com/a": 2,
    }
    page = client.get(f"{emulator.url}/status").text
    assert '<td>http://dummyhost.corp.google.com/a</td><td class="num">2</td>' in page


def test_deletes_and_full_feeds_remove_acls(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    first = group(GUIDE_STANDALONE_ACL, acl_record("http://e.example.com/a"))
    push(client, emulator, "share", "incremental", feed("share", "incremental", first))
    # A document's ACL goes with the document; the share's ACL stays.
    delete = group(record("http://e.example.com/a", action="delete"))
    push(client, emulator, "share", "incremental", feed("share", "incremental", delete))
    emulator.wait_idle()
    assert set(emulator.acls("share")) == {"http://dummyhost.corp.google.com/"}

    # A full feed replaces the datasource: ACL entities included.
    full = group(acl_record("http://e.example.com/b"))
    push(client, emulator, "share", "full", feed("share", "full", full))
    emulator.wait_idle()
    assert set(emulator.acls("share")) == {"http://e.example.com/b"}


def test_legacy_metadata_becomes_the_same_acl_model(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    url = "http://insidealpha.example.com/personnel.htm"
    first = legacy_record(
        url,
        ("google:aclgroups", "eng"),
        ("google:aclusers", "joe=reader"),  # suffix stripped
        ("google:aclusers", "maria=peeker"),  # ignored
        ("google:acldenyusers", "joe"),
        ("google:acldenygroups", "administration"),
        ("google:aclinheritfrom", "http://insidealpha.example.com/"),
        ("google:aclinheritancetype", "and-both-permit"),
    )
    push(client, emulator, "ia", "incremental", feed("ia", "incremental", group(first)))
    # overwrite-acls="false": the new principals add to the URL's ACL instead of replacing it.
    more = legacy_record(url, ("google:aclusers", "salim"), overwrite="false")
    push(client, emulator, "ia", "incremental", feed("ia", "incremental", group(more)))
    emulator.wait_idle()

    acl = emulator.acls("ia")[url]
    assert acl.principals == (
        Principal("eng", "group", "permit"),
        Principal("joe", "user", "permit"),
        Principal("joe", "user", "deny"),
        Principal("administration", "group", "deny"),
        Principal("salim", "user", "permit"),
    )
    assert (acl.inheritance_type, acl.inherit_from) == ("leaf-node", None)
    assert not acl.standalone

    # Without overwrite-acls="false", the record's ACL is replaced, inheritance included.
    again = legacy_record(
        url, ("google:aclusers", "ann"), ("google:aclinheritancetype", "child-overrides")
    )
    push(client, emulator, "ia", "incremental", feed("ia", "incremental", group(again)))
    emulator.wait_idle()
    acl = emulator.acls("ia")[url]
    assert (acl.principals, acl.inheritance_type) == (
        (Principal("ann", "user", "permit"),),
        "child-overrides",
    )


def test_an_acl_in_both_forms_skips_its_record_and_a_misplaced_one_fails_the_feed(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    """The guide allows a per-URL ACL "in the metadata portion of the feed, or in the document
    itself, but not in both places", and names no consequence: the record is skipped, as the
    appliance skips a malformed one, and the rest of the feed applies."""
    both = acl_record("http://e.example.com/a").replace(
        "<content>", '<metadata><meta name="google:aclusers" content="joe"/></metadata><content>'
    )
    fine = acl_record("http://e.example.com/ok")
    push(client, emulator, "ds", "incremental", feed("ds", "incremental", group(both, fine)))
    misplaced = acl_record("http://e.example.com/b").replace(
        "<acl ", '<acl url="http://e.example.com/b" '
    )
    push(client, emulator, "ds", "incremental", feed("ds", "incremental", group(misplaced)))
    emulator.wait_idle()

    first, second = emulator.pushes()
    assert first.outcome == (
        "failed in error: documents included: 1, documents in error: 1, error details: Skipping"
        " the record, Line number: 3, Error: a per-URL ACL both in an <acl> element and in"
        " google:acl* metadata"
    )
    assert "an <acl> inside a record cannot have a url attribute" in second.outcome
    assert set(emulator.documents("ds")) == set(emulator.acls("ds")) == {"http://e.example.com/ok"}


def test_an_acl_in_both_forms_counts_only_where_metadata_does(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    """An incremental 'web' feed takes no metadata: the legacy ACL is not there to clash."""
    both = (
        '<record url="http://e.example.com/a" mimetype="text/html"><acl>'
        '<principal scope="user" access="permit">ann</principal></acl>'
        '<metadata><meta name="google:aclusers" content="joe"/></metadata></record>'
    )
    push(client, emulator, "web", "incremental", feed("web", "incremental", group(both)))
    emulator.wait_idle()

    [pushed] = emulator.pushes()
    assert pushed.outcome == "applied"
    acl = emulator.acls("web")["http://e.example.com/a"]
    assert acl.principals == (Principal("ann", "user", "permit"),)


def test_records_to_skip_do_not_hide_a_problem_that_fails_the_feed(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    """However many records would be skipped, a problem later in the file still refuses it."""
    both = acl_record("http://e.example.com/a").replace(
        "<content>", '<metadata><meta name="google:aclusers" content="joe"/></metadata><content>'
    )
    misplaced = acl_record("http://e.example.com/b").replace(
        "<acl ", '<acl url="http://e.example.com/b" '
    )
    data = feed("ds", "incremental", group(*[both] * (MAX_REPORTED + 1), misplaced))

    push(client, emulator, "ds", "incremental", data)
    emulator.wait_idle()

    [pushed] = emulator.pushes()
    assert "an <acl> inside a record cannot have a url attribute" in pushed.outcome
    assert emulator.documents("ds") == {}


def test_a_role_suffix_is_stripped_once_from_user_names_only(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    """The guide strips "that suffix" from "the user name" of google:aclusers: once, and from
    no group or denied name."""
    url = "http://e.example.com/a"
    roles = legacy_record(
        url,
        ("google:aclusers", "joe=reader=owner"),
        ("google:aclusers", "ann=peeker=reader"),
        ("google:aclgroups", "eng=reader"),
        ("google:acldenyusers", "bob=owner"),
        ("google:acldenygroups", "ops=peeker"),
    )
    push(client, emulator, "ds", "incremental", feed("ds", "incremental", group(roles)))
    emulator.wait_idle()

    assert emulator.acls("ds")[url].principals == (
        Principal("joe=reader", "user", "permit"),
        Principal("ann=peeker", "user", "permit"),
        Principal("eng=reader", "group", "permit"),
        Principal("bob=owner", "user", "deny"),
        Principal("ops=peeker", "group", "deny"),
    )


def test_groups_feeds_add_replace_and_full_replaces_every_source(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    ldap = groups_feed(
        membership("eng", "alice", "@interns", namespace="Corp"),
        membership("ops", "bob", case_sensitivity_type="EVERYTHING_CASE_INSENSITIVE"),
    )
    assert push(client, emulator, "ldap", "incremental", ldap, groups=True).text == "Success"
    # The guide's own client posts urlencoded forms too.
    sharepoint = groups_feed(membership("owners", "carol"))
    answer = client.post(
        f"{emulator.url}/xmlgroups",
        data={"groupsource": "sharepoint", "feedtype": "incremental", "data": sharepoint.decode()},
    )
    assert answer.text == "Success"
    emulator.wait_idle()

    assert emulator.groups("ldap") == {
        ("Corp", "eng"): Membership(
            Principal("eng", "group", namespace="Corp"),
            (
                Principal("alice", "user", namespace="Default"),
                Principal("interns", "group", namespace="Default"),
            ),
            "ldap",
            1,
        ),
        ("Default", "ops"): Membership(
            Principal("ops", "group", namespace="Default", case_sensitive=False),
            (Principal("bob", "user", namespace="Default"),),
            "ldap",
            1,
        ),
    }
    assert set(emulator.groups()) == {("Corp", "eng"), ("Default", "ops"), ("Default", "owners")}
    status = emulator.status()
    assert [(s["name"], s["groups"], s["members"]) for s in status["groupsources"]] == [
        ("ldap", 2, 3),
        ("sharepoint", 1, 1),
    ]
    assert status["datasources"] == []  # groups pushes are not feeds of a datasource

    # Incremental: a group fed again has its members replaced; others stay.
    push(
        client, emulator, "ldap", "incremental", groups_feed(membership("ops", "dave")), groups=True
    )
    emulator.wait_idle()
    assert [m.name for m in emulator.groups("ldap")[("Default", "ops")].members] == ["dave"]
    assert len(emulator.groups()) == 3

    # Full: every group of every source is replaced.
    push(client, emulator, "ldap", "full", groups_feed(membership("all", "erin")), groups=True)
    emulator.wait_idle()
    assert set(emulator.groups()) == {("Default", "all")}
    assert emulator.groups("sharepoint") == {}


def test_groups_pushes_wait_in_the_backlog_and_bad_ones_fail_in_error(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    emulator.pause_feeder()
    lowercase_scope = groups_feed(membership("eng", "alice").replace('"USER"', '"user"'))
    push(client, emulator, "ldap", "incremental", lowercase_scope, groups=True)
    # A groups feed sent to /xmlfeed is not a feed.
    push(client, emulator, "ldap", "incremental", groups_feed(membership("eng", "alice")))
    assert client.get(f"{emulator.url}/getbacklogcount").text == "2"
    emulator.resume_feeder()
    emulator.wait_idle()

    first, second = emulator.pushes()
    assert first.kind == "groups" and first.outcome.startswith("failed in error:")
    assert 'Value "user" for attribute scope of principal' in first.outcome
    assert second.kind == "feed"
    assert "the root element is <xmlgroups>, not <gsafeed>" in second.outcome
    assert emulator.groups() == {}


def test_xmlgroups_refuses_requests_without_a_groupsource_or_with_a_feed_feedtype(
    client: httpx.Client,
    emulator: Emulator,
) -> None:
    data = groups_feed(membership("eng", "alice"))
    missing = client.post(
        f"{emulator.url}/xmlgroups",
        data={"datasource": "ldap", "feedtype": "incremental"},
        files={"data": ("g.xml", data, "text/xml")},
    )
    wrong_type = push(client, emulator, "ldap", "metadata-and-url", data, groups=True)

    assert missing.status_code == 400 and "missing form field(s) groupsource" in missing.text
    assert wrong_type.status_code == 400 and "not one of full, incremental" in wrong_type.text
    assert emulator.backlog == 0 and emulator.groups() == {}


@pytest.mark.parametrize(
    "data",
    [groups_feed(), groups_feed(membership("eng")), groups_feed(membership("eng", "alice"), "")],
    ids=["no membership", "a group without members", "fine"],
)
def test_groups_feeds_are_held_to_googles_groups_dtd(
    client: httpx.Client, emulator: Emulator, data: bytes
) -> None:
    assert push(client, emulator, "ldap", "incremental", data, groups=True).text == "Success"
    emulator.wait_idle()
    [pushed] = emulator.pushes()
    if b"alice" in data:
        assert pushed.outcome == "applied"
    else:
        assert pushed.outcome.startswith("failed in error: ") and "DTD" in pushed.outcome


def test_a_groups_feed_with_a_dtd_of_its_own_is_refused_as_a_feed_is(
    client: httpx.Client, emulator: Emulator
) -> None:
    data = (
        b'<?xml version="1.0"?><!DOCTYPE xmlgroups [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b'<xmlgroups><membership><principal scope="GROUP">g&x;</principal>'
        b'<members><principal scope="USER">u</principal></members></membership></xmlgroups>'
    )
    push(client, emulator, "ldap", "incremental", data, groups=True)
    emulator.wait_idle()
    [pushed] = emulator.pushes()
    assert pushed.outcome.startswith("failed in error: ") and "a DTD of its own" in pushed.outcome
    assert emulator.groups() == {}
