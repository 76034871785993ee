"""The options several commands share, each written once: how a set is split, how to reach and
trust an appliance, how hard to push; and the value types they parse."""

from __future__ import annotations

import re
import sys
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import click

from fastfeed.cli.commands import F, option
from fastfeed.gsa.writer import AclFormat, Compress, FeedOptions, FeedType
from fastfeed.sets.build import OnError
from fastfeed.sets.writer import DEFAULT_LEVEL, DEFAULT_MAX_BYTES, HARD_MAX_BYTES

if TYPE_CHECKING:
    from fastfeed.delivery.settings import PushSettings

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


class Size(click.ParamType[int]):
    """Sizes like 50MB, 64MiB or 1000000 (MB = 10**6 bytes, MiB = 2**20)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        m = _SIZE.match(str(value))
        if not m:
            self.fail(f"'{value}' is not a size like 50MB, 64MiB or 1000000", param, ctx)
        unit = (m.group(2) or "").lower().removesuffix("b")
        return int(float(m.group(1)) * _UNITS[unit])


def count(low: int, high: int | None = None) -> click.IntRange:
    """Whole numbers from `low` (to `high`)."""
    return click.IntRange(low, high)


def together(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several option decorators as one, listed in the help in the order given."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


#: What INPUT is, for the commands that build from records and for the syncs (a snapshot).
RECORDS = (
    "JSON Lines, Parquet or Arrow file or dataset directory, glob, - (stdin), or directory of "
    "documents (--base-url)"
)
SNAPSHOT = (
    "the whole source: JSON Lines file, - (stdin), Parquet or Arrow file or dataset directory, "
    "directory of documents (--base-url)"
)


def paths_argument(name: str, metavar: str, help: str) -> Callable[[F], F]:
    """The one or more inputs or sets a command works on, the arguments of every command that
    takes paths; the usage shows that more than one may be given (`INPUT...`), which click
    does not when the metavar is named."""
    return click.argument(name, nargs=-1, required=True, metavar=f"{metavar}...", help=help)


def one_of(
    flag: str, values: object, section: str | None, help: str, default: str | None = None
) -> Callable[[F], F]:
    """An option taking one of the values of `values`, the Literal type the Python API takes
    (so that the command line and the API cannot disagree); by default the first."""
    choices = typing.get_args(values)
    return option(
        flag,
        type=click.Choice(choices),
        default=choices[0] if default is None else default,
        section=section,
        help=help,
    )


def json_option(
    what: str = "print a JSON summary on stdout", section: str | None = None
) -> Callable[[F], F]:
    return option("--json", "as_json", is_flag=True, section=section, help=what)


def set_options(
    items: str, section: str | None = None, *, on_error: bool = True
) -> Callable[[F], F]:
    """How a set is split and what a refused line does: every command that writes a set."""
    refused = [
        one_of(
            "--on-error",
            OnError,
            section,
            help="stop at the first refused line (default, no manifest written), or skip it into "
            "DIR/rejected.jsonl and go on",
        )
    ]
    return together(
        option(
            "--max-bytes",
            type=Size(),
            default=DEFAULT_MAX_BYTES,
            metavar="SIZE",
            section=section,
            help=f"cap on each file (default {DEFAULT_MAX_BYTES // 1_000_000}MB, at most "
            f"{HARD_MAX_BYTES // 1_000_000}MB)",
        ),
        option(
            "--max-records",
            type=count(0),
            default=0,
            metavar="N",
            section=section,
            help=f"cap on {items} per file",
        ),
        *(refused if on_error else []),
    )


def allow_empty_full(section: str | None = None) -> Callable[[F], F]:
    """Every command that writes or sends a full feed: one with no records is refused."""
    return option(
        "--allow-empty-full",
        is_flag=True,
        section=section,
        help="let a full feed with no records through; on the appliance it removes every "
        "document of its datasource (a groups feed: every group). Refused by default: an empty "
        "input is more often a broken export than an empty source",
    )


def _setting(
    name: str, metavar: str, section: str, help: str, *, least: int = 0
) -> Callable[[F], F]:
    """The option of the PushSettings field `name`: its flag, type and default come from the
    field, so that the option and the setting cannot disagree; a whole number is at least
    `least`, as the help says."""
    # The push settings are imported by the commands that push, not by every command.
    from fastfeed.delivery.settings import PushSettings

    default = getattr(PushSettings(host="-"), name)
    unit = " s" if metavar == "S" else ""
    return option(
        f"--{name.replace('_', '-')}",
        type=count(least) if isinstance(default, int) else float,
        default=default,
        metavar=metavar,
        section=section,
        help=f"{help} (default {default:g}{unit})".lstrip(),
    )


def tls_options(section: str = "appliance") -> Callable[[F], F]:
    """How to trust the appliance and how long to wait for it: every command that talks to
    one takes these."""
    return together(
        option(
            "--cacert",
            metavar="PEM",
            section=section,
            help="CA certificate(s) to verify the appliance with",
        ),
        option(
            "--client-cert",
            metavar="PEM",
            section=section,
            help="client certificate, if the appliance asks",
        ),
        option(
            "--client-key",
            metavar="PEM",
            section=section,
            help="its private key (if not in --client-cert)",
        ),
        option(
            "--client-key-password",
            metavar="SECRET",
            section=section,
            help="password of the key; prefer FASTFEED_CLIENT_KEY_PASSWORD, as flags show in `ps`",
        ),
        option(
            "--insecure",
            is_flag=True,
            section=section,
            help="do not verify the appliance's certificate (test appliances only)",
        ),
        _setting("connect_timeout", "S", section, ""),
        _setting(
            "timeout", "S", section, "seconds without progress while sending or awaiting an answer"
        ),
        _setting(
            "deadline",
            "S",
            section,
            "seconds one request may take in all, however steadily the appliance answers",
        ),
    )


def groupsource_option() -> Callable[[F], F]:
    """The groupsource of the lone groups feeds a command pushes: one does not name its own."""
    return option(
        "--groupsource",
        metavar="NAME",
        help="the groupsource of lone groups feed files (<xmlgroups>), which do not name it",
    )


def connection_options() -> Callable[[F], F]:
    """Where the appliance's feedergate is, and how to trust it."""
    from fastfeed.delivery.settings import HTTP_PORT, HTTPS_PORT

    s = "appliance"
    return together(
        option("--host", required=True, section=s, help="the appliance's host name or IP address"),
        option(
            "--port",
            type=click.IntRange(1, 65535),
            section=s,
            help=f"feedergate port (default {HTTPS_PORT}, or {HTTP_PORT} with --http)",
        ),
        option("--http", is_flag=True, section=s, help=f"plain HTTP (port {HTTP_PORT})"),
        tls_options(s),
    )


def retry_options(section: str) -> Callable[[F], F]:
    """How often and how patiently a failed request is sent again."""
    return together(
        _setting(
            "retries",
            "N",
            section,
            "retries of a file after HTTP 5xx, timeouts, dropped connections, Internal Error",
        ),
        _setting("backoff_base", "S", section, "first retry delay, doubling each time"),
        _setting("backoff_max", "S", section, "longest retry delay"),
    )


def push_options(*, full_feeds: bool = True) -> Callable[[F], F]:
    """How hard to push, and when to wait for the appliance (and whether an empty full feed
    may go, for the commands that can send one)."""
    s = "pushing"
    empty_full = [allow_empty_full(s)] if full_feeds else []
    return together(
        _setting("concurrency", "N", s, "files in flight at once, across datasources", least=1),
        option(
            "--overlap-incremental",
            is_flag=True,
            section=s,
            help="let incremental files of one datasource overlap (only if no URL is in two files)",
        ),
        *empty_full,
        retry_options(s),
        _setting(
            "disk_full_delay", "S", s, "wait after 'insufficient disk space' before sending again"
        ),
        _setting("disk_full_retries", "N", s, "how many such waits for one file"),
        _setting("backlog_high", "N", s, "pause while the appliance's backlog is above N files"),
        _setting("backlog_low", "N", s, "resume once it is at or below N"),
        _setting("backlog_interval", "S", s, "seconds between backlog polls"),
        json_option(section=s),
    )


def push_settings(command: str, options: dict[str, Any]) -> PushSettings:
    """The push settings of a command line: each PushSettings field takes the option of its
    name (tests/test_config.py checks that `fastfeed push` has one for each field, so a
    renamed field cannot silently lose its option); options a command lacks keep defaults."""
    from fastfeed.delivery.settings import PushSettings, Secret

    values: dict[str, Any] = {
        f.name: options[f.name] for f in fields(PushSettings) if f.name in options
    }
    values["https"] = not options.get("http", False)
    if options.get("client_key_password"):
        values["client_key_password"] = Secret(options["client_key_password"])
    if options.get("insecure"):
        print(
            f"fastfeed {command}: warning: --insecure: the appliance's certificate is not "
            "verified; anyone on the network path can read and alter the feeds",
            file=sys.stderr,
        )
    return PushSettings(**values)


BUILDING = "building (as `fastfeed build`)"


#: The options of `encoding_options`, as the builders take them (`FeedOptions`, and where a
#: directory is on the web): commands hand them on by name (`take_encoding`), so that each is
#: written once, in the option that defines it.
ENCODING = (*sorted(FeedOptions.__optional_keys__), "base_url")


def take_encoding(options: dict[str, Any]) -> dict[str, Any]:
    """Takes the encoding options out of a command's options."""
    return {name: options.pop(name) for name in ENCODING}


def record_options(section: str | None = None, *, gsa_only: bool = False) -> Callable[[F], F]:
    """What a GSA feed set is made of: `build` and `run` take these. --datasource is required
    (and the usage says so) where the feeds can only be GSA ones (`gsa_only`)."""
    return together(
        option(
            "--datasource",
            required=gsa_only,
            section=section,
            help="datasource name, [a-zA-Z_][a-zA-Z0-9_-]*"
            + ("" if gsa_only else " (required for GSA feeds)"),
        ),
        one_of(
            "--feedtype",
            FeedType,
            section,
            default="incremental",
            help="full replaces the datasource; incremental adds and deletes (default); "
            "metadata-and-url feeds URLs and metadata for the crawler",
        ),
        encoding_options(section),
    )


def encoding_options(section: str | None = None, *, on_error: bool = True) -> Callable[[F], F]:
    """How records become feed files: every command that builds GSA feeds takes these."""
    return together(
        set_options("records", section, on_error=on_error),
        one_of(
            "--compress",
            Compress,
            section,
            help="auto: zlib content that shrinks: binary, and text of 2 KB or more (default); "
            "always: zlib every content; never: text as text and binary as plain base64 "
            "(appliances before 6.2)",
        ),
        option(
            "--level",
            type=count(1, 12),
            default=DEFAULT_LEVEL,
            metavar="N",
            section=section,
            help=f"compression level, 1 (fastest) to 12 (default {DEFAULT_LEVEL})",
        ),
        option(
            "--workers",
            type=count(0),
            default=0,
            metavar="N",
            section=section,
            help="encoding threads (default: one per core)",
        ),
        one_of(
            "--acl-format",
            AclFormat,
            section,
            help="per-url: <acl> elements (software 7.0 and later, default); legacy: google:acl* "
            "meta names, for older appliances (no namespaces, no standalone ACLs)",
        ),
        option(
            "--base-url", metavar="URL", section=section, help="URL of a directory INPUT's root"
        ),
    )


def require_datasource(datasource: str | None) -> str:
    """GSA feeds need --datasource; click does not insist on it only because Thunderstone data
    takes --profile instead."""
    if not datasource:
        raise click.UsageError(
            "--datasource is required (or FASTFEED_DATASOURCE, or datasource in fastfeed.toml)",
            click.get_current_context(silent=True),
        )
    return datasource


SYNCING = "syncing"
_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class Deletes(click.ParamType[float | int]):
    """How much a sync may delete: a count (500), or a share (0.5, 50%)."""

    name = "deletes"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float | int:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        share = _SHARE.match(text)
        try:
            if share:
                fraction = float(share.group(1)) / 100
            elif "." in text:
                fraction = float(text)
            else:
                count = int(text)
                if count < 0:
                    raise ValueError
                return count
        except ValueError:
            self.fail(f"'{value}' is not a number of documents (500) or a share (0.5, 50%)")
        if not 0 <= fraction <= 1:
            self.fail(f"'{value}' is not a share from 0 to 1 (or 0% to 100%)")
        return fraction


def allow_deletes_option(section: str | None = None) -> Callable[[F], F]:
    """The mass-delete guard's way out (`fastfeed.sets.guard`), for every snapshot."""
    return option(
        "--allow-deletes",
        type=Deletes(),
        metavar="N|SHARE",
        section=section,
        help="deletes allowed: documents (500) or a share (0.5, 50%) (default: 10%, none "
        "when the snapshot is empty)",
    )


def sync_options(collection: Callable[[F], F]) -> Callable[[F], F]:
    """What every receiver's sync takes besides its receiver's settings: the snapshot, the
    `collection` it is kept equal to (an option naming a datasource, a profile), the state."""
    s = SYNCING
    return together(
        paths_argument("inputs", "INPUT", SNAPSHOT),
        collection,
        option(
            "--state",
            required=True,
            metavar="FILE",
            section=s,
            help="the sync state of this appliance and collection (made if missing)",
        ),
        allow_deletes_option(s),
        option("--resend-all", is_flag=True, section=s, help="send every record, changed or not"),
        option(
            "--dry-run",
            is_flag=True,
            section=s,
            help="compare and say what would be sent; send nothing",
        ),
        option(
            "--out",
            metavar="DIR",
            section=s,
            help="where to keep the set sent (default: ./fastfeed-feeds/NAME-sync-...)",
        ),
    )


def take_sync(options: dict[str, Any]) -> dict[str, Any]:
    """Takes what `sync_options` gives out of a command's options, named as every receiver's
    `sync` takes it (--out is its `out_dir`), so that each is handed on by name once."""
    names = ("inputs", "state", "allow_deletes", "resend_all", "dry_run")
    return {**{name: options.pop(name) for name in names}, "out_dir": options.pop("out")}
