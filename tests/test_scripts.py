"""Every benchmark, example and dataset script still runs against the library as it is now: each
prints its ``--help`` (which imports everything it uses) and exits 0. A script that imports a name
the library moved fails here, not in the next GPU session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from script_batch import run_scripts

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "examples", "datasets") for p in (ROOT / folder).glob("*.py")
                 if not p.name.startswith("_"))


def test_the_scripts_were_found():
    names = {p.name for p in SCRIPTS}
    assert len(SCRIPTS) >= 15 and {"gpu_proof.py", "peer_compare.py", "train_imagefolder.py", "make_demo.py"} <= names


@pytest.fixture(scope="module")
def helps(tmp_path_factory) -> dict:
    """Every script's ``--help``, run in one process (``script_batch``: torch imported once, not once a script;
    each script still gets fresh globals, its own folder first on ``sys.path``, and its own modules reloaded)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cases = [{"script": str(script), "args": ["--help"], "cwd": str(ROOT)} for script in SCRIPTS]
    return dict(zip(SCRIPTS, run_scripts(cases, tmp_path_factory.mktemp("helps"), env=env)))


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_script_imports_and_prints_its_help(helps, script):
    proc = helps[script]
    assert proc["returncode"] == 0, proc["stderr"][-2000:]
    assert "usage:" in proc["stdout"]


@pytest.mark.slow
def test_ddp_example_help_shows_defaults(helps):
    out = helps[ROOT / "examples" / "train_ddp.py"]["stdout"]
    assert "(default: 50)" in out and "(default: resnet18)" in out
