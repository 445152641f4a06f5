"""Red team (ddp5): one loader object as Lightning's training and validation loader, and a user's
``DistributedSampler``, under one real torchrun launch (2 CPU ranks, gloo: tests/redteam_ddp5_worker.py), each
beside torch's own ``DataLoader`` given the same arguments."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import flat_folder

pytest.importorskip("lightning")
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
N = 11  # odd: the ranks' shares are padded by one


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each rank's record (``rank<r>.json``) of one torchrun launch of the worker."""
    tmp = tmp_path_factory.mktemp("ddp5")
    folder, out = flat_folder(tmp / "folder", N), tmp / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("LOCAL_WORLD_SIZE", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(HERE / "redteam_ddp5_worker.py"), str(folder), str(out)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env, cwd=out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def flat(batches):
    return [i for batch in batches for i in batch]


def test_lightning_validates_its_training_loader_in_torchs_unshuffled_share(ranks):
    """``train_dataloader()`` and ``val_dataloader()`` return one ``gpupipe.DataLoader``: Lightning validates torch's
    on ``DistributedSampler(shuffle=False)``; gpupipe's validation read the training epoch's shuffled order
    (``val/0`` was ``train/0``), now rank r reads r, r + 2, ..., as torch's, in the sanity check and every epoch;
    ``trainer.predict`` over it afterwards too (unpadded)."""
    for run in ranks:
        ours, theirs = run["same"]["ours"], run["same"]["torch"]
        assert ours["error"] is None and theirs["error"] is None
        for stage in ("sanity/0", "val/0", "val/1"):
            assert ours["seen"][stage] == theirs["seen"][stage], stage
        assert ours["seen"]["val/0"] != ours["seen"]["train/0"]
        assert ours["seen"]["predict/2"] == theirs["seen"]["predict/2"], "trainer.predict over it after the fit"


def test_lightning_still_shuffles_that_loader_in_training(ranks):
    """The same object in training: each epoch a new order, shared out, as torch's ``DistributedSampler(shuffle=True)``:
    every sample once over the ranks (one padded), as many batches per rank as torch's."""
    for epoch in ("train/0", "train/1"):
        read = Counter(i for run in ranks for i in flat(run["same"]["ours"]["seen"][epoch]))
        assert set(read) == set(range(N)) and sum(read.values()) == N + 1
        for run in ranks:
            sizes = [len(b) for b in run["same"]["ours"]["seen"][epoch]]
            assert sizes == [len(b) for b in run["same"]["torch"]["seen"][epoch]] == [2, 2, 2]
    for run in ranks:
        assert run["same"]["ours"]["seen"]["train/0"] != run["same"]["ours"]["seen"]["train/1"]


def test_validation_mid_epoch_over_the_training_loader_is_refused_naming_the_remedy(ranks):
    """``val_check_interval=0.5`` over that one object: torch runs the two passes side by side; gpupipe's validation
    pass ends the training pass, which said only that "a new pass began" (naming ``next(iter(loader))``); now every
    rank names Lightning's validation loop, the same loader in both, and a second loader as the remedy."""
    for run in ranks:
        assert run["same"]["torch/mid"]["error"] is None
        error = run["same"]["ours/mid"]["error"]
        assert error.startswith("PassEnded: Lightning's validation loop began a pass over this loader while its train")
        assert "return a second loader from val_dataloader()" in error
        assert run["same"]["ours/mid"]["seen"]["val/0"] == run["same"]["torch"]["seen"]["val/0"]


def test_a_checkpoint_after_validation_cut_short_resumes_the_next_training_epoch(ranks):
    """``limit_val_batches=1`` leaves the validation pass over the training loader after one batch, then the epoch's
    checkpoint: resumed, epoch 1 trains on exactly what the uninterrupted fit trained on, as torch's does; the
    validation pass took nothing of the training epoch or its state."""
    for run in ranks:
        same = run["same"]
        for kind in ("torch", "ours"):
            assert same[f"{kind}/saved"]["error"] is None and same[f"{kind}/resumed"]["error"] is None
            assert same[f"{kind}/saved"]["seen"]["train/0"] == same[kind]["seen"]["train/0"]
            assert same[f"{kind}/resumed"]["seen"]["train/1"] == same[kind]["seen"]["train/1"]
            assert same[f"{kind}/resumed"]["seen"]["val/1"] == same["torch"]["seen"]["val/1"][:1]


def test_a_users_distributed_sampler_gives_each_rank_its_share_every_epoch(ranks):
    """``DistributedSampler`` given to ``gpupipe.DataLoader`` with ``set_epoch`` per epoch: unshuffled, each rank reads
    exactly torch's indices; shuffled, gpupipe's own permutation (documented), each epoch every sample once over the
    ranks (one padded; ``drop_last=True``: none twice), as many batches per rank as torch's, a new order per epoch."""
    for run in ranks:
        seen = run["sampler"]
        for epoch in (0, 1):
            assert seen[f"False/0/False/ours/{epoch}"] == seen[f"False/0/False/torch/{epoch}"]
    for name, (distinct, total) in {"True/7/False": (N, N + 1), "True/3/True": (8, 8)}.items():
        for epoch in (0, 1):
            read = Counter(i for run in ranks for i in flat(run["sampler"][f"{name}/ours/{epoch}"]))
            assert len(read) == distinct and sum(read.values()) == total, (name, epoch)
            for run in ranks:
                ours, theirs = run["sampler"][f"{name}/ours/{epoch}"], run["sampler"][f"{name}/torch/{epoch}"]
                assert [len(b) for b in ours] == [len(b) for b in theirs]
        for run in ranks:
            assert run["sampler"][f"{name}/ours/0"] != run["sampler"][f"{name}/ours/1"]


def test_a_mid_epoch_checkpoint_resumes_with_validation_over_the_training_loader(ranks):
    """``max_steps=2`` stops epoch 0 after 2 of 3 batches (``every_n_train_steps=2`` checkpoint), resumed for 2 epochs:
    Lightning's set-up calls ``iter()`` on the validation loader (only to check it is iterable) while the resumed
    training pass is under way, which ended it (``PassEnded`` at the first batch); now the rest of epoch 0 and
    epoch 1 are what the uninterrupted fit read (torch's, not stateful, reads the epoch's first batch again), and
    validation reads torch's share."""
    for run in ranks:
        same = run["same"]
        for kind in ("torch", "ours"):
            assert same[f"{kind}/stopped"]["error"] is None and same[f"{kind}/continued"]["error"] is None, kind
            whole, continued = same[kind]["seen"], same[f"{kind}/continued"]["seen"]
            assert continued["train/1"] == whole["train/1"], kind
            assert continued["val/0"] == continued["val/1"] == same["torch"]["seen"]["val/0"], kind
        whole, stopped, continued = (same[k]["seen"] for k in ("ours", "ours/stopped", "ours/continued"))
        assert stopped["train/0"] + continued["train/0"] == whole["train/0"], "torch's restarts the epoch"


def test_drop_last_reads_as_many_batches_as_torchs_padded_share(ranks):
    """``drop_last=True`` over 11 samples on 2 ranks in batches of 2: Lightning pads each rank to 6 samples
    (``DistributedSampler(drop_last=False)``) and the ``DataLoader`` drops a partial batch only: 3 batches each;
    gpupipe cut each rank to 5 (one flag for both): 2 batches, 3 samples fewer an epoch than torch's. Now 3, every
    sample once (one padded) in training, and validation torch's batches exactly."""
    read = Counter(i for run in ranks for i in flat(run["same"]["ours/drop_last"]["seen"]["train/0"]))
    assert set(read) == set(range(N)) and sum(read.values()) == N + 1
    for run in ranks:
        ours, theirs = run["same"]["ours/drop_last"], run["same"]["torch/drop_last"]
        assert ours["error"] is None and theirs["error"] is None
        assert [len(b) for b in ours["seen"]["train/0"]] == [len(b) for b in theirs["seen"]["train/0"]] == [2, 2, 2]
        assert ours["seen"]["val/0"] == theirs["seen"]["val/0"]


def test_lightnings_overfit_batches_refuses_the_loader_on_every_rank(ranks):
    """``Trainer(overfit_batches=2)`` rebuilds every loader that is not read in order as a torch ``DataLoader``
    (``SequentialSampler``); Lightning refuses a gpupipe loader there, on every rank alike, before any batch (no
    hang). Documented, with the equivalent: ``gpupipe.loader(..., shuffle=False)`` and ``limit_*_batches``."""
    for run in ranks:
        got = run["same"]["ours/overfit"]
        assert got["error"].startswith("ValueError: The dataloader gpupipe.Loader(") and not got["seen"]
        assert "needs to subclass `torch.utils.data.DataLoader`" in got["error"]
