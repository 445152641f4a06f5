"""Red team of the swap under the real frameworks, part 8: ``gpupipe.DataLoader(dataset, sampler=<list>)``
beside torch's own ``DataLoader`` under real Lightning DDP and real Accelerate (2 CPU ranks, gloo, torchrun:
one launch each, tests/redteam_frameworks8_worker.py), and a transform edited in place by a progressive-resizing
Lightning callback (both ranks get the clear error, none hangs)."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import flat_folder

pytest.importorskip("lightning")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
INDICES = [22, 3, 3, 7, 0, 15, 9, 11, 4]
EPOCHS = ("0", "1")


def launch(tmp_path_factory, framework):
    """Each rank's record of one torchrun launch of the worker (23 samples)."""
    tmp = tmp_path_factory.mktemp(f"frameworks8-{framework}")
    folder, out = flat_folder(tmp / "folder", 23), tmp / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for name in ("LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(HERE / "redteam_frameworks8_worker.py"), "--folder", str(folder), "--framework", framework,
               "--out", str(out)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def lightning(tmp_path_factory):
    return launch(tmp_path_factory, "lightning")


@pytest.fixture(scope="module")
def accelerate(tmp_path_factory):
    return launch(tmp_path_factory, "accelerate")


#: The sample id (``flat_folder``) of each ``ImageFolder`` index: its classes ``i % 3`` in turn, each in order.
IDS = [i for c in range(3) for i in range(c, 23, 3)]
LISTED = [IDS[i] for i in INDICES]


def union(ranks, key):
    """How often each sample id was read over the ranks."""
    return Counter(i for run in ranks for batch in run["seen"][key] for i in batch)


def padded_once(read):
    """The list's samples, each as often as listed, and one more of them (the shares padded to 5 + 5)."""
    extra = read - Counter(LISTED)
    return not Counter(LISTED) - read and sum(extra.values()) == 1 and set(extra) <= set(LISTED)


def test_lightning_validation_over_a_list_sampler_gives_each_rank_what_torch_gives_it(lightning):
    for run in lightning:
        assert run["error"] is None, "nothing changed: no refusal in the sanity check, train and val loops"
        assert run["kept_error"] is None, "the same, the loaders built once"
        assert run["kept_seen"] == sorted(run["seen"])
        for stage, epochs in (("sanity", ("0",)), ("val", EPOCHS)):
            for epoch in epochs:
                ours, theirs = run["seen"][f"{stage}/{epoch}/ours"], run["seen"][f"{stage}/{epoch}/torch"]
                assert ours == theirs and [len(b) for b in ours] == [2, 1]


def test_lightning_training_shuffles_a_list_sampler_every_epoch_as_it_shuffles_torchs(lightning):
    """Lightning trains on ``DistributedSamplerWrapper(sampler, shuffle=True)``: each epoch a new order of the
    list, shared out; gpupipe's is its own permutation: the same samples over the ranks (duplicates kept,
    one padded from the list), as many batches per rank, a new order each epoch."""
    for epoch in EPOCHS:
        assert padded_once(union(lightning, f"train/{epoch}/torch"))
        assert padded_once(union(lightning, f"train/{epoch}/ours"))
        for run in lightning:
            sizes = [len(b) for b in run["seen"][f"train/{epoch}/ours"]]
            assert sizes == [len(b) for b in run["seen"][f"train/{epoch}/torch"]] == [2, 2, 1]
    for run in lightning:
        assert run["seen"]["train/0/ours"] != run["seen"]["train/1/ours"], "the same order every epoch"


def test_a_progressive_resizing_callback_gets_the_clear_error_on_every_rank(lightning):
    for run in lightning:
        error = run["resize_error"]
        assert error is not None and error.startswith("UnsupportedTransform: ")
        assert "changed after the loader was built" in error and "Resize(size=(6, 6)" in error
        assert list(run["resize_seen"]) == ["train/0/ours"], "epoch 0 trained, epoch 1 refused before a batch"


def test_accelerate_shards_a_list_sampler_into_the_same_samples_and_batch_counts(accelerate):
    """Accelerate gives torch's ranks whole batches in turn (the last ones padded from the list's start); gpupipe
    shares the list out sample by sample (rank r: items r, r+2, ...; one padded from the start): the same samples
    over the ranks, as many batches per rank, the same order at every epoch (no shuffle)."""
    shares = [LISTED[0::2], LISTED[1::2] + LISTED[:1]]
    for epoch in EPOCHS:
        assert set(union(accelerate, f"train/{epoch}/torch")) == set(LISTED)
        for run, share in zip(accelerate, shares):
            ours = run["seen"][f"train/{epoch}/ours"]
            assert [i for batch in ours for i in batch] == share
            assert len(ours) == len(run["seen"][f"train/{epoch}/torch"]) == 3
