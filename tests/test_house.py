"""The house rules, checked on the source: ``__init__`` files that only re-export, small modules, and
one home for target kinds (import cycles and layers: ``test_layout.py``; the public surface is checked
against the API pages in ``test_docs.py``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List

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


@pytest.mark.parametrize("name", [n for n, p in MODULES.items() if p.name == "__init__.py"])
def test_package_init_files_only_re_export(name):
    """An ``__init__.py`` holds a docstring, imports and ``__all__``; the logic lives in modules. Imports
    for type checkers only (``if TYPE_CHECKING:``, names imported on first use) are imports too."""
    tree = ast.parse(MODULES[name].read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING" and not node.orelse
                and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)):
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
