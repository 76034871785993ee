"""The architecture as rules a change cannot break unnoticed: receivers over shared layers,
command modules over shared option blocks, one exception tree, a public namespace that
resolves. Each rule is read from the source (`ast`) and has a test that breaks it on purpose."""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
from pathlib import Path

import click
import fastfeed
import pytest

PACKAGE = Path(fastfeed.__file__).parent
RECEIVERS = {"gsa", "thunderstone", "seedlist"}
#: Shared code lives below the receivers: it imports none of them, nor the front ends.
SHARED = {"sets", "delivery", "errors", "progress", "servers"}
FRONT_ENDS = {"cli", "emulator"}
#: The emulated appliance stands where an appliance does, facing every receiver: it shares their
#: lower layers (the formats, the codecs) and imports none of them, nor the command line.
EMULATOR = "emulator"
#: What the command modules of `cli/` share; a command module imports no other command's module.
CLI_SHARED = {"commands", "options", "reports", "serving", "settings"}


def part_of(module: str) -> str:
    """The top-level part of fastfeed a dotted module name belongs to."""
    return module.split(".")[1].removesuffix(".py") if module.count(".") else ""


def module_of(root: Path, path: Path) -> list[str]:
    """The dotted name of a source file under `root`, a tree laid out like the package."""
    parts = ["fastfeed", *path.relative_to(root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def fastfeed_imports(root: Path, path: Path) -> set[str]:
    """The fastfeed modules a source file imports, wherever the import stands, relative imports
    resolved. A name imported from a module counts as a module too (`from fastfeed.cli import
    push`): it may be one."""
    found = set()
    package = module_of(root, path)
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("fastfeed.")}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.split(".")[0] == "fastfeed":
                found |= {f"{module}.{a.name}" for a in node.names}
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
        for module in sorted(fastfeed_imports(root, path)):
            target = part_of(module)
            if part in RECEIVERS and target in RECEIVERS and target != part:
                broken.append(f"{path.relative_to(root)} imports {module} (another receiver)")
            if part in SHARED and target in RECEIVERS | FRONT_ENDS:
                broken.append(f"{path.relative_to(root)} imports {module} (shared code)")
            if part == EMULATOR and target in RECEIVERS | FRONT_ENDS - {EMULATOR}:
                broken.append(f"{path.relative_to(root)} imports {module} (the emulator)")
            within_cli = set(module.split(".")[2:3])
            if is_command(root, path) and target == "cli" and not within_cli <= CLI_SHARED:
                broken.append(f"{path.relative_to(root)} imports {module} (another command)")
    return broken


def is_command(root: Path, path: Path) -> bool:
    """A module of `cli/` that registers commands."""
    parts = path.relative_to(root).parts
    return parts[0] == "cli" and path.stem not in CLI_SHARED | {"__init__"}


def test_receivers_and_the_emulator_import_no_receiver_and_shared_code_none() -> None:
    assert violations(PACKAGE) == []


def test_the_rule_catches_what_breaks_it(tmp_path: Path) -> None:
    (tmp_path / "thunderstone").mkdir()
    (tmp_path / "thunderstone" / "push.py").write_text(
        "def f():\n    from fastfeed.gsa.push import push\n"
    )
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "build.py").write_text("from fastfeed import seedlist\n")
    (tmp_path / "seedlist").mkdir()
    (tmp_path / "seedlist" / "records.py").write_text(
        "from ..gsa.validate import decode_base64\nfrom .tokens import tokens\n"
    )
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "groups.py").write_text(
        "from fastfeed.cli.options import set_options\nfrom fastfeed.cli.push import report\n"
    )
    (tmp_path / "emulator").mkdir()
    (tmp_path / "emulator" / "feeder.py").write_text(
        "from fastfeed.sets.validate import validate_file\nfrom fastfeed.emulator import index\n"
        "from fastfeed.gsa.writer import FeedWriter\n"
        "def f():\n    from fastfeed.cli.demo import demo_command\n"
    )
    assert violations(tmp_path) == [
        "cli/groups.py imports fastfeed.cli.push.report (another command)",
        "emulator/feeder.py imports fastfeed.cli.demo.demo_command (the emulator)",
        "emulator/feeder.py imports fastfeed.gsa.writer.FeedWriter (the emulator)",
        "seedlist/records.py imports fastfeed.gsa.validate.decode_base64 (another receiver)",
        "sets/build.py imports fastfeed.seedlist (shared code)",
        "thunderstone/push.py imports fastfeed.gsa.push.push (another receiver)",
    ]


#: Exception classes of the package that are not under `FastfeedError`, and why.
OUTSIDE_THE_TREE = {
    "fastfeed.sets.writer.FeedWarning": "a warning, not an error: nothing stops on it",
    "fastfeed.sets.journal.JournalWarning": "a warning, not an error: nothing stops on it",
}

#: Base names that make a class defined inside a function look like an exception.
_EXCEPTION_NAMES = {
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
}


def class_definitions(root: Path) -> list[tuple[str, str, ast.ClassDef, bool]]:
    """(module, qualified name, node, whether it is defined inside a function) of every class
    defined in the source files under `root`, a tree laid out like the package."""
    found = []

    def visit(module: str, node: ast.AST, prefix: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                found.append((module, prefix + child.name, child, in_function))
                visit(module, child, f"{prefix}{child.name}.", in_function)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(module, child, f"{prefix}{child.name}.", True)
            else:
                visit(module, child, prefix, in_function)

    for _, path in sources(root):
        visit(".".join(module_of(root, path)), ast.parse(path.read_text()), "", False)
    return found


def exceptions_outside_the_tree(root: Path, package: str) -> list[str]:
    """The exception classes defined under `root` (imported as `package`) that do not derive
    from `FastfeedError` and are not allowed to, and those that cannot be checked."""
    outside = []
    for module, qualname, node, in_function in class_definitions(root):
        module = package + module.removeprefix("fastfeed")
        name = f"{module}.{qualname}"
        if in_function:  # no import reaches it: judged by the names of its bases
            bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
            if bases & _EXCEPTION_NAMES or any(b.endswith(("Error", "Exception")) for b in bases):
                outside.append(f"{name} (defined in a function: cannot be checked)")
            continue
        cls = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
        error = isinstance(cls, type) and issubclass(cls, BaseException)
        if error and not issubclass(cls, fastfeed.FastfeedError) and name not in OUTSIDE_THE_TREE:
            outside.append(name)
    return outside


def test_every_exception_is_under_the_one_root() -> None:
    assert exceptions_outside_the_tree(PACKAGE, "fastfeed") == []
    assert issubclass(fastfeed.RecordError, fastfeed.FeedError)
    assert issubclass(fastfeed.FeedError, fastfeed.FastfeedError)


def test_the_drawn_tree_and_the_readme_name_every_public_error() -> None:
    """A user learns the errors from errors.py's tree and the README's list: a new one is in
    both, drawn under its parent."""
    import fastfeed.errors

    doc = fastfeed.errors.__doc__ or ""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    drawn = {}  # the column of each name in the tree, the paragraph after the first line
    for line in doc.split("\n\n")[1].splitlines():
        name = line.lstrip(" │├└─").split()[0]
        drawn[name] = line.index(name)
    for name in fastfeed.errors.__all__:
        # The tree steps in by 4 columns a generation, from the root at column 4.
        depth = getattr(fastfeed.errors, name).__mro__.index(fastfeed.FastfeedError)
        assert drawn.get(name) == 4 + 4 * depth, f"{name} is not drawn under its parent"
        assert f"`{name}`" in readme, f"{name} is not in the README's list of errors"


def test_the_allowed_exceptions_exist() -> None:
    """An allowance outlives nothing it was made for."""
    defined = {f"{module}.{name}" for module, name, _, _ in class_definitions(PACKAGE)}
    assert set(OUTSIDE_THE_TREE) <= defined


def test_the_exception_rule_catches_what_breaks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "broken_fastfeed"
    (tree / "gsa").mkdir(parents=True)
    (tree / "__init__.py").write_text("")
    (tree / "gsa" / "__init__.py").write_text("")
    (tree / "gsa" / "push.py").write_text(
        "from fastfeed.errors import PushError\n"
        "class Refused(PushError): ...\n"
        "class Stalled(TimeoutError): ...\n"
        "class Pusher:\n"
        "    class Gone(Exception): ...\n"
        "def push():\n"
        "    class Retry(ValueError): ...\n"
        "    class Plan: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert exceptions_outside_the_tree(tree, "broken_fastfeed") == [
        "broken_fastfeed.gsa.push.Stalled",
        "broken_fastfeed.gsa.push.Pusher.Gone",
        "broken_fastfeed.gsa.push.push.Retry (defined in a function: cannot be checked)",
    ]


@pytest.mark.parametrize("name", fastfeed.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(fastfeed, name) is not None


def test_every_error_of_the_tree_is_public() -> None:
    import fastfeed.errors

    assert set(fastfeed.errors.__all__) <= set(fastfeed.__all__)


def test_importing_fastfeed_pays_for_no_pusher_validator_server_or_store() -> None:
    import subprocess
    import sys

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fastfeed; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"httpx", "lxml", "aiohttp", "sqlite3"}.isdisjoint(loaded)


def test_a_build_on_the_command_line_imports_only_what_building_needs(tmp_path: Path) -> None:
    # Every `fastfeed build` starts a Python: what it imports and never uses is a fixed cost of
    # each build (httpx, lxml and asyncio were a third of it, 0.06 s of 0.18; the other
    # commands' modules, a sync's state and importlib.metadata half of what was left).
    import subprocess
    import sys

    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"url": "http://docs.example.com/a", "content": "a"}\n')
    build = [
        "fastfeed",
        "build",
        str(corpus),
        "--datasource",
        "docs",
        "--out",
        str(tmp_path / "out"),
    ]
    # Said by an exit handler: a build ends its process without returning (see
    # `test_a_build_ends_its_process_at_once_having_said_all`); `check` asserts its status.
    script = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print(' '.join(sys.modules)))\n"
        f"sys.argv = {build!r}\n"
        "runpy.run_module('fastfeed', run_name='__main__')\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert (tmp_path / "out" / "manifest.jsonl").is_file()
    assert {"httpx", "lxml", "aiohttp", "asyncio"}.isdisjoint(loaded)
    # A sync's state and snapshots, the version (`--version` reads it), TLS (`push` needs it),
    # suggestions for a mistyped command, the line to run again after an interruption, a
    # Thunderstone build.
    unused = {"fastfeed.sets.sync", "fastfeed.sets.state", "sqlite3", "importlib.metadata", "ssl"}
    unused |= {"difflib", "shlex", "fastfeed.thunderstone"}
    assert unused.isdisjoint(loaded)
    commands = {m for m in loaded if m.startswith("fastfeed.cli.")} - {
        f"fastfeed.cli.{shared}" for shared in CLI_SHARED
    }
    assert commands == {"fastfeed.cli.build"}


def test_the_command_line_names_each_command_where_it_is_defined() -> None:
    # `fastfeed` imports a command's module when the command runs: a command renamed in its
    # module but not in the table would no longer run.
    from fastfeed.cli import COMMANDS, fastfeed

    ctx = click.Context(fastfeed)
    for name in COMMANDS:
        command = fastfeed.get_command(ctx, name)
        assert command is not None and command.name == name, name


def test_the_record_schema_is_defined_once() -> None:
    # The Rust core's field list is the schema; the TypedDict of the batch API is checked
    # against it, so that a field added in one place fails here until it is added in the other.
    from fastfeed import Record, _core

    assert set(Record.__required_keys__ | Record.__optional_keys__) == set(_core.RECORD_FIELDS)
