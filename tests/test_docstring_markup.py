"""The API pages link instead of showing markup: no Sphinx role in gpupipe's docstrings (mkdocstrings
shows them as raw text), and the built site, where it can be built, holds none either."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpupipe
from gpupipe import presets

ROOT = Path(__file__).resolve().parents[1]
ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|attr|data|exc|obj|const):`")


def docstrings(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "name", path.name), doc


def test_no_docstring_uses_a_sphinx_role():
    found = [f"{path.relative_to(ROOT)}: {name}: {m.group(0)}"
             for path in sorted((ROOT / "gpupipe").rglob("*.py"))
             for name, doc in docstrings(path) for m in ROLE.finditer(doc)]
    assert found == []


def test_the_loaders_docstring_lists_every_preset():
    doc = gpupipe.loader.__doc__
    assert all(f'``"{name}"``' in doc for name in presets.PRESETS), sorted(presets.PRESETS)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mkdocs") is None, reason="needs the docs extra")
def test_the_built_site_has_no_raw_role_and_no_warning(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr, proc.stderr
    pages = list((tmp_path / "site").rglob("*.html"))
    raw = [p.name for p in pages if ROLE.search(p.read_text()) or re.search(r":(class|func|meth|mod|attr):<code>",
                                                                             p.read_text())]
    assert len(pages) > 10 and raw == []
