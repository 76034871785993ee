"""Shared fixtures: real TLS certificates (trustme) and a real emulated appliance on loopback."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from fastfeed.emulator import Emulator


@dataclass(frozen=True)
class TLSFiles:
    """A test CA and a server certificate for 127.0.0.1 and localhost, written as PEM files."""

    ca: trustme.CA
    ca_path: Path
    cert_path: Path
    key_path: Path

    @property
    def server(self) -> tuple[Path, Path]:
        """(certificate, key), as `Emulator(tls=...)` takes them."""
        return self.cert_path, self.key_path

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that trusts only the test CA (for httpx `verify=` or http.client)."""
        context = ssl.create_default_context(cafile=str(self.ca_path))
        return context


def cli_target(emulator: Emulator, tls: TLSFiles) -> list[str]:
    """The command-line options that push to `emulator`, trusting its certificate, with
    test-sized delays."""
    return [
        "--host", "127.0.0.1", "--port", str(emulator.port), "--cacert", str(tls.ca_path),
        "--backoff-base", "0.01", "--backlog-interval", "0.05",
    ]  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The command line as a new user meets it: none of the shell's FASTFEED_* variables, and a
    working directory of the test's own (so no fastfeed.toml is found by accident)."""
    for name in list(os.environ):
        if name.startswith("FASTFEED_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    directory = tmp_path / "tls"
    directory.mkdir()
    files = TLSFiles(ca, directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    ca.cert_pem.write_to_path(str(files.ca_path))
    cert.cert_chain_pems[0].write_to_path(str(files.cert_path))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(files.cert_path), append=True)
    cert.private_key_pem.write_to_path(str(files.key_path))
    return files


@pytest.fixture
def make_emulator(tmp_path: Path, tls: TLSFiles) -> Iterator[Callable[..., Emulator]]:
    """Starts emulators with the given `Emulator` options (HTTPS with `tls` unless tls=None);
    stops them at the end of the test."""
    started: list[Emulator] = []

    def make(**options: Any) -> Emulator:
        options.setdefault("data_dir", tmp_path / f"emulator{len(started)}")
        options.setdefault("tls", tls.server)
        emulator = Emulator(**options).start()
        started.append(emulator)
        return emulator

    yield make
    for emulator in started:
        emulator.stop()


@pytest.fixture
def emulator(make_emulator: Callable[..., Emulator]) -> Emulator:
    """A started HTTPS emulator on 127.0.0.1 (ephemeral port) that applies feeds at once;
    trust it with `tls.client_context()`."""
    return make_emulator()


# Fixtures for the uploader's tests (push, journal, CLI).


@pytest.fixture
def make_feed_set(tmp_path: Path) -> Callable[..., Path]:
    """Builds a real feed set with FeedWriter: `make_feed_set("docs", "full", files=3)` writes
    3 files of `per_file` records each (first one `full`) and returns its directory."""
    from fastfeed import FeedWriter

    def make(
        datasource: str,
        feedtype: str = "incremental",
        *,
        files: int = 3,
        per_file: int = 5,
        name: str | None = None,
        binary: bool = False,
    ) -> Path:
        out = tmp_path / (name or f"set-{datasource}")
        records = [
            {
                "url": f"http://example.com/{datasource}/{i}",
                "mimetype": "application/octet-stream" if binary else "text/plain",
                "content": bytes([i % 256]) * 300 + b"\x00\xff" if binary else f"doc {i}",
                "metadata": {"n": str(i)},
            }
            for i in range(files * per_file)
        ]
        with FeedWriter(out, datasource, feedtype, max_records=per_file) as writer:  # type: ignore[arg-type]
            writer.add_batch(records)  # type: ignore[arg-type]
        return out

    return make


@pytest.fixture
def push_settings(tls: TLSFiles) -> Callable[..., Any]:
    """PushSettings for an emulator, verifying its certificate, with test-sized delays."""
    from fastfeed.delivery.settings import PushSettings

    def make(emulator: Emulator, **overrides: Any) -> PushSettings:
        values: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": emulator.port,
            "cacert": str(tls.ca_path),
            "backoff_base": 0.01,
            "backoff_max": 0.05,
            "disk_full_delay": 0.05,
            "backlog_interval": 0.02,
        }
        values.update(overrides)
        return PushSettings(**values)

    return make
