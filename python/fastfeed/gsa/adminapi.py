"""The appliance's Administrative API, as far as `sync --confirm` reads it: a datasource's feed
log, with each feed file's state and record counts.

As the Google Search Appliance Administrative API Developer's Guide: Protocol (software 6.4 and
later) describes it:

* an Admin Console account logs in with a form POST of `Email` and `Passwd` to
  `/accounts/ClientLogin` on the admin port (8443 for HTTPS, 8000 for HTTP); the answer's
  `Auth=` value is a token, sent with every request as `Authorization: GoogleLogin auth=TOKEN`.
  A token expires after 24 hours, or 30 minutes unused.
* `GET /feeds/feed?query=DATASOURCE` lists the datasource's feeds ("Data Source Feed"), as Atom
  entries of `<gsa:content name=...>` properties: `entryID`, `feedDataSource`, `feedType`,
  `feedState` (ACCEPTED:0, IN_PROGRESS:1, COMPLETED:2, COMPLETED_WITH_ERROR:3,
  FAILED_IN_ERROR:4), `feedTime` (ms), `successRecords`, `errorRecords`. The guide says it
  lists at most five feeds per datasource.
* `GET /feeds/feed/ENTRY_ID` is one feed, with its log (`logContent`).
"""

from __future__ import annotations

import enum
import urllib.parse
from dataclasses import dataclass, field

import httpx
from lxml import etree

from fastfeed.delivery.exchange import exchange
from fastfeed.delivery.settings import PushSettings, Secret
from fastfeed.errors import BacklogError, PushError, SettingsError

#: The admin ports of the guide.
HTTPS_PORT = 8443
HTTP_PORT = 8000
LOGIN = "/accounts/ClientLogin"
FEEDS = "/feeds/feed"
#: Feeds a datasource's log lists, the latest (the guide's number).
LOG_KEEPS = 5
#: An answer is a few entries; a longer one is cut, and fails to parse, rather than held whole.
ANSWER_BYTES = 1 << 20

_ATOM = "{http://www.w3.org/2005/Atom}"
_GSA = "{http://schemas.google.com/gsa/2007}"


class FeedState(enum.IntEnum):
    ACCEPTED = 0
    IN_PROGRESS = 1
    COMPLETED = 2
    COMPLETED_WITH_ERROR = 3
    FAILED_IN_ERROR = 4

    @property
    def finished(self) -> bool:
        return self >= FeedState.COMPLETED

    @property
    def failed(self) -> bool:
        """The feeder failed the file, or records of it (which ones, only its log says)."""
        return self >= FeedState.COMPLETED_WITH_ERROR


@dataclass(frozen=True)
class AdminApi:
    """Where the Administrative API is (`https://gsa.example.com:8443`) and the Admin Console
    account that reads it."""

    url: str
    user: str
    password: Secret = field(repr=False)

    def __post_init__(self) -> None:
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise SettingsError(
                f"admin API URL {self.url!r} is not http(s)://HOST:PORT (the appliance's admin "
                f"port: {HTTPS_PORT} for HTTPS, {HTTP_PORT} for HTTP)"
            )
        if not self.user:
            raise SettingsError("the Administrative API needs an Admin Console user: --admin-user")

    @classmethod
    def default_url(cls, settings: PushSettings) -> str:
        """The appliance's admin port, on the feedergate's host and scheme."""
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        scheme, port = ("https", HTTPS_PORT) if settings.https else ("http", HTTP_PORT)
        return f"{scheme}://{host}:{port}"


@dataclass(frozen=True)
class FeedEntry:
    """One feed file in a datasource's feed log."""

    entry_id: str
    datasource: str
    state: FeedState
    #: The appliance's time at the start of the entry's stage, in ms.
    time_ms: int
    success_records: int
    error_records: int
    #: The feed's log, read for one entry only.
    log: str = ""


def parse_entries(body: bytes) -> list[FeedEntry]:
    """The entries of a feed log answer (an Atom feed, or one entry)."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        root = etree.fromstring(body, parser)
    except etree.XMLSyntaxError as exc:
        raise BacklogError(f"{FEEDS} answered something that is not XML: {exc}") from None
    entries = [root] if root.tag == _ATOM + "entry" else root.iter(_ATOM + "entry")
    found = []
    for entry in entries:
        props = {c.get("name"): (c.text or "").strip() for c in entry.iter(_GSA + "content")}
        try:
            found.append(
                FeedEntry(
                    entry_id=props["entryID"],
                    datasource=props.get("feedDataSource", ""),
                    state=FeedState(int(props["feedState"])),
                    time_ms=int(props.get("feedTime") or 0),
                    success_records=int(props.get("successRecords") or 0),
                    error_records=int(props.get("errorRecords") or 0),
                    log=props.get("logContent", ""),
                )
            )
        except (KeyError, ValueError) as exc:
            raise BacklogError(f"{FEEDS} answered a feed entry without a usable {exc}") from None
    return found


class AdminClient:
    """Reads feed logs, logging in first and again when the token expired."""

    def __init__(self, client: httpx.AsyncClient, api: AdminApi, deadline: float) -> None:
        self._client = client
        self._api = api
        self._deadline = deadline
        self._token: str | None = None

    async def _request(
        self, method: str, path: str, headers: dict[str, str], content: bytes | None = None
    ) -> tuple[int, bytes]:
        url = self._api.url.rstrip("/") + path
        try:
            answer = await exchange(
                self._client,
                method,
                url,
                deadline=self._deadline,
                limit=ANSWER_BYTES,
                content=content,
                headers=headers,
            )
        except httpx.HTTPError as exc:
            raise BacklogError(
                f"cannot reach the Administrative API at {url} ({type(exc).__name__}: {exc}): "
                "check --admin-url, and --cacert for its certificate"
            ) from None
        return answer.status, answer.body

    async def login(self) -> None:
        form = urllib.parse.urlencode(
            {"Email": self._api.user, "Passwd": self._api.password.reveal()}
        )
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        status, body = await self._request("POST", LOGIN, headers, form.encode())
        lines = body.decode("utf-8", "replace").splitlines()
        token = next((line[5:] for line in lines if line.startswith("Auth=")), None)
        if status != 200 or not token:
            raise PushError(
                f"the Administrative API at {self._api.url} refused the login of "
                f"{self._api.user!r} (HTTP {status}): check --admin-user and --admin-password "
                "(an Admin Console account)",
                refused=True,
            )
        self._token = token

    async def _get(self, path: str) -> bytes:
        for attempt in (1, 2):
            if self._token is None:
                await self.login()
            headers = {"Authorization": f"GoogleLogin auth={self._token}"}
            status, body = await self._request("GET", path, headers)
            if status == 401 and attempt == 1:
                self._token = None  # expired (30 minutes unused): log in again
                continue
            if status != 200:
                raise BacklogError(f"{self._api.url}{path} answered HTTP {status}")
            return body
        raise AssertionError("unreachable")

    async def feeds(self, datasource: str) -> list[FeedEntry]:
        """The datasource's feed log (the latest few feeds)."""
        return parse_entries(await self._get(f"{FEEDS}?query={urllib.parse.quote(datasource)}"))

    async def feed(self, entry_id: str) -> FeedEntry:
        """One feed, with its log."""
        entries = parse_entries(await self._get(f"{FEEDS}/{urllib.parse.quote(entry_id)}"))
        if len(entries) != 1:
            raise BacklogError(f"{FEEDS}/{entry_id} answered {len(entries)} entries, not one")
        return entries[0]


def admin_client(settings: PushSettings) -> httpx.AsyncClient:
    """An HTTP client for the admin port, trusting what the feedergate's settings trust."""
    return httpx.AsyncClient(
        verify=settings.ssl_context(),
        timeout=httpx.Timeout(settings.timeout, connect=settings.connect_timeout),
        trust_env=False,
    )
