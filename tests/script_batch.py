"""Runs several scripts' command lines in one Python process, so that torch is imported once, not once a
script: for each, the exit status, stdout and stderr that ``python SCRIPT ARGS...`` (or ``python -m MODULE
ARGS...``) run in its working directory gives.

Each run gets the script's folder first on ``sys.path``, ``sys.argv``, its working directory and fresh
``__main__`` globals (``runpy``); the modules it imported from its own folder, the warnings already shown
and the working directory are reset afterwards. stdout and stderr are switched per run (a logging handler
made by one run writes to the run that logs). An uncaught exception prints its traceback and gives 1, as
the interpreter would; ``sys.exit("text")`` prints the text and gives 1.

Usage: ``python script_batch.py CASES.json OUT.json``, CASES a list of ``{"script" or "module", "args",
"cwd"}``;
OUT the list of ``{"returncode", "stdout", "stderr"}`` in the same order. :func:`run_scripts` does both.
"""

from __future__ import annotations

import io
import json
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path


class _Switch(io.TextIOBase):
    """A stream that writes to the current run's buffer."""

    def __init__(self) -> None:
        self.current = io.StringIO()

    def write(self, text: str) -> int:
        return self.current.write(text)

    def isatty(self) -> bool:
        return False  # as a pipe


def _exit_code(exit_: SystemExit, err: io.StringIO) -> int:
    if exit_.code is None:
        return 0
    if isinstance(exit_.code, int):
        return exit_.code
    err.write(f"{exit_.code}\n")
    return 1


def _run_one(case: dict, out: _Switch, err: _Switch) -> dict:
    script, module, args = case.get("script"), case.get("module"), [str(a) for a in case["args"]]
    folder = str(Path(script).resolve().parent) if script else os.path.abspath(case["cwd"])
    modules, path, here = set(sys.modules), list(sys.path), os.getcwd()
    out.current, err.current = io.StringIO(), io.StringIO()
    for loaded in list(sys.modules.values()):
        registry = vars(loaded).get("__warningregistry__") if hasattr(loaded, "__dict__") else None
        if isinstance(registry, dict):
            registry.clear()
    os.chdir(case["cwd"])
    sys.argv = [script or module, *args]
    sys.path.insert(0, folder)
    code = 0
    try:
        if script:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = _exit_code(exit_, err.current)
    except Exception:  # noqa: BLE001 - reported as the interpreter would: traceback, status 1
        traceback.print_exc(file=err.current)
        code = 1
    finally:
        out.flush()
        os.chdir(here)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(folder + os.sep):
                del sys.modules[name]
    return {"returncode": code, "stdout": out.current.getvalue(), "stderr": err.current.getvalue()}


def run_scripts(cases: list, tmp: Path, env: dict | None = None, timeout: int = 600) -> list:
    """Runs ``cases`` (dicts of script or module, args, cwd) in one new process; returns their results in
    order."""
    (tmp / "cases.json").write_text(json.dumps(cases))
    proc = subprocess.run([sys.executable, __file__, str(tmp / "cases.json"), str(tmp / "results.json")],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads((tmp / "results.json").read_text())


def main() -> None:
    cases, results_path = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    here = os.path.dirname(os.path.abspath(__file__))  # tests/ is on no script's path when run alone
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    out, err = _Switch(), _Switch()
    real = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        results = [_run_one(case, out, err) for case in cases]
    finally:
        sys.stdout, sys.stderr = real
    results_path.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
