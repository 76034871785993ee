"""The README's Python snippets run as written: each ```python block, in the order of the README,
in a fresh interpreter and one directory of its own (a later block may use what an earlier one
made, as a reader following the README would)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line, code) of each ```python block of a Markdown text."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_every_python_block_of_the_readme_runs(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 2  # the Python API and pushing to the emulator over HTTPS
    for line, code in blocks:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"README.md:{line}:\n{done.stderr}"


def test_the_extraction_finds_blocks_and_their_lines() -> None:
    text = "# t\n```python\nprint(1)\n```\n\n```sh\nls\n```\n```python\nx = 2\n```\n"
    assert python_blocks(text) == [(2, "print(1)\n"), (9, "x = 2\n")]
