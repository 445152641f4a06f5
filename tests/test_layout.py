"""The layout (issue #32): layers that import one way, no circle, at most 12 top-level modules, and the
module paths moved in 0.3 still importable with a DeprecationWarning naming the new home."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gpupipe
from gpupipe._compat import MOVED_MODULES

ROOT = Path(__file__).resolve().parents[1]


def _layers():
    spec = importlib.util.spec_from_file_location("layers", ROOT / "docs" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layers = _layers()


def test_every_module_has_a_layer():
    assert [m for m in layers.imports() if layers.layer_of(m) < 0] == []


def test_no_import_climbs_a_layer():
    assert layers.upward() == []


def test_no_modules_import_each_other_in_a_circle_even_under_type_checking():
    assert layers.cycles() == []


def test_the_checks_see_a_climbing_import_and_a_circle(tmp_path, monkeypatch):
    """The two checks above are not blind: a copy of the package with one import added from a
    foundation module to the loader is reported as climbing and as a circle."""
    copy = tmp_path / "gpupipe"
    subprocess.run(["cp", "-r", str(ROOT / "gpupipe"), str(copy)], check=True)
    errors = copy / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _late():\n    from .loading import loader  # noqa: F401\n")
    monkeypatch.setattr(layers, "ROOT", tmp_path)
    monkeypatch.setattr(layers, "PACKAGE", copy)
    assert any(line.startswith("gpupipe.errors (foundation) -> gpupipe.loading.loader") for line in layers.upward())
    assert any("gpupipe.errors" in circle and "gpupipe.loading.loader" in circle for circle in layers.cycles())


def test_at_most_twelve_top_level_modules():
    top = sorted(p.name for p in (ROOT / "gpupipe").glob("*.py") if p.name != "__main__.py")  # `python -m gpupipe`
    assert len(top) <= 12, top


def test_the_development_page_draws_the_generated_graph():
    page = (ROOT / "docs" / "development.md").read_text()
    assert "{{ import_graph() }}" in page
    diagram = layers.diagram()
    assert diagram.startswith("```mermaid") and all(f"<b>{name}</b>" in diagram for name, _, _ in layers.LAYERS)


#: One fresh process imports every old path (a module may be imported already in this one): for each,
#: whether ``import old`` warned (with the message) and gave the very module at the new path.
OLD_PATHS = """
import importlib, json, warnings
import gpupipe
from gpupipe._compat import MOVED_MODULES
found = {}
for old, new in MOVED_MODULES.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    found[old] = {"same": module is importlib.import_module(new),
                  "warned": [str(w.message) for w in caught if w.category is DeprecationWarning]}
print("RESULT " + json.dumps(found))
"""


@pytest.fixture(scope="module")
def old_paths() -> dict:
    proc = subprocess.run([sys.executable, "-c", OLD_PATHS], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_a_moved_module_still_imports_from_its_old_path_with_a_warning(old, old_paths):
    """``import old`` (in a fresh process) warns once, naming the new home, and gives the very module at
    the new path."""
    assert old_paths[old]["same"]
    assert old_paths[old]["warned"] == [
        f"{old} is deprecated: it moved to {MOVED_MODULES[old]} (the old name goes in gpupipe 0.4)"]


def test_a_moved_module_as_an_attribute_of_gpupipe_warns():
    with pytest.warns(DeprecationWarning, match="gpupipe.shardfmt is deprecated: it moved to gpupipe.shards.format"):
        module = gpupipe.shardfmt
    assert module is importlib.import_module("gpupipe.shards.format")


def test_a_name_that_never_existed_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'build_loader'"):
        gpupipe.build_loader  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gpupipe.not_a_module")
