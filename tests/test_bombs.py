"""zlib bombs: a small feed whose content inflates a thousandfold. Every decoder inflates with
a bound, and refuses what passes it, instead of filling the memory."""

from __future__ import annotations

import base64
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TLSFiles
from fastfeed.emulator import Emulator
from test_emulator import feed, group, push


def bomb(inflated: int) -> str:
    """base64compressed zeros: about a thousandth of `inflated` in size."""
    deflater = zlib.compressobj(9)
    step = bytes(64 << 20)
    parts = [
        deflater.compress(step[: min(len(step), inflated - i)])
        for i in range(0, inflated, len(step))
    ]
    return base64.b64encode(b"".join(parts) + deflater.flush()).decode()


def compressed_record(url: str, content: str) -> str:
    return (
        f'<record url="{url}" mimetype="application/octet-stream">'
        f'<content encoding="base64compressed">{content}</content></record>'
    )


@pytest.fixture(scope="module")
def gigabyte_bomb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("bomb") / "docs-000001.xml"
    path.write_bytes(
        feed("docs", "full", group(compressed_record("http://e.com/bomb", bomb(10**9 + 1))))
    )
    yield path


def test_validate_refuses_a_bomb_past_the_protocols_bound_in_flat_memory(
    gigabyte_bomb: Path,
) -> None:
    # Under a 1.5 GB address-space limit a validator that inflated the whole content would die
    # of MemoryError; a bounded one reports the problem.
    script = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
        from fastfeed.gsa.validate import validate_file
        for problem in validate_file({str(gigabyte_bomb)!r}):
            print(problem)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "base64compressed content is too large: it inflates to more than 1,000,000,000" in (
        done.stdout
    )


def test_the_emulator_skips_a_record_whose_content_inflates_past_its_document_limit(
    tls: TLSFiles, emulator: Emulator
) -> None:
    records = group(
        compressed_record("http://e.com/bomb", bomb(150 * 10**6)),
        compressed_record("http://e.com/fine", base64.b64encode(zlib.compress(b"fine")).decode()),
    )
    with httpx.Client(verify=tls.client_context(), timeout=30) as client:
        assert (
            push(client, emulator, "docs", "full", feed("docs", "full", records)).text == "Success"
        )
    emulator.wait_idle()

    assert set(emulator.documents("docs")) == {"http://e.com/fine"}
    [pushed] = emulator.pushes()
    assert pushed.in_error == 1 and "inflates to more than 100,000,000 bytes" in pushed.outcome
