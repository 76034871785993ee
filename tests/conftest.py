"""Shared fixtures: real TLS certificates (trustme) and a real emulated appliance on loopback."""

from __future__ import annotations

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
