"""The architecture as rules a change cannot break unnoticed: receivers over shared layers, one
exception tree, a public namespace that resolves."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import fastfeed
import pytest

PACKAGE = Path(fastfeed.__file__).parent
RECEIVERS = {"gsa", "thunderstone", "seedlist"}
#: Shared code lives below the receivers: it imports none of them, nor the front ends.
SHARED = {"sets", "delivery", "errors", "progress"}
FRONT_ENDS = {"cli", "emulator"}


def part_of(module: str) -> str:
    """The top-level part of fastfeed a dotted module name belongs to."""
    return module.split(".")[1].removesuffix(".py") if module.count(".") else ""


def fastfeed_imports(path: Path) -> set[str]:
    """The fastfeed modules a source file imports, wherever the import stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("fastfeed.")}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "fastfeed":
                found |= {f"fastfeed.{a.name}" for a in node.names}
            elif node.module.startswith("fastfeed."):
                found.add(node.module)
    return found


def sources(root: Path) -> list[tuple[str, Path]]:
    """(part, file) for every source file under `root`, a tree laid out like the package."""
    return [
        (str(path.relative_to(root)).split("/")[0].removesuffix(".py"), path)
        for path in sorted(root.rglob("*.py"))
    ]


def violations(root: Path) -> list[str]:
    broken = []
    for part, path in sources(root):
        for module in fastfeed_imports(path):
            target = part_of(module)
            if part in RECEIVERS and target in RECEIVERS and target != part:
                broken.append(f"{path.relative_to(root)} imports {module} (another receiver)")
            if part in SHARED and target in RECEIVERS | FRONT_ENDS:
                broken.append(f"{path.relative_to(root)} imports {module} (shared code)")
    return broken


def test_a_receiver_imports_no_other_receiver_and_shared_code_no_receiver() -> None:
    assert violations(PACKAGE) == []


def test_the_rule_catches_what_breaks_it(tmp_path: Path) -> None:
    (tmp_path / "thunderstone").mkdir()
    (tmp_path / "thunderstone" / "push.py").write_text(
        "def f():\n    from fastfeed.gsa.push import push\n"
    )
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "build.py").write_text("from fastfeed import seedlist\n")
    assert violations(tmp_path) == [
        "sets/build.py imports fastfeed.seedlist (shared code)",
        "thunderstone/push.py imports fastfeed.gsa.push (another receiver)",
    ]


def all_modules() -> list[str]:
    names = ["fastfeed"]
    for info in pkgutil.walk_packages([str(PACKAGE)], "fastfeed."):
        if info.name != "fastfeed.__main__":
            names.append(info.name)
    return names


def test_every_exception_is_under_the_one_root() -> None:
    outside = []
    for name in all_modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name or not issubclass(cls, BaseException):
                continue
            if issubclass(cls, Warning):  # warnings are not errors: nothing stops on them
                continue
            if not issubclass(cls, fastfeed.FastfeedError):
                outside.append(f"{name}.{cls_name}")
    assert outside == []
    assert issubclass(fastfeed.RecordError, fastfeed.FeedError)
    assert issubclass(fastfeed.FeedError, fastfeed.FastfeedError)


@pytest.mark.parametrize("name", fastfeed.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(fastfeed, name) is not None


def test_importing_fastfeed_pays_for_no_pusher_validator_or_server() -> None:
    import subprocess
    import sys

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fastfeed; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"httpx", "lxml", "aiohttp"}.isdisjoint(loaded)


def test_the_record_schema_is_defined_once() -> None:
    # The Rust core's field list is the schema; the TypedDict of the batch API is checked
    # against it, so that a field added in one place fails here until it is added in the other.
    from fastfeed import Record, _core

    assert set(Record.__required_keys__ | Record.__optional_keys__) == set(_core.RECORD_FIELDS)
