"""A strict, independent receiver for the tests: parses feed files with lxml the way an
appliance would (a conformant XML parser, with attribute and line-end normalisation) and decodes
what the protocol encodes."""

from __future__ import annotations

import base64
import hashlib
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from fastfeed import read_manifest
from lxml import etree


def sha256s(feed_set: Path) -> list[str]:
    """The SHA-256 of each file of a set, in manifest order: what the emulator records of each
    file it receives (the manifest's own digests are XXH3)."""
    return [
        hashlib.sha256((feed_set / e.file).read_bytes()).hexdigest()
        for e in read_manifest(feed_set)
    ]


@dataclass
class Fed:
    url: str
    attrs: dict[str, str]
    metadata: list[tuple[bytes, bytes]] = field(default_factory=list)
    content: bytes | None = None
    content_encoding: str | None = None


def decode_file(path: Path) -> tuple[str, str, list[Fed]]:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
    root = etree.parse(str(path), parser).getroot()
    datasource = root.findtext("header/datasource")
    feedtype = root.findtext("header/feedtype")
    out = []
    for rec in root.iter("record"):
        fed = Fed(rec.get("url"), dict(rec.attrib))
        for meta in rec.iterfind("metadata/meta"):
            name, content = meta.get("name").encode(), meta.get("content").encode()
            if meta.get("encoding") == "base64binary":
                name, content = base64.b64decode(name), base64.b64decode(content)
            fed.metadata.append((name, content))
        c = rec.find("content")
        if c is not None:
            fed.content_encoding = c.get("encoding")
            text = c.text or ""
            if fed.content_encoding is None:
                fed.content = text.encode("utf-8")
            elif fed.content_encoding == "base64binary":
                fed.content = base64.b64decode(text, validate=True)
            else:
                fed.content = zlib.decompress(base64.b64decode(text, validate=True))
        out.append(fed)
    return datasource, feedtype, out


def decode_set(out_dir: Path) -> list[Fed]:
    """Every record of a feed set, in manifest order."""
    records = []
    for line in (out_dir / "manifest.jsonl").read_bytes().splitlines():
        entry = orjson.loads(line)
        records.extend(decode_file(out_dir / entry["file"])[2])
    return records
