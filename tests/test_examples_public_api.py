"""The examples use gpupipe's documented API only (issue #34): every ``from gpupipe... import name`` and
every ``gpupipe.a.b`` they write names something in a public namespace's ``__all__`` (``gpupipe`` and the
public modules it exports), so a user copying an example copies nothing internal."""

import ast
import importlib
import types
from pathlib import Path

import pytest

import gpupipe

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.py"))


def public(namespace: str, name: str) -> bool:
    """Whether ``namespace.name`` is public: ``namespace`` is gpupipe or a module in ``gpupipe.__all__``,
    and ``name`` is in its ``__all__`` (a module without one, documented whole as ``gpupipe.presets`` is:
    a name of its own without a leading underscore)."""
    if namespace != "gpupipe":
        parts = namespace.split(".")
        if len(parts) != 2 or parts[1] not in gpupipe.__all__:
            return False
    module = importlib.import_module(namespace)
    if hasattr(module, "__all__"):
        return name in module.__all__
    return not name.startswith("_") and getattr(getattr(module, name, None), "__module__", None) == namespace


def gpupipe_names(tree: ast.AST) -> list[tuple[str, str]]:
    """``(namespace, name)`` for each gpupipe name the code uses: imports and attribute chains."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpupipe":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name.rpartition(".")[0], a.name.rpartition(".")[2]) for a in node.names
                      if a.name.startswith("gpupipe.")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "gpupipe":
            found.append(("gpupipe", node.attr))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
              and isinstance(node.value.value, ast.Name) and node.value.value.id == "gpupipe"
              and isinstance(getattr(gpupipe, node.value.attr, None), types.ModuleType)):
            found.append((f"gpupipe.{node.value.attr}", node.attr))
    return found


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_an_example_uses_only_public_names(script):
    names = gpupipe_names(ast.parse(script.read_text()))
    internal = sorted({f"{ns}.{name}" for ns, name in names if not public(ns, name)})
    assert internal == [], f"{script.name} uses internal names: {internal}"


def test_the_check_sees_internal_names():
    code = ("from gpupipe.cli import run\nfrom gpupipe.sources.files import split_folders_message\n"
            "import gpupipe\ngpupipe.loader\ngpupipe.pack.is_packed\ngpupipe.amp.AMP_CHOICES\n")
    names = gpupipe_names(ast.parse(code))
    assert {f"{ns}.{n}" for ns, n in names if not public(ns, n)} == {
        "gpupipe.sources.files.split_folders_message", "gpupipe.amp", "gpupipe.amp.AMP_CHOICES"}
    assert ("gpupipe", "loader") in names and ("gpupipe.pack", "is_packed") in names
