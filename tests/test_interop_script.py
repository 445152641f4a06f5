"""Issue 33: an ImageNet training script (the shape of pytorch/examples imagenet/main.py, see
tests/imagenet_example.py for why it is not the original) swapped to gpupipe by text alone:
``torch.utils.data.DataLoader(`` becomes ``gpupipe.DataLoader(`` (with ``import gpupipe``). It trains,
validates, checkpoints, resumes, evaluates, and runs under torchrun on 2 CPU processes (gloo)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import textured_image, write_image
from script_batch import run_scripts

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}
for name in ("LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    ENV.pop(name, None)
ENV["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), ENV.get("PYTHONPATH", "")])


#: The script's arguments in every run (the data folder is relative to the working directory).
ARGS = ["data", "-a", "resnet18", "-b", "4", "-j", "2", "-p", "1", "--lr", "0.01"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for split, counts in (("train", {"n01": 6, "n02": 6}), ("val", {"n01": 3, "n02": 2})):  # val: 5, odd
        for name, count in counts.items():
            for i in range(count):
                write_image(tmp / "data" / split / name / f"{i}.JPEG", textured_image(rng, 40 + i, 52))
    text = (HERE / "imagenet_example.py").read_text()
    assert text.count("torch.utils.data.DataLoader(") == 3, "train, val and the val remainder"
    swapped = "import gpupipe\n" + text.replace("torch.utils.data.DataLoader(", "gpupipe.DataLoader(")
    (tmp / "main.py").write_text(swapped)
    return tmp


def run(workdir, *args, ranks=1):
    command = [sys.executable, "main.py", *ARGS, *args]
    if ranks > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
                   "29517", *command[1:], "--dist-url", "env://", "--dist-backend", "gloo"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=500, env=ENV, cwd=workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    assert "=> data loaders: gpupipe.loading.loader.Loader" in proc.stdout
    return proc.stdout


def counted(out):
    return [float(x) for x in re.findall(r" \* images counted: ([0-9.]+)", out)]


def test_the_swapped_script_trains_validates_checkpoints_and_resumes(workdir, tmp_path):
    """Train, resume, evaluate: three runs of the script, one after the other in one process (``script_batch``:
    torch imported once; each run has its own ``sys.argv``, ``__main__`` and output)."""
    runs = [("--epochs", "1", "--seed", "0"), ("--epochs", "2", "--seed", "0", "--resume", "checkpoint.pth.tar"),
            ("-e", "--resume", "checkpoint.pth.tar")]
    results = run_scripts([{"script": str(workdir / "main.py"), "args": [*ARGS, *args], "cwd": str(workdir)}
                           for args in runs], tmp_path, env=ENV, timeout=500)
    for args, result in zip(runs, results):
        assert result["returncode"] == 0, (args, result["stdout"][-3000:] + result["stderr"][-4000:])
        assert "=> data loaders: gpupipe.loading.loader.Loader" in result["stdout"], args
    trained, resumed, evaluated = (result["stdout"] for result in results)
    assert "Epoch: [0]" in trained and counted(trained) == [5.0]
    assert "=> loaded checkpoint 'checkpoint.pth.tar' (epoch 1)" in resumed, "the first run saved epoch 1"
    assert "Epoch: [1]" in resumed and "Epoch: [0]" not in resumed
    assert torch.load(workdir / "checkpoint.pth.tar", weights_only=False)["epoch"] == 2
    assert (workdir / "model_best.pth.tar").exists()
    assert counted(evaluated) == [5.0] and "Epoch:" not in evaluated


def test_the_swapped_script_runs_under_torchrun_on_two_processes(workdir):
    out = run(workdir, "--epochs", "1", ranks=2)
    assert counted(out) == [5.0, 5.0], "each rank: 2 samples per rank reduced over 2 ranks, then the 1 left over"
    assert out.count("Epoch: [0]") >= 2
    assert torch.load(workdir / "checkpoint.pth.tar", weights_only=False)["epoch"] == 1
