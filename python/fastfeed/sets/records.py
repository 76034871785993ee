"""The record schema as Python types: what `add_batch` takes, field for field the JSON Lines
schema of the README (which the Rust core reads)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict


class _PrincipalRequired(TypedDict):
    name: str
    scope: Literal["user", "group"]


class Principal(_PrincipalRequired, total=False):
    """A user or group: in an ACL (with `access`), or a member of a group (without)."""

    access: Literal["permit", "deny"]
    namespace: str
    case_sensitive: bool
    principal_type: Literal["unqualified"]


class Acl(TypedDict, total=False):
    """A per-URL ACL: who may or may not see the document, and what it inherits."""

    principals: Sequence[Principal]
    inheritance_type: Literal["child-overrides", "parent-overrides", "and-both-permit", "leaf-node"]
    inherit_from: str


class _RecordRequired(TypedDict):
    url: str


class Record(_RecordRequired, total=False):
    """One document, as in the JSON Lines schema (see the README). At most one content field.

    With `kind="acl"` it is instead an ACL for a URL that is not a document (a folder, a share)
    and carries only `url` and `acl`."""

    kind: Literal["document", "acl"]
    action: Literal["add", "delete", "update", "delete-pattern"]
    mimetype: str
    displayurl: str
    last_modified: str | int | float
    lock: bool
    authmethod: Literal["none", "httpbasic", "ntlm", "httpsso"]
    pagerank: int
    crawl_immediately: bool
    crawl_once: bool
    metadata: Mapping[str, str | Sequence[str]]
    content: str | bytes
    content_base64: str
    content_path: str | os.PathLike[str]
    acl: Acl
    overwrite_acls: bool
