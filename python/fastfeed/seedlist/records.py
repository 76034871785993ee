"""Records of the JSON Lines schema checked and turned into what a seedlist serves.

A seedlist is Atom: every field is XML text and, unlike a gsafeed, has no base64 form. So text
XML 1.0 cannot carry (control characters, U+FFFE, U+FFFF) is refused here, at load time, naming
the field: refusing is the only way to keep every page well-formed without changing the data.
Content is the exception: it is also served as bytes from its content URL, so any content is
kept byte for byte and only inlined in the page when XML can carry it.

ACLs become `wplc:acl` security tokens, which are opaque strings that grant access. A token can
only permit, so deny principals and inherited ACLs (which make a document's access depend on
another document) are refused rather than served as something more permissive.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastfeed import _core
from fastfeed.errors import FastfeedError
from fastfeed.sets.codec import decode_base64

#: Characters XML 1.0 cannot carry in any form, not even as character references.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: type/subtype and parameters: it is also the content's Content-Type header.
#: Metadata that becomes a standard Atom element of the entry instead of a `wplc:field`.
TITLE, SUMMARY, AUTHOR = "title", "summary", "author"
#: The namespace of a principal that names none, as on the appliance.
DEFAULT_NAMESPACE = "Default"

#: The record schema's fields, from the one definition the Rust core reads records by.
_KNOWN = frozenset(_core.RECORD_FIELDS)
_CONTENTS = ("content", "content_base64", "content_path")
_AUTHMETHODS = {"none", "httpbasic", "ntlm", "httpsso"}
_INHERITANCE = {"child-overrides", "parent-overrides", "and-both-permit", "leaf-node"}
_PRINCIPAL_KEYS = {"name", "scope", "access", "namespace", "case_sensitive"}


class RecordProblem(FastfeedError):
    """A record the seedlist store refuses; `field` names the culprit (None: the whole record)."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Document:
    """A document as the seedlist serves it."""

    url: str
    mimetype: str
    displayurl: str | None
    #: RFC 3339 in UTC, as `atom:updated` takes it.
    last_modified: str | None
    #: (name, value) pairs sorted by name, a name's values in their order.
    metadata: list[tuple[str, str]]
    #: `wplc:acl` tokens; None means public (no `wplc:acls` at all).
    acl: list[str] | None
    content: bytes | None
    #: The content was given as text (UTF-8), so it may be inlined in the page.
    text: bool

    def as_record(self) -> dict[str, Any]:
        """The document as a record of the schema that loads to exactly this document: what its
        fingerprint is taken of. So what the seedlist serves is all that counts: a guessed MIME
        type, a content's bytes (whatever field gave them), the ACL's tokens; fields a seedlist
        has no place for (pagerank, lock...) and how a record spells a principal do not."""
        metadata: dict[str, list[str]] = {}
        for name, value in self.metadata:
            metadata.setdefault(name, []).append(value)
        record: dict[str, Any] = {
            "url": self.url,
            "mimetype": self.mimetype,
            "displayurl": self.displayurl,
            "last_modified": self.last_modified,
            "metadata": metadata,
        }
        if self.content is not None:
            record["content"] = self.content.decode() if self.text else self.content
        if self.acl is not None:
            record["acl"] = {"principals": [_principal(token) for token in self.acl]}
        return record


def fingerprints(documents: Sequence[Document]) -> list[bytes]:
    """The documents' fingerprints: the one definition `fastfeed sync` compares records by
    (`rust/fingerprint.rs`), of each document as a record (`Document.as_record`)."""
    return _core.fingerprint_records([d.as_record() for d in documents])


@dataclass(frozen=True)
class Deletion:
    url: str


def parse(record: Mapping[str, Any]) -> Document | Deletion:
    """Checks one record of the JSON Lines schema; raises RecordProblem."""
    if not isinstance(record, Mapping):
        raise RecordProblem(None, f"expected a JSON object, got {type(record).__name__}")
    fields = {k: v for k, v in record.items() if v is not None}
    unknown = sorted(set(fields) - _KNOWN)
    if unknown:
        raise RecordProblem(unknown[0], "unknown field (see the record schema in the README)")
    url = _string(fields, "url")
    if url is None:
        raise RecordProblem("url", "missing (every record needs its URL)")
    problem = _core.url_problem(url)
    if problem:
        raise RecordProblem("url", problem)
    action = fields.get("action", "add")
    if action not in ("add", "delete"):
        raise RecordProblem("action", f"{action!r} is not add or delete")
    _ignored_fields(fields)
    given = [name for name in _CONTENTS if name in fields]
    if action == "delete":
        if given:
            raise RecordProblem(given[0], "a delete carries no content")
        return Deletion(url)
    if len(given) > 1:
        raise RecordProblem(given[1], f"at most one of {', '.join(_CONTENTS)}")
    content, text = _content(fields)
    mimetype = _string(fields, "mimetype") or _guess_mimetype(fields, url, text)
    problem = _core.mimetype_problem(mimetype)
    if problem is not None:
        raise RecordProblem("mimetype", problem)
    displayurl = _string(fields, "displayurl")
    last_modified = _last_modified(fields.get("last_modified"))
    return Document(
        url=url,
        mimetype=mimetype,
        displayurl=displayurl,
        last_modified=last_modified,
        metadata=_metadata(fields.get("metadata", {})),
        acl=_acl(fields["acl"]) if "acl" in fields else None,
        content=content,
        text=text,
    )


def xml_can_carry(text: str) -> bool:
    return _NOT_XML.search(text) is None


def _xml_text(field: str, value: str) -> str:
    bad = _NOT_XML.search(value)
    if bad:
        raise RecordProblem(
            field,
            f"holds U+{ord(bad.group()):04X} at character {bad.start()}, which XML 1.0 cannot "
            "carry and a seedlist has no base64 form for; remove it from the record",
        )
    return value


def _string(fields: Mapping[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RecordProblem(name, f"expected a string, got {type(value).__name__}")
    if name != "url" and not value:
        raise RecordProblem(name, "is empty")
    return _xml_text(name, value)


def _ignored_fields(fields: Mapping[str, Any]) -> None:
    """Checks the fields that tell an appliance how to crawl or rank: they are part of the
    schema, so refusing them would refuse shared inputs, but a seedlist has no place for them.
    Those a seedlist cannot honour are refused."""
    kind = fields.get("kind", "document")
    if kind == "acl":
        # An ACL alone exists to be inherited from, and a seedlist has no inheritance.
        raise RecordProblem("kind", "a seedlist has no entries for an ACL alone (kind 'acl')")
    if kind != "document":
        raise RecordProblem("kind", f"{kind!r} is not document or acl")
    if fields.get("overwrite_acls") is False:
        raise RecordProblem(
            "overwrite_acls", "a seedlist entry's ACL always replaces the one served before"
        )
    for name in ("lock", "crawl_immediately", "crawl_once", "overwrite_acls"):
        if name in fields and not isinstance(fields[name], bool):
            raise RecordProblem(name, "expected true or false")
    if "authmethod" in fields and fields["authmethod"] not in _AUTHMETHODS:
        raise RecordProblem(
            "authmethod", f"{fields['authmethod']!r} is not one of none, httpbasic, ntlm, httpsso"
        )
    pagerank = fields.get("pagerank")
    if pagerank is not None and (
        isinstance(pagerank, bool) or not isinstance(pagerank, int) or not 68 <= pagerank <= 100
    ):
        raise RecordProblem("pagerank", f"{pagerank!r} is outside 68 to 100")


def _content(fields: Mapping[str, Any]) -> tuple[bytes | None, bool]:
    if "content" in fields:
        value = fields["content"]
        if isinstance(value, str):
            try:
                return value.encode(), True
            except UnicodeEncodeError:
                raise RecordProblem("content", "is not valid Unicode (lone surrogate)") from None
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value), False
        raise RecordProblem("content", f"expected a string, got {type(value).__name__}")
    if "content_base64" in fields:
        value = fields["content_base64"]
        if not isinstance(value, str):
            raise RecordProblem("content_base64", f"expected a string, got {type(value).__name__}")
        try:
            return decode_base64(value), False
        except ValueError:
            raise RecordProblem("content_base64", "is not valid base64") from None
    if "content_path" in fields:
        path = fields["content_path"]
        if not isinstance(path, str) or not path:
            raise RecordProblem("content_path", "expected the path of a file")
        try:
            return Path(path).read_bytes(), False
        except OSError as exc:
            raise RecordProblem("content_path", f"cannot read {path}: {exc.strerror}") from None
    return None, False


def _guess_mimetype(fields: Mapping[str, Any], url: str, text: bool) -> str:
    guessed, _ = mimetypes.guess_type(fields.get("content_path") or url.split("?")[0])
    return guessed or ("text/plain" if text else "application/octet-stream")


def _last_modified(value: Any) -> str | None:
    """RFC 3339 in UTC, from the date forms every fastfeed receiver reads the same way."""
    if value is None:
        return None
    try:
        seconds = _core.parse_last_modified(value)
    except ValueError as exc:
        raise RecordProblem("last_modified", str(exc)) from None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _metadata(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, Mapping):
        raise RecordProblem("metadata", "expected an object of name to string or list of strings")
    pairs: list[tuple[str, str]] = []
    for name, values in value.items():
        where = f"metadata.{name}"
        if not name:
            raise RecordProblem("metadata", "a name is empty")
        _xml_text(f"metadata name {name!r}", name)
        items = values if isinstance(values, list) else [values]
        for item in items:
            if not isinstance(item, str):
                raise RecordProblem(where, f"expected a string, got {type(item).__name__}")
            _xml_text(where, item)
        if name in (TITLE, SUMMARY) and len(items) > 1:
            raise RecordProblem(where, f"one value only: it becomes the entry's atom:{name}")
        pairs.extend((name, item) for item in items)
    pairs.sort(key=lambda pair: pair[0])  # stable: a name's values keep their order
    return pairs


def _acl(value: Any) -> list[str]:
    """The `wplc:acl` tokens of an ACL: `user:NAMESPACE:name` or `group:NAMESPACE:name`."""
    if not isinstance(value, Mapping):
        raise RecordProblem("acl", "expected an object with principals")
    value = {k: v for k, v in value.items() if v is not None}
    unknown = sorted(set(value) - {"principals", "inheritance_type", "inherit_from"})
    if unknown:
        raise RecordProblem(f"acl.{unknown[0]}", "unknown field")
    if "inherit_from" in value:
        raise RecordProblem(
            "acl.inherit_from",
            "a seedlist lists each document's own security tokens and cannot inherit them; "
            "give the document its effective principals instead",
        )
    # inheritance_type only says how documents inheriting from this one combine ACLs, and
    # none can inherit in a seedlist; it is checked, since the schema allows it, and unused.
    inheritance = value.get("inheritance_type")
    if inheritance is not None and inheritance not in _INHERITANCE:
        raise RecordProblem(
            "acl.inheritance_type",
            f"{inheritance!r} is not one of " + ", ".join(sorted(_INHERITANCE)),
        )
    principals = value.get("principals")
    if not isinstance(principals, list) or not principals:
        raise RecordProblem(
            "acl.principals",
            "expected a non-empty list: a seedlist entry without wplc:acl is public, so an ACL "
            "that names nobody cannot be served (leave acl out for a public document)",
        )
    tokens: list[str] = []
    for i, principal in enumerate(principals):
        token = _token(f"acl.principals[{i}]", principal)
        if token not in tokens:
            tokens.append(token)
    return tokens


def _token(where: str, principal: Any) -> str:
    if not isinstance(principal, Mapping):
        raise RecordProblem(where, "expected an object with name and scope")
    principal = {k: v for k, v in principal.items() if v is not None}
    unknown = sorted(set(principal) - _PRINCIPAL_KEYS)
    if unknown:
        raise RecordProblem(f"{where}.{unknown[0]}", "unknown field")
    name = principal.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RecordProblem(f"{where}.name", "expected a non-empty string")
    if name.strip() != name:
        raise RecordProblem(f"{where}.name", f"{name!r} has leading or trailing white space")
    _xml_text(f"{where}.name", name)
    scope = principal.get("scope")
    if scope not in ("user", "group"):
        raise RecordProblem(f"{where}.scope", f"{scope!r} is not user or group")
    access = principal.get("access", "permit")
    if access == "deny":
        raise RecordProblem(
            f"{where}.access",
            "deny cannot be expressed in a seedlist: wplc:acl tokens only grant access, so "
            "denying would silently become allowing; list only who may see the document",
        )
    if access != "permit":
        raise RecordProblem(f"{where}.access", f"{access!r} is not permit or deny")
    namespace = principal.get("namespace", DEFAULT_NAMESPACE)
    if not isinstance(namespace, str) or not namespace or ":" in namespace:
        raise RecordProblem(f"{where}.namespace", "expected a non-empty string without ':'")
    _xml_text(f"{where}.namespace", namespace)
    case_sensitive = principal.get("case_sensitive", True)
    if not isinstance(case_sensitive, bool):
        raise RecordProblem(f"{where}.case_sensitive", "expected true or false")
    return f"{scope}:{namespace}:{name if case_sensitive else name.lower()}"


def _principal(token: str) -> dict[str, str]:
    """The principal a `wplc:acl` token grants (see `_token`): the names it was made from
    already folded, so it makes the same token again."""
    scope, namespace, name = token.split(":", 2)
    return {"name": name, "scope": scope, "access": "permit", "namespace": namespace}
