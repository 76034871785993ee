"""The one retry loop of every pusher, and what a failed request on the way to an appliance
was: something to retry after a backoff, or a TLS failure that no retry mends."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from fastfeed.delivery.settings import PushSettings
from fastfeed.errors import PushError
from fastfeed.progress import plural

T = TypeVar("T")


@dataclass(frozen=True)
class Again:
    """An attempt that may succeed when made again: what went wrong, for the message if the
    retries run out."""

    problem: str


async def retrying(
    settings: PushSettings,
    attempt: Callable[[int], Awaitable[T]],
    on_retry: Callable[[], None],
) -> tuple[int, T]:
    """Makes attempts 1, 2, ... until one comes to an outcome (anything but `Again`) or
    `settings.retries` retries are spent, waiting between them a backoff that doubles from
    `backoff_base` to `backoff_max`. Returns how many attempts were made and the last outcome."""
    attempts = 0
    while True:
        attempts += 1
        outcome = await attempt(attempts)
        if not isinstance(outcome, Again) or attempts > settings.retries:
            return attempts, outcome
        on_retry()
        backoff = settings.backoff_base * 2 ** (attempts - 1)
        await asyncio.sleep(jitter(min(settings.backoff_max, backoff)))


def gave_up(again: Again, attempts: int) -> str:
    return f"{again.problem} (gave up after {plural(attempts, 'attempt')})"


def jitter(delay: float) -> float:
    """Between half and all of `delay`: retries of many files do not arrive in lockstep."""
    return delay / 2 + random.uniform(0, delay / 2)


E = TypeVar("E", bound=BaseException)


def cause(exc: BaseException, kind: type[E]) -> E | None:
    """The error of type `kind` behind `exc` (itself included), if there is one."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


#: What mends a wrong address, in the options of `fastfeed push` (host, port and scheme apart).
ADDRESS_HINT = "check --host and --port, or --http"
#: What mends a certificate naming another host than the one given: the host alone.
NAME_HINT = "check --host"
PLAIN_HTTP_HINT = "give --http (or the appliance's HTTPS port with --port)"
TLS_PORT_HINT = "leave out --http (or give the appliance's HTTP port with --port)"
#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
NAME_MISMATCH = (62, 64)


async def transport_problem(
    exc: httpx.HTTPError,
    target: str,
    hint: str,
    *,
    first: bool,
    address_hint: str = ADDRESS_HINT,
    name_hint: str = NAME_HINT,
    plain_http_hint: str = PLAIN_HTTP_HINT,
    tls_port_hint: str = TLS_PORT_HINT,
) -> Again:
    """What went wrong on the way to the appliance, to retry on. But what no retry mends stops
    the push as refused: a TLS failure (`hint` names the option that fixes it; an answer in
    plain HTTP means the port is the HTTP one: `plain_http_hint`; a certificate naming another
    host: `name_hint`), a connection refused at the first attempt (nothing listens there: a
    wrong host or port, `address_hint`; later, an appliance restarting), and plain HTTP to a
    port that speaks TLS (`tls_port_hint`). The hints name the options of the command that
    gave the address."""
    url = httpx.URL(target)
    port = url.port or {"https": 443, "http": 80}.get(url.scheme)  # None: the scheme's own
    # A TLS server drops a plain HTTP request without an answer, which would be retried for
    # minutes; a TLS handshake with the same port tells it from a dropped connection.
    dropped = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
    if (
        first
        and url.scheme == "http"
        and isinstance(exc, dropped)
        and await _speaks_tls(url, _connect_timeout(exc))
    ):
        raise PushError(
            f"{target}: port {port} answers in HTTPS, not plain HTTP: {tls_port_hint}",
            refused=True,
        ) from None
    tls = cause(exc, ssl.SSLError) if isinstance(exc, httpx.ConnectError) else None
    if tls is not None and tls.reason == "WRONG_VERSION_NUMBER":
        raise PushError(
            f"{target}: port {port} answers in plain HTTP, not HTTPS: {plain_http_hint}",
            refused=True,
        ) from None
    if isinstance(tls, ssl.SSLCertVerificationError) and tls.verify_code in NAME_MISMATCH:
        # The CA is trusted: the certificate names another host than the one given.
        raise PushError(
            f"TLS with {target} failed: {tls.verify_message.rstrip('.')}: give the host by a "
            f"name its certificate holds ({name_hint})",
            refused=True,
        ) from None
    if tls is not None:
        raise PushError(
            f"TLS with {target} failed: {tls}. Give the appliance's CA certificate with {hint}",
            refused=True,
        ) from None
    if first and isinstance(exc, httpx.ConnectError) and cause(exc, ConnectionRefusedError):
        raise PushError(
            f"{target}: connection refused: nothing listens on port {port} of {url.host} "
            f"({address_hint})",
            refused=True,
        ) from None
    name = type(exc).__name__
    if str(exc):
        return Again(f"{name}: {exc}")
    # httpx's timeouts often come without words: say which wait ran out.
    waits: dict[type[httpx.HTTPError], str] = {
        httpx.ConnectTimeout: "no connection within --connect-timeout (the TLS handshake included)",
        httpx.WriteTimeout: "sending made no progress within --timeout",
        httpx.ReadTimeout: "no answer within --timeout",
        httpx.PoolTimeout: "no free connection within --timeout",
    }
    return Again(f"{name}: {waits.get(type(exc), 'no detail given')}")


def _connect_timeout(exc: httpx.HTTPError) -> float:
    """The connect timeout the failed request was given (--connect-timeout), which httpx
    keeps with the request; the settings' default where there is none."""
    try:
        timeout = exc.request.extensions.get("timeout", {}).get("connect")
    except RuntimeError:  # an error raised without its request
        timeout = None
    return float(timeout) if timeout else PushSettings.connect_timeout


async def _speaks_tls(url: httpx.URL, timeout: float) -> bool:
    """Whether a TLS handshake with `url`'s host and port succeeds (the certificate unchecked:
    only the protocol is asked)."""
    # No CA loaded: nothing is verified, so none is needed.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        connecting = asyncio.open_connection(url.host, url.port or 80, ssl=context)
        _, writer = await asyncio.wait_for(connecting, timeout)
    except (OSError, TimeoutError):  # ssl.SSLError is an OSError
        return False
    writer.close()
    return True
