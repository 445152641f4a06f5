"""Which ``cuda`` tests a committed GPU run has passed, so that the quick proof's ``tests`` step runs the others
first: a GPU window's 200 s reach about half of the ``cuda`` tests, and each window used to start again from the
top of the same order.

Read from every ``benchmarks/results/*/`` folder that holds a GPU run (its ``quick.json`` is not a rehearsal's):
the JUnit XML (``tests*.xml``: a test case with no failure, error or skipped element) and pytest's ``-v`` lines
in the logs (``tests*.log``: ``tests/x.py::t PASSED`` serially, ``[gw0] [ 5%] PASSED tests/x.py::t`` under
xdist), which runs stopped before pytest wrote its XML left.

It is also the pytest plugin that splits a run (``-p gpu_tests_seen``, with ``benchmarks/`` on the path):
``GPUPIPE_TESTS_SEEN`` names a file of node ids, one per line, and ``GPUPIPE_TESTS_PASS`` is ``unseen`` (deselect
those) or ``seen`` (keep only those). Ids are matched after collection, so a test renamed or removed since
the run is simply not there (passed as arguments, pytest would stop at it: "not found").
"""

from __future__ import annotations

import json
import re
import os
from pathlib import Path
from xml.etree import ElementTree

RESULTS = Path(__file__).resolve().parent / "results"
_PASSED = re.compile(r"^(?:\[gw\d+\] \[ *\d+%\] PASSED (tests/.+?::.+?)|(tests/.+?::.+?) PASSED\b.*)$")


def _is_gpu_run(folder: Path) -> bool:
    quick = folder / "quick.json"
    if quick.is_file():
        return not json.loads(quick.read_text()).get("rehearsal")
    return (folder / "summary.md").is_file() and "rehearsal" not in (folder / "summary.md").read_text()


def passed_on_a_gpu(results: Path = RESULTS) -> set[str]:
    """Node ids (``tests/x.py::name[params]``) of the tests that passed in a committed GPU run."""
    passed: set[str] = set()
    for folder in sorted(p for p in Path(results).iterdir() if p.is_dir() and _is_gpu_run(p)):
        for log in folder.glob("tests*.log"):
            for line in log.read_text(errors="replace").splitlines():
                match = _PASSED.match(line.rstrip())
                if match:
                    passed.add(match.group(1) or match.group(2))
        for xml in folder.glob("tests*.xml"):
            for case in ElementTree.parse(xml).iter("testcase"):
                if len(case) == 0 and case.get("classname", "").startswith("tests."):
                    passed.add(f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}")
    return passed


def pytest_collection_modifyitems(config, items) -> None:
    """Keeps the unseen or the seen tests of the collection, as ``GPUPIPE_TESTS_PASS`` says."""
    listed, which = os.environ.get("GPUPIPE_TESTS_SEEN"), os.environ.get("GPUPIPE_TESTS_PASS")
    if not listed or which not in ("seen", "unseen"):
        return
    seen = set(Path(listed).read_text().splitlines())
    keep = [item for item in items if (item.nodeid in seen) == (which == "seen")]
    dropped = [item for item in items if (item.nodeid in seen) != (which == "seen")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def main(argv: list[str] | None = None) -> int:
    """Prints the node ids of the tests a committed GPU run passed, one per line, and their count."""
    import argparse

    parser = argparse.ArgumentParser(description="The cuda tests a committed GPU run passed (benchmarks/results)")
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    passed = sorted(passed_on_a_gpu(args.results))
    print("\n".join(passed + [f"{len(passed)} tests passed in a committed GPU run"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
