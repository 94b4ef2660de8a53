"""The code's rooms: what the layout rules say, checked on the files themselves.

- No module of the library's core, runtime, kv-store or benchmarks is over
  :data:`MODULE_LINES_MAX` lines (the guide's "a module over 600 lines is a
  room that wants cutting"), and the core's facade is at most
  :data:`FACADE_LINES_MAX`.
- The runtime never names a protocol: what differs between protocols is
  declared in :mod:`sdpaxos.protocols` (``Capabilities``), so a protocol's name
  or title as a string in :mod:`sdpaxos.runtime` (other than in a docstring) is
  a capability found by name again.

The import rules (which room may import which, no cycles) are import-linter
contracts in ``pyproject.toml``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sdpaxos.protocols import PROTOCOL_NAMES, protocol

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES_MAX = 600
FACADE_LINES_MAX = 500
#: Strings in the runtime that equal a protocol's name but mean something else.
NOT_A_PROTOCOL = {
    ("frames.py", "MAGIC"),  # the hello's magic word: the project's, not a protocol's
}


def _modules(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    "path",
    _modules("sdpaxos/core", "sdpaxos/runtime", "kvstore", "bench"),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_module_of_the_core_runtime_kvstore_or_bench_is_over_the_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MODULE_LINES_MAX, f"{path.relative_to(ROOT)}: {lines} lines"


def test_the_cores_facade_keeps_routing_and_composition_only() -> None:
    lines = len((ROOT / "sdpaxos" / "core" / "replica.py").read_text().splitlines())
    assert lines <= FACADE_LINES_MAX


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _exempt(tree: ast.Module, name: str) -> set[int]:
    """The constants assigned to the names :data:`NOT_A_PROTOCOL` allows in ``name``."""
    allowed = {target for module, target in NOT_A_PROTOCOL if module == name}
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id in allowed for t in node.targets)
        ):
            found.add(id(node.value))
    return found


def protocol_literals(source: str, name: str) -> list[tuple[int, str]]:
    """Every string in ``source`` (not a docstring) that names a protocol: one
    equal to a protocol's name or title, or one that says a baseline's name or
    any protocol's title (the project and package are called ``sdpaxos`` too:
    ``"sdpaxos cluster CA"`` or ``"python -m sdpaxos"`` name those, not a protocol)."""
    titles = {protocol(n).title for n in PROTOCOL_NAMES}
    baselines = [n for n in PROTOCOL_NAMES if n.lower() != "sdpaxos"]
    words = sorted({*baselines, *titles}, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, words)) + r")(?![\w-])")
    exact = {*PROTOCOL_NAMES, *titles}
    tree = ast.parse(source)
    skip = _docstrings(tree) | _exempt(tree, name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
            if text in exact or pattern.search(text) or pattern.search(text.lower()):
                found.append((node.lineno, text))
    return found


def test_the_runtime_names_no_protocol() -> None:
    found = {
        str(path.relative_to(ROOT)): hits
        for path in _modules("sdpaxos/runtime")
        if (hits := protocol_literals(path.read_text(), path.name))
    }
    assert found == {}


@pytest.mark.parametrize(
    "line",
    [
        'fast = self.protocol.name == "sdpaxos"',
        'x = frozenset({"epaxos"})',
        'title = "Multi-Paxos"',
        'hello = None if name == "SDPaxos" else name',
        'reason = f"{x} runs mencius"',
        'help = "trace events (SDPaxos only)"',
    ],
)
def test_the_check_sees_a_protocol_named_in_code(line: str) -> None:
    assert protocol_literals(line + "\n", "node.py")


@pytest.mark.parametrize(
    "line",
    [
        'MAGIC = "sdpaxos"',  # in frames.py only
        'usage = "python -m sdpaxos status --config FILE"',
        'prefix = "sdpaxos-local-"',
        'metric = "sdpaxos_view"',
        'logger = "sdpaxos.runtime.node"',
        'issuer = "sdpaxos cluster CA"',
    ],
)
def test_the_check_leaves_the_package_name_alone(line: str) -> None:
    assert protocol_literals(line + "\n", "frames.py") == []


def _packages_of_the_repository() -> set[str]:
    """Every top-level Python package in the repository (a directory with an
    ``__init__.py``), the benchmarks included: all of them are checked for cycles."""
    return {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in {"tests", "docs", "tla"}
    }


def test_the_no_cycles_contract_covers_every_package_of_the_repository() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    acyclic = [c for c in config["contracts"] if c["name"].startswith("no import cycles anywhere")]
    assert len(acyclic) == 1 and acyclic[0]["type"] == "acyclic_siblings"
    packages = _packages_of_the_repository()
    assert {"sdpaxos", "kvstore", "bench"} <= packages  # the check sees them
    assert set(acyclic[0]["ancestors"]) == packages
    assert packages <= set(config["root_packages"])
