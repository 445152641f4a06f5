"""Issue 33: with ``loader.dataset`` there, Accelerate stays safe (the real Accelerate, 2 CPU processes,
gloo, under torchrun): ``prepare`` leaves gpupipe loaders as they are, and ``skip_first_batches`` fails
at once pointing to ``loader.skip(n)`` instead of building a torch DataLoader over the dataset."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import flat_folder

pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accelerate_interop")
    folder = flat_folder(tmp / "folder", 24)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for name in ("LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(HERE / "accelerate_interop_worker.py"), "--folder", str(folder), "--out", str(tmp)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def test_prepare_leaves_gpupipe_loaders(ranks):
    for run in ranks:
        assert run["types"] == ["Loader", "Loader"]


def test_skip_first_batches_fails_at_once_pointing_to_loader_skip(ranks):
    for run in ranks:
        for skip in run["skips"]:
            assert "type" not in skip, f"built {skip.get('type')}"
            assert "loader.skip(n)" in skip["error"] and skip["attribute_error"]


def test_loader_skip_and_the_dataset_and_sampler_lengths(ranks):
    for run in ranks:
        for full, skipped in zip(run["full"], run["skipped"]):
            assert skipped == full[1:], "loader.skip(1): the same epoch from its second batch"
        assert run["lengths"] == [[24, 12, 3], [24, 12, 3]]
    assert sorted(sum(ranks[0]["full"][0] + ranks[1]["full"][0], [])) == list(range(24))
