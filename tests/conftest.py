"""Fixtures and markers only; shared helpers live in ``helpers.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import HAS_CUDA, HAS_DALI, make_image_folder

if os.environ.get("GPUPIPE_REQUIRE_DALI") == "1" and not HAS_DALI:
    raise RuntimeError("GPUPIPE_REQUIRE_DALI=1 but nvidia.dali does not import: DALI tests would be skipped")


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, each worker's torch (and the processes its tests start: OpenMP reads
    ``OMP_NUM_THREADS``) uses its share of the cores: with a thread per core in every worker, OpenMP's
    spinning threads made a 12 s test take 164 s beside another worker's on 2 cores."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        share = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores_between_workers()


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Scan caches and demo data go to a temporary folder, not the user's ~/.cache."""
    previous = os.environ.get("GPUPIPE_CACHE")
    os.environ["GPUPIPE_CACHE"] = str(tmp_path_factory.mktemp("gpupipe-cache"))
    yield
    if previous is None:
        os.environ.pop("GPUPIPE_CACHE", None)
    else:
        os.environ["GPUPIPE_CACHE"] = previous


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist (plugins not autoloaded) ignores it
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the README's test command): one worker per core, at most 4 (each test may start DALI threads,
    torchrun ranks and servers of its own; more workers only contend for the cores)."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def proof_cache(tmp_path_factory) -> Path:
    """One cache for the rehearsals of ``benchmarks/gpu_proof.py``: its photo folder and shards, made once."""
    return tmp_path_factory.mktemp("proof-cache")


@pytest.fixture(scope="session")
def accelerate_launch(tmp_path_factory) -> SimpleNamespace:
    """One torchrun launch of ``accelerate_worker.py`` (2 CPU ranks, torchvision) for the Accelerate tests of
    tests/test_frameworks.py and tests/test_interop_frameworks.py: ``folder`` (24 samples), ``ranks`` (each
    rank's record) and ``interop`` (each rank's record of ``accelerate_interop_worker.py``)."""
    from helpers import flat_folder
    from imagecases import broken_inside_jpeg

    tmp = tmp_path_factory.mktemp("accelerate")
    folder, odd, broken = flat_folder(tmp / "folder", 24), flat_folder(tmp / "odd", 23), flat_folder(tmp / "broken", 23)
    (broken / "class_2" / "s0005.png").unlink()
    broken_inside_jpeg(broken / "class_2" / "s0005.jpg")  # passes the scan, fails to decode
    out = tmp / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for name in ("LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(Path(__file__).with_name("accelerate_worker.py")), "--folder", str(folder), "--odd-folder",
               str(odd), "--broken-folder", str(broken), "--backend", "torchvision", "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    load = lambda name: [json.loads((out / f"{name}{r}.json").read_text()) for r in range(2)]  # noqa: E731
    return SimpleNamespace(folder=folder, ranks=load("rank"), interop=load("interop-rank"))


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """Three classes, 7 + 5 + 6 = 18 small JPEGs of varied sizes."""
    root = tmp_path / "folder"
    make_image_folder(root, {"ant": 7, "bee": 5, "cat": 6})
    return root
