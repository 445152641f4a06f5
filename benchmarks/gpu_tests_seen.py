"""Which ``cuda`` tests a committed GPU run has passed, so that the quick proof's ``tests`` step runs the others
first: a GPU window's 200 s reach about half of the ``cuda`` tests, and each window used to start again from the
top of the same order.

Read from every ``benchmarks/results/*/`` folder that holds a GPU run (``gpu_results.is_gpu_run``: not a rehearsal):
the JUnit XML (``tests*.xml``: a test case with no failure, error or skipped element) and pytest's ``-v`` lines
in the logs (``tests*.log``: ``tests/x.py::t PASSED`` serially, ``[gw0] [ 5%] PASSED tests/x.py::t`` under
xdist), which runs stopped before pytest wrote its XML left.

It is also the pytest plugin that splits a run (``-p gpu_tests_seen``, with ``benchmarks/`` on the path):
``GPUPIPE_TESTS_SEEN`` names a file of node ids, one per line, and ``GPUPIPE_TESTS_PASS`` is ``unseen`` (deselect
those) or ``seen`` (keep only those). Ids are matched after collection, so a test renamed or removed since
the run is simply not there (passed as arguments, pytest would stop at it: "not found").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from xml.etree import ElementTree

from gpu_results import RESULTS, is_gpu_run

#: pytest's last line: ``==== 3 passed, 1 skipped in 2.0s ====`` (also after an interrupt).
PYTEST_SUMMARY = re.compile(r"^=+ .*\b(passed|failed|error|errors|skipped|deselected|no tests ran)\b.* in [\d.]+s")


def outcome_lines(log: str, word: str) -> list[str]:
    """Node ids of the tests whose ``-v`` line in ``log`` says ``word`` (``PASSED``, ``FAILED``, ``ERROR``,
    ``SKIPPED``): ``tests/x.py::t PASSED [ 5%]`` serially, ``[gw0] [ 5%] PASSED tests/x.py::t`` under xdist; an id
    may hold spaces (in its parameters)."""
    line = re.compile(rf"^(?:\[gw\d+\] \[ *\d+%\] {word} (tests/.+?::.+?)|(tests/.+?::.+?) {word}\b.*)$")
    return [m.group(1) or m.group(2) for text in log.splitlines() if (m := line.match(text.rstrip()))]


def run_outcome(log: str) -> dict:  # not pytest_*: this module is a pytest plugin, which takes those for hooks
    """``summary``: pytest's last line (or the log's, when it wrote none); ``outcomes``: tests per outcome, counted
    from the ``-v`` lines (:func:`outcome_lines`)."""
    summary = [line.strip("= ") for line in log.splitlines() if PYTEST_SUMMARY.match(line)]
    outcomes = {word.lower(): len(outcome_lines(log, word)) for word in ("PASSED", "FAILED", "ERROR", "SKIPPED")}
    return {"summary": summary[-1] if summary else (log.strip().splitlines() or ["?"])[-1], "outcomes": outcomes}


def passed_on_a_gpu(results: Path = RESULTS) -> set[str]:
    """Node ids (``tests/x.py::name[params]``) of the tests that passed in a committed GPU run."""
    passed: set[str] = set()
    for folder in sorted(p for p in Path(results).iterdir() if p.is_dir() and is_gpu_run(p)):
        for log in folder.glob("tests*.log"):
            passed.update(outcome_lines(log.read_text(errors="replace"), "PASSED"))
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
