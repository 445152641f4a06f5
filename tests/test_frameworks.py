"""gpupipe inside the real Lightning and Accelerate, 2 CPU processes (gloo), launched as a user would.

Lightning starts its own second process (``Trainer(devices=2, strategy="ddp")``);
Accelerate runs under torchrun. Lightning is launched once for every CPU backend,
a ``Trainer`` each in turn (a loader built before the framework's set-up rebuilds
its backend then); the same launch then checkpoints torchvision mid-epoch with another
``Trainer``, which a new launch resumes from;
Accelerate once on torchvision (what it exercises lies above the backend;
dropping a failed sample is checked on both backends in ``test_recovery.py``), in one
launch with the Accelerate checks of ``test_interop_frameworks.py`` (conftest.py).
The tests read what the ranks saw: every sample once per epoch across the
ranks, in the order of gpupipe's own DDP mode, with the loader built before
and after the framework's set-up.
"""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CPU_BACKEND_NAMES, CPU_BACKENDS, flat_folder

import gpupipe

pytest.importorskip("lightning")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
SAMPLES = 24  # 2 ranks x 3 batches of 4: no padding, so "exactly once" is exact
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def launch(command, out: Path, timeout: int = 240) -> None:
    for name in ("LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        ENV.pop(name, None)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def ranks(out: Path):
    """Each rank's record in ``out``."""
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("frameworks")
    return flat_folder(tmp / "folder", SAMPLES), tmp


@functools.lru_cache(maxsize=None)
def ddp_order(folder: Path, rank: int, epoch: int):
    """The sample ids rank ``rank`` reads in ``epoch`` in gpupipe's own DDP mode, per batch of 4 (the
    order is the same on every backend)."""
    loader = gpupipe.loader(folder, PIPELINE, batch_size=4, backend="torchvision", num_threads=0, device="cpu",
                            seed=3, rank=rank, world_size=2)
    ids = [int(Path(loader.source.names[i]).stem[1:]) for i in loader.rank_share(epoch).indices]
    return [ids[k:k + 4] for k in range(0, len(ids), 4)]


@pytest.fixture(scope="module")
def lightning_runs(data):
    """One Lightning launch fitting every CPU backend installed in turn: ``{backend: each rank's record}``; it
    then also runs ``--mode save`` on torchvision (``--then-save``): ``"save"`` is ``(its folder, each rank's
    record)``."""
    folder, tmp = data
    out = tmp / "lightning"
    out.mkdir()
    launch([sys.executable, str(HERE / "lightning_worker.py"), "--folder", str(folder),
            "--backends", ",".join(CPU_BACKEND_NAMES), "--out", str(out), "--then-save", "torchvision"], out,
           timeout=480)
    runs = {backend: ranks(out / backend) for backend in CPU_BACKEND_NAMES}
    runs["save"] = out / "save", ranks(out / "save")
    return runs


@pytest.fixture(params=CPU_BACKENDS)
def lightning_run(request, lightning_runs):
    """Each rank's record of the Lightning launch of one backend."""
    return lightning_runs[request.param]


def test_lightning_checkpoint_mid_epoch_resumes_exactly(lightning_runs, data):
    """The save ran after the torchvision fit, in its processes; the resume is a new job, resuming from the
    save's checkpoint."""
    out, saved_runs = lightning_runs["save"]
    launch([sys.executable, str(HERE / "lightning_worker.py"), "--folder", str(data[0]),
            "--backends", "torchvision", "--out", str(out), "--mode", "resume"], out)
    resumed_runs = ranks(out)
    for saved, resumed in zip(*(sorted(runs, key=lambda r: r["rank"]) for runs in (saved_runs, resumed_runs))):
        assert list(resumed["seen"]["single"]) == ["1"], "epoch 0 was finished before the checkpoint"
        assert resumed["seen"]["single"]["1"] == saved["seen"]["single"]["1"][4:], "the rest of epoch 1, exactly"


@pytest.fixture(scope="module")
def accelerate_run(accelerate_launch):
    """Each rank's record of the Accelerate launch (conftest.py: one launch, shared with
    tests/test_interop_frameworks.py); its folder holds ``SAMPLES`` samples."""
    return accelerate_launch.ranks


@pytest.mark.parametrize("name", ["before", "after"])
def test_lightning_reads_every_sample_once_per_epoch_in_gpupipes_ddp_order(lightning_run, data, name):
    folder = data[0]
    for epoch in (0, 1):
        seen = [run["seen"][name][str(epoch)] for run in sorted(lightning_run, key=lambda r: r["rank"])]
        assert sorted(seen[0] + seen[1]) == list(range(SAMPLES)), f"{name}, epoch {epoch}: every sample once"
        for rank in (0, 1):
            assert seen[rank] == sum(ddp_order(folder, rank, epoch), []), f"{name}, rank {rank}, epoch {epoch}"
    assert all(run["world"][name][1] == 2 for run in lightning_run)


def test_lightning_set_epoch_reaches_a_loader_rebuilt_every_epoch(lightning_run):
    for run in lightning_run:
        epochs = run["seen"]["after"]
        assert epochs["0"] != epochs["1"], "epoch 1 has its own order, not epoch 0's again"


def test_threads_are_shared_among_the_processes_of_the_host(lightning_run):
    for run in lightning_run:  # Lightning's launcher sets no LOCAL_WORLD_SIZE
        assert run["threads"] == {"before": max(1, run["cores"] // 2), "after": max(1, run["cores"] // 2)}


@pytest.mark.parametrize("name", ["before", "after"])
def test_accelerate_reads_every_sample_once_per_epoch_in_gpupipes_ddp_order(accelerate_run, accelerate_launch, name):
    folder = accelerate_launch.folder
    for epoch in (0, 1):
        seen = [run["epochs"][name][epoch] for run in accelerate_run]
        assert sorted(sum(seen[0] + seen[1], [])) == list(range(SAMPLES)), f"{name}, epoch {epoch}"
        for rank in (0, 1):
            assert seen[rank] == ddp_order(folder, rank, epoch)


def test_accelerate_gradient_accumulation_syncs_at_the_end_of_the_epoch(accelerate_run):
    for run in accelerate_run:  # 3 batches, 2 per step: the last, odd batch must still step
        assert run["syncs"] == [False, True, True]


def test_accelerate_gather_for_metrics_counts_each_sample_once(accelerate_run):
    for run in accelerate_run:
        assert sorted(run["gathered"]) == list(range(23)), "23 samples, the padded repeat dropped"


def test_exact_evaluation_drops_a_sample_that_fails_and_repeats_none(accelerate_run):
    for run in accelerate_run:
        assert sorted(run["exact"]) == [i for i in range(23) if i != 5], "each sample once, the broken one left out"
    assert sum(run["dropped"] for run in accelerate_run) == 1, "stats() counts it on the rank that read it"


def test_accelerate_skip_first_batches_points_to_the_loaders_skip(accelerate_run):
    for run in accelerate_run:
        assert "loader.skip(" in run["accelerate_skip"]
        assert run["skipped"] == run["full"][1:] and len(run["full"]) == 3


def test_accelerate_save_state_and_load_state_resume_exactly(accelerate_run):
    for run in accelerate_run:
        assert len(run["rest"]) == 2 and run["resumed"] == run["rest"]


def test_a_share_that_disagrees_with_the_process_group_is_refused(accelerate_run):
    for run in accelerate_run:
        message = run["wrong_share"]
        assert "\n" not in message and "rank 0 of 3" in message and f"rank {run['rank']} of 2" in message
        assert sorted(sum(run["whole"], [])) == list(range(SAMPLES)), "world_size=1, asked for: the whole data set"
