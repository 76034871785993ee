"""What secure search needs from feeds, as the emulated index keeps it: per-URL ACLs and groups.

Both wire formats are decoded into one model close to fastfeed's JSON Lines input: `scope` is
"user" or "group" whether the feed said `user` (gsafeed) or `USER` (groups feed), and
`case_sensitive` stands for either spelling of case-sensitivity-type. Attributes left out take
their DTD defaults, so that an ACL means the same whether a default was written or not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lxml import etree

from fastfeed.sets.validate import (
    LEGACY_IGNORED,
    LEGACY_INHERIT_FROM,
    LEGACY_INHERITANCE,
    LEGACY_PRINCIPALS,
    legacy_role,
)

#: Defaults of the gsafeed DTD (7.x guide).
DEFAULT_INHERITANCE = "leaf-node"
#: The groups feed DTD defaults the namespace; the gsafeed DTD leaves it out (None here).
GROUPS_NAMESPACE = "Default"


@dataclass(frozen=True)
class Principal:
    """A user or group. `access` ("permit" or "deny") is set in ACLs, None in groups."""

    name: str
    scope: str
    access: str | None = None
    namespace: str | None = None
    case_sensitive: bool = True
    principal_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Acl:
    """The per-URL ACL of a document, or of a standalone entity (a folder, a share: an
    `<acl url=...>` outside any record), which is not a document of the index."""

    url: str
    principals: tuple[Principal, ...]
    inheritance_type: str = DEFAULT_INHERITANCE
    inherit_from: str | None = None
    standalone: bool = False
    datasource: str = ""
    #: The push (see `Push.id`) that last set this ACL.
    push_id: int = 0


@dataclass(frozen=True)
class Membership:
    """A group of a groups feed and its members; `groupsource` is the source that fed it last."""

    group: Principal
    members: tuple[Principal, ...]
    groupsource: str = ""
    push_id: int = 0


def principals_to_json(principals: Iterable[Principal]) -> list[dict[str, Any]]:
    return [p.to_json() for p in principals]


def principals_from_json(items: Sequence[dict[str, Any]]) -> tuple[Principal, ...]:
    return tuple(Principal(**item) for item in items)


def _name(elem: etree._Element) -> str | None:
    """The principal's name; the guide: spaces are stripped from it, and an empty (or
    whitespace-only) principal is skipped."""
    name = (elem.text or "").strip()
    return name or None


def acl_principals(acl: etree._Element) -> tuple[Principal, ...]:
    """The principals of a gsafeed <acl>, in feed order."""
    principals = []
    for elem in acl.iterchildren("principal"):
        name = _name(elem)
        if name is None:
            continue
        principals.append(
            Principal(
                name=name,
                scope=elem.get("scope", ""),
                access=elem.get("access"),
                namespace=elem.get("namespace"),
                case_sensitive=elem.get("case-sensitivity-type") != "everything-case-insensitive",
                principal_type=elem.get("principal-type"),
            )
        )
    return tuple(principals)


def groups_principal(elem: etree._Element) -> Principal | None:
    """A <principal> of a groups feed (upper-case enumerations, namespace "Default")."""
    name = _name(elem)
    if name is None:
        return None
    return Principal(
        name=name,
        scope=elem.get("scope", "").lower(),
        namespace=elem.get("namespace", GROUPS_NAMESPACE),
        case_sensitive=elem.get("case-sensitivity-type") != "EVERYTHING_CASE_INSENSITIVE",
        principal_type=elem.get("principal-type"),
    )


def membership(elem: etree._Element) -> Membership | None:
    """A <membership>: its group and members (None if the group's name is empty)."""
    group_elem = elem.find("principal")
    group = None if group_elem is None else groups_principal(group_elem)
    if group is None:
        return None
    members = (groups_principal(m) for m in elem.iterfind("members/principal"))
    return Membership(group, tuple(m for m in members if m is not None))


def legacy_acl(url: str, metadata: Sequence[tuple[str, str]]) -> Acl | None:
    """The ACL that legacy google:acl* metadata gives a record, or None if it has none.

    The legacy format has no namespaces or case sensitivity: those keep their defaults.
    """
    principals = []
    inherit_from = None
    inheritance = DEFAULT_INHERITANCE
    found = False
    for name, content in metadata:
        if name == LEGACY_INHERIT_FROM:
            inherit_from, found = content, True
        elif name == LEGACY_INHERITANCE:
            inheritance, found = content, True
        elif name in LEGACY_PRINCIPALS:
            found = True
            suffix = legacy_role(name, content)
            if suffix == LEGACY_IGNORED:
                continue
            if suffix is not None:
                # "that suffix is stripped": one, so "joe=reader=owner" is user "joe=reader".
                content = content.removesuffix(suffix)
            scope, access = LEGACY_PRINCIPALS[name]
            if content.strip():
                principals.append(Principal(content.strip(), scope, access))
    if not found:
        return None
    return Acl(url, tuple(principals), inheritance, inherit_from)
