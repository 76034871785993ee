"""What a push needs to know: the appliance, how to trust it, and how hard to push.

`PushSettings` is shared by the CLI (built from the layered configuration) and the Python API, so
both behave the same way for the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastfeed.errors import SettingsError

if TYPE_CHECKING:
    import ssl

    import httpx

#: Feedergate ports from the Feeds Protocol guide: plain HTTP and HTTPS.
HTTP_PORT = 19900
HTTPS_PORT = 19902
#: How long a sync waits, by default, for the appliance to process what it sent (here, not in
#: `gsa.confirm`, so that the command line's options need not import httpx and lxml).
CONFIRM_TIMEOUT = 3600.0


class Secret:
    """A string that never shows itself in a repr, a log line or a summary."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class PushSettings:
    """How to reach the appliance and how to pace the push.

    Backlog marks count feed files waiting for the appliance's feeder (`/getbacklogcount`):
    sending stops while the count is above `backlog_high` and resumes once it is at or below
    `backlog_low`, so the appliance's disk is not filled with files it cannot process yet.
    """

    host: str
    port: int | None = None
    #: HTTPS (port 19902) unless asked otherwise: feeds carry the documents themselves.
    https: bool = True
    cacert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    client_key_password: Secret | None = field(default=None, repr=False)
    #: Skips certificate verification; only for a test appliance whose certificate is unknown.
    insecure: bool = False

    #: Files in flight at once, across all datasources.
    concurrency: int = 4
    #: Let the incremental files of one datasource overlap (see the ordering rule in gsa/push.py).
    overlap_incremental: bool = False

    #: Attempts after the first one for a retryable failure (5xx, timeout, `Internal Error`).
    retries: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    #: `insufficient disk space` means "come back later": a longer, separately bounded wait.
    disk_full_delay: float = 60.0
    disk_full_retries: int = 30

    connect_timeout: float = 10.0
    #: Seconds without progress while sending a file or waiting for its answer.
    timeout: float = 300.0
    #: Seconds one request may take in all, sending and answer: an appliance that answers a
    #: byte now and then never trips `timeout`. Enough for a 950 MB file at 1 MB/s.
    deadline: float = 3600.0

    backlog_high: int = 50
    backlog_low: int = 20
    backlog_interval: float = 5.0

    #: Bytes read from disk per write: big enough for throughput, small enough for memory.
    chunk_size: int = 1 << 20

    def __post_init__(self) -> None:
        if not self.host:
            raise SettingsError("no appliance host: give --host HOST (or FASTFEED_HOST)")
        if self.port is not None and not 0 < self.port < 65536:
            raise SettingsError(f"port {self.port} is not a TCP port")
        if self.deadline <= 0 or self.timeout <= 0 or self.connect_timeout <= 0:
            raise SettingsError("timeouts and the deadline must be more than 0 seconds")
        if self.concurrency < 1:
            raise SettingsError("concurrency must be at least 1")
        if self.retries < 0 or self.disk_full_retries < 0:
            raise SettingsError("retries cannot be negative")
        if not 0 <= self.backlog_low <= self.backlog_high:
            raise SettingsError(
                f"backlog marks must satisfy 0 <= low ({self.backlog_low}) "
                f"<= high ({self.backlog_high})"
            )
        if self.chunk_size < 1024:
            raise SettingsError("chunk size must be at least 1 KiB")
        if (self.client_key or self.client_key_password) and not self.client_cert:
            raise SettingsError("a client key needs its certificate: give --client-cert too")
        if not self.https and (self.cacert or self.client_cert or self.insecure):
            raise SettingsError("TLS options (--cacert, --client-cert, --insecure) need HTTPS")

    @property
    def effective_port(self) -> int:
        if self.port is not None:
            return self.port
        return HTTPS_PORT if self.https else HTTP_PORT

    @property
    def base_url(self) -> str:
        scheme = "https" if self.https else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.effective_port}"

    @property
    def target(self) -> str:
        """The journal's key for this appliance: the same files pushed elsewhere are new."""
        return f"{self.host}:{self.effective_port}"

    def ssl_context(self) -> ssl.SSLContext:
        """The verification the push will use; a bad CA or key file is reported here, early."""
        import ssl  # here: a build's options are these settings' too, and need no TLS

        # ssl's errors do not name the file: the message does.
        try:
            context = ssl.create_default_context(cafile=self.cacert)
        except (OSError, ssl.SSLError) as exc:
            cas = f"--cacert {self.cacert}" if self.cacert else "the system's CA certificates"
            raise SettingsError(f"cannot load {cas}: {_reason(exc)}") from None
        if self.client_cert:
            password = self.client_key_password.reveal() if self.client_key_password else None
            try:
                context.load_cert_chain(self.client_cert, self.client_key, password)
            except OSError as exc:  # ssl.SSLError is one
                key = f" with --client-key {self.client_key}" if self.client_key else ""
                problem = self._client_problem(exc)
                raise SettingsError(
                    f"cannot load --client-cert {self.client_cert}{key}: {problem}"
                ) from None
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def _client_problem(self, exc: OSError) -> str:
        """What is wrong with the client certificate or its key: OpenSSL says "PEM lib" alike
        for a file without a certificate, a missing key and a wrong password, so each file is
        looked at on its own."""
        import ssl

        if not isinstance(exc, ssl.SSLError):  # the system's error: a missing file
            return _reason(exc)
        cert, key = self.client_cert or "", self.client_key or self.client_cert or ""
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
        except ssl.SSLError:
            return f"{cert} holds no certificate in PEM"
        try:
            with open(key, "rb") as file:
                text = file.read(1 << 20)
        except OSError as problem:
            return f"cannot read {key}: {_reason(problem)}"
        option = "--client-key" if self.client_key else "--client-cert"
        if b"PRIVATE KEY-----" not in text:
            where = f"--client-key {key}" if self.client_key else f"--client-cert {cert}"
            return (
                f"{where} holds no private key in PEM: give the client certificate's key with "
                "--client-key (is it the client's certificate? a CA's comes without its key)"
            )
        if self.client_key_password is not None:
            return (
                f"the private key in {option} {key} cannot be read with the password given: "
                f"check --client-key-password ({_reason(exc)})"
            )
        return f"the private key in {option} {key} cannot be read: {_reason(exc)}"


def _reason(exc: OSError) -> str:
    """What the system or OpenSSL said, without Python's "[Errno 2]"."""
    return exc.strerror or str(exc)


def http_client(settings: PushSettings, connections: int = 1) -> httpx.AsyncClient:
    """An HTTP client for the appliance: its verification, its timeouts, no proxy variables
    (a feed must reach the appliance itself, and HTTPS_PROXY is often set for the internet)."""
    import httpx  # here, so that commands which push nothing do not pay for importing it

    return httpx.AsyncClient(
        verify=settings.ssl_context() if settings.https else False,
        timeout=httpx.Timeout(settings.timeout, connect=settings.connect_timeout),
        limits=httpx.Limits(max_connections=connections),
        trust_env=False,
    )
