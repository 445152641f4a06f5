"""Every benchmark, example and dataset script still runs against the library as it is now: each
prints its ``--help`` (which imports everything it uses) and exits 0. A script that imports a name
the library moved fails here, not in the next GPU session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "examples", "datasets") for p in (ROOT / folder).glob("*.py")
                 if not p.name.startswith("_"))


def test_the_scripts_were_found():
    names = {p.name for p in SCRIPTS}
    assert len(SCRIPTS) >= 15 and {"gpu_proof.py", "peer_compare.py", "train_imagefolder.py", "make_demo.py"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_script_imports_and_prints_its_help(script):
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
