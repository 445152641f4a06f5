"""Red team: how loaders live and die on the CPU backends (``dali-cpu``, ``torchvision`` and the
``torchvision-transform`` fallback): many loaders built and dropped, passes left, workers killed, forks.
Cases that kill or fork run in a process of their own (tests/redteam_lifecycle_worker.py) with a timeout."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import HAS_DALI, make_image_folder
from redteam_lifecycle_worker import build

psutil = pytest.importorskip("psutil")  # in the test extra; the GPU image's readiness check collects without it
HERE = Path(__file__).parent
CPU_BACKENDS = [
    pytest.param("dali-cpu", marks=pytest.mark.skipif(not HAS_DALI, reason="needs DALI")),
    "torchvision",
    "torchvision-transform",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("lifecycle") / "data"
    make_image_folder(root, {"a": 9, "b": 9}, sizes=(24, 40))
    return str(root)


def run_worker(case: str, folder: str, backend: str, timeout: float = 240) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(HERE / "redteam_lifecycle_worker.py"), case, folder, backend],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def resources(settled_as: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    """``(open fds, threads, child processes)``; with ``settled_as``, read again for up to 10 s until they are
    those: a DataLoader's shut-down queues end their feeder threads and pipes after it returns (a leak stays)."""
    deadline = time.monotonic() + 10
    while True:
        gc.collect()
        held = len(os.listdir("/proc/self/fd")), threading.active_count(), len(psutil.Process().children())
        if settled_as is None or held == settled_as or time.monotonic() > deadline:
            return held
        time.sleep(0.1)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_loaders_built_and_dropped_return_what_they_hold(folder, backend):
    """A sweep building a train and a val loader per trial, some passes left with `break`, the loaders dropped
    (``del``) or rebound: file descriptors, threads and worker processes return to where they started."""

    def trial(number: int) -> None:
        train, val = build(folder, backend, drop_last=True), build(folder, backend, shuffle=False)
        for step, _ in enumerate(train):
            if step == 1 and number % 2:
                break
        assert len(list(val)) == len(val)
        del train, val

    for number in range(2):  # the libraries' own one-off threads and files (torch's fd sharing), before counting
        trial(number)
    before = resources()
    for number in range(12):
        trial(number)
    after = resources(settled_as=before)
    assert after == before, f"(fds, threads, child processes) {before} before, {after} after 12 trials"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torchvision", "torchvision-transform"])
def test_a_killed_worker_is_named_and_the_next_pass_starts_afresh(folder, backend):
    """A DataLoader worker killed mid-epoch (the OOM killer) raises torch's clear error; the torchvision
    backend's persistent workers were then left broken for good, and every later pass failed ("exited
    unexpectedly") even though the script caught the error: the next pass must start new workers."""
    seen = run_worker("worker_killed", folder, backend)
    assert "worker" in seen["first"] and "killed" in seen["first"]
    assert seen["next_pass"] == [seen["expected"], seen["expected"]]
    assert seen["children_after_close"] == 0


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DALI, reason="needs DALI")
def test_a_dali_loader_inherited_by_a_forked_child_is_refused_and_its_exit_is_clean(folder):
    """A ``dali-cpu`` loader mid-pass when the process forks (``os.fork``): DALI's pipelines and threads do not
    survive a fork, so the child is refused by name (it hung for good). The child's normal exit leaves the
    parent's pipelines alone (DALI's exit hook shut them down in the child: a segfault), and the parent's pass
    and the epochs after it are whole."""
    seen = run_worker("forked", folder, "dali-cpu")
    for read, made in (("inherited pass", "this pass was started"), ("new pass", "this DALI loader was built")):
        assert seen["child"][read].startswith(f"ForkedLoader: {made} in process "), seen["child"]
        assert "forked from it" in seen["child"][read] and "build the loader in the child" in seen["child"][read]
    assert seen["child_status"] == 0
    assert seen["parent"] == [seen["expected"], seen["expected"]]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torchvision", "torchvision-transform"])
def test_a_torchvision_loader_in_a_forked_child_starts_its_own_workers_and_leaves_the_parents(folder, backend):
    """A loader mid-pass when the process forks: the child's dropping the loader and its normal exit stopped
    the parent's DataLoader workers (torch's shutdown event, multiprocessing's exit hook sending SIGTERM to
    every daemon it believed its own), and the parent's pass failed. Now the inherited pass is refused in the
    child (its workers answer the parent), a new pass there reads with workers of its own, and the parent's pass
    and the epoch after it are whole."""
    seen = run_worker("forked", folder, backend)
    assert seen["child"]["inherited pass"].startswith("ForkedLoader: this pass was started in process ")
    assert "start a new pass in the child (iter(loader))" in seen["child"]["inherited pass"]
    assert seen["child"]["new pass"] == seen["expected"]
    assert seen["child_status"] == 0
    assert seen["parent"] == [seen["expected"], seen["expected"]]


@pytest.mark.parametrize("backend", ["torchvision", "torchvision-transform"])
def test_a_loader_freed_by_the_cyclic_collector_mid_pass_stops_its_workers_at_once(folder, backend):
    """A loader and its pass left mid-pass in a reference cycle (a trainer holding itself), freed by ``gc``: the
    collector runs the DataLoader's index queues' finalizers before the loader's ``__del__``, so torch's stop
    message never reached the workers and the shutdown waited 5 s for each before killing it (a stall at a
    random step of training; 80 s in one test file). The workers now stop at once (the worker makes torch's
    wait 10 minutes: waiting on them would hang past the timeout)."""
    seen = run_worker("collected_in_a_cycle", folder, backend, timeout=120)
    assert seen["started"] == 2 and seen["after"] == 0
    assert seen["next"] == seen["expected"]
