"""The house rules, checked on the source: no import cycles, ``__init__`` files that only re-export,
small modules, and one home for target kinds (the public surface is checked against the API pages in
``test_docs.py``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

import gpupipe
from gpupipe.targets import HANDLERS, TargetKind

PACKAGE = Path(gpupipe.__file__).parent
#: The longest a module may grow (a longer one holds two ideas).
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def top_level_imports(path: Path) -> List[ast.stmt]:
    """The import statements run when the module is imported (not those under ``if TYPE_CHECKING:``
    or inside functions)."""
    found: List[ast.stmt] = []

    def visit(body):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return found


def imported_modules(name: str, path: Path) -> Set[str]:
    """The gpupipe modules ``name`` imports when it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in top_level_imports(path):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([node.module] if node.module else []))
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            out.add(candidate if candidate in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle of ``graph`` as a list of modules, or ``[]``."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def walk(node: str) -> List[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return []


def test_the_module_graph_has_no_cycles():
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    assert sum(len(v) for v in graph.values()) > 150, "the graph was read (every module imports others)"
    assert "gpupipe.targets.kinds" in graph["gpupipe.targets.registry"] | graph["gpupipe.targets.base"]
    assert find_cycle(graph) == []


def test_a_cycle_is_found_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) == []


@pytest.mark.parametrize("name", [n for n, p in MODULES.items() if p.name == "__init__.py"])
def test_package_init_files_only_re_export(name):
    """An ``__init__.py`` holds a docstring, imports and ``__all__``; the logic lives in modules."""
    tree = ast.parse(MODULES[name].read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue
        pytest.fail(f"{name} holds {ast.unparse(node).splitlines()[0]!r}: move it into a module")


def test_no_module_is_over_the_line_limit():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert len(MODULES) > 80 and long == {}


def test_every_target_kind_has_one_handler():
    assert set(HANDLERS) == set(TargetKind)
    assert all(HANDLERS[kind].kind is kind for kind in TargetKind)


def kind_branches(path: Path) -> List[str]:
    """Comparisons with a ``TargetKind`` member (``kind is TargetKind.MASK``, ``in (...)``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and "TargetKind." in ast.unparse(node):
            out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_only_the_target_handlers_branch_on_the_kind():
    """Adding a kind is one handler: backends, sources and the packer ask it instead of comparing kinds."""
    outside = {name: kind_branches(path) for name, path in MODULES.items() if not name.startswith("gpupipe.targets")}
    allowed = {"gpupipe.sources.base": 1}  # boxes_of() refuses a source without boxes
    found = {name: branches for name, branches in outside.items() if branches}
    assert {name: len(b) for name, b in found.items()} == allowed, found
    assert kind_branches(MODULES["gpupipe.sources.base"])  # the scan sees comparisons
