"""Red team of the mid-epoch resume on another split (``gpupipe.loading.resplit``), as users meet it.

Lightning's fit resumed with ``ckpt_path`` from a mid-epoch ``every_n_train_steps`` checkpoint on another per-rank
batch size (in this process, one device) or another world size (2 ranks by Lightning's own launcher, then 1; slow):
Lightning fixes ``num_training_batches`` from ``len(loader)`` before it loads the loader's state and counts the
resumed epoch on from the checkpoint's batch index, so ``len()`` must stay the whole epoch of the new split there and
the rest must fit in what Lightning counts (else a refusal naming the numbers), every sample of the epoch read once
over the two fits and the next epoch whole. Accelerate's ``skip`` of the steps the saved run counted after
``load_state`` of a state re-split. The cases that held (shuffle=False, fewer samples left than ranks, set_epoch and
a second load after a load, a JSON round trip in a chain, weighted draws, gpupipe.DataLoader with a
DistributedSampler, dali-cpu's read-ahead) are kept as one regression sweep.
"""

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import flat_folder, read_in_step
from helpers import rank_loaders as ranks

import gpupipe

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
N = 13


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("resplit_rt") / "flat", N)


def read(loaders, batches=None, its=None):
    """Reads every rank in step (``read_in_step``), ``batches`` batches or to the end: the ids in order, and the
    iterators."""
    got, its = read_in_step(loaders, batches, its)
    return [i for i, _, _ in got], its


def whole(batch_size, world=1):
    """Batches per rank of a whole epoch of N samples."""
    return math.ceil(math.ceil(N / world) / batch_size)


@pytest.mark.parametrize("saved, k, resumed, last", [(2, 2, 3, False), (2, 3, 1, False), (2, 2, 3, True)])
def test_lightning_resumed_on_another_batch_size_reads_the_rest_once_and_then_whole_epochs(
    folder, tmp_path, saved, k, resumed, last
):
    """``last``: the checkpoint Lightning writes when ``max_steps`` stops the fit mid-epoch, resumed with a larger
    ``max_steps``: Lightning counts the stopped epoch done, so its epoch 1 reads the rest of epoch 0."""
    from redteam_resplit_worker import fit

    rest = math.ceil((N - k * saved) / resumed)
    before = fit(folder, tmp_path, 1, saved, k, last=last)
    (ckpt,) = (tmp_path / "ck").glob("*.ckpt")
    after = fit(folder, tmp_path, 1, resumed, k + rest + whole(resumed), str(ckpt), last=last)
    stopped, following = ("1", "2") if last else ("0", "1")
    assert "error" not in after
    epoch0 = before["seen"]["0"] + after["seen"][stopped]
    assert sorted(epoch0) == list(range(N)), "every sample of the stopped epoch once over the two fits"
    assert after["indices"][stopped] == list(range(k, k + rest)), "Lightning counts on from the checkpoint's batch"
    assert sorted(after["seen"][following]) == list(range(N)), "the next epoch is whole"
    assert after["lengths"][following] == whole(resumed)
    assert after["indices"][following] == list(range(whole(resumed)))


def test_lightning_refuses_a_rest_longer_than_what_it_counts_naming_the_numbers(folder, tmp_path):
    from redteam_resplit_worker import fit

    fit(folder, tmp_path, 1, 1, 3)  # 3 of 13 read; the 10 left are 3 batches of 4, Lightning counts batches 3..3
    (ckpt,) = (tmp_path / "ck").glob("*.ckpt")
    after = fit(folder, tmp_path, 1, 4, 3, str(ckpt))
    assert after["error"].startswith(
        "load_state_dict: Lightning resumes epoch 0 at its batch 3 of 4 (num_training_batches, counted before the "
        "state loaded), but the rest of the epoch on this split is 3 batches: Lightning would read 1 of them"
    )
    assert "resume with world_size 1 and batch_size 1 as saved, or from a checkpoint at an epoch's" in after["error"]
    assert not after["seen"], "nothing trained on"


@pytest.mark.slow
def test_lightning_on_two_ranks_resumed_on_one_with_another_batch_size_reads_the_epoch_once(folder, tmp_path):
    worker, env = str(HERE / "redteam_resplit_worker.py"), {**os.environ, "PL_DISABLE_FORK": "1"}
    launch = [sys.executable, worker, str(folder), str(tmp_path)]
    subprocess.run([*launch, "2", "2", "2"], check=True, timeout=240, env=env, capture_output=True)
    (ckpt,) = (tmp_path / "ck").glob("*.ckpt")
    subprocess.run([*launch, "1", "3", "2", str(ckpt)], check=True, timeout=240, env=env, capture_output=True)
    saves = [json.loads((tmp_path / f"save-{rank}.json").read_text()) for rank in (0, 1)]
    after = json.loads((tmp_path / "resume-0.json").read_text())
    epoch0 = sum((save["seen"]["0"] for save in saves), []) + after["seen"]["0"]
    assert sorted(epoch0) == list(range(N)), "8 read on 2 ranks, the 5 left on 1 rank in batches of 3"
    assert after["indices"]["0"] == [2, 3] and sorted(after["seen"]["1"]) == list(range(N))
    assert after["lengths"]["1"] == whole(3)


def test_accelerate_skip_of_the_steps_the_saved_run_counted_changes_nothing_after_a_resplit(folder):
    before = ranks(folder, 2)
    got, _ = read(before, 2)
    state = before[0].state_dict()
    after = ranks(folder, 1, batch_size=3)
    after[0].load_state_dict(state)
    assert after[0].skip(2) is after[0]  # what Accelerate's docs do after load_state: skip the steps done
    with pytest.raises(ValueError, match=r"skip\(1\): the state loaded .* already resumes epoch 0 at batch 2"):
        after[0].skip(1)
    tail, _ = read(after)
    assert sorted(got + tail) == list(range(N))


def _sweep(folder, case):
    """Reads ``case``'s resume; returns the ids read before and after, and what the resumed ranks say."""
    saved, resumed = {"world": 2}, {"world": 3, "batch_size": 1}
    if case in ("shuffle=False", "draws"):
        extra = {"shuffle": False} if case == "shuffle=False" else {"weights": [1.0 + k % 3 for k in range(N)]}
        saved, resumed = {**saved, **extra}, {**resumed, **extra}
    if case == "fewer left than ranks":
        saved, resumed = {"world": 2, "batch_size": 3}, {"world": 4, "batch_size": 1}
    if case == "dali-cpu":
        saved, resumed = {**saved, "backend": "dali-cpu"}, {**resumed, "backend": "dali-cpu"}
    before = ranks(folder, **saved)
    got, _ = read(before, 2)
    state = before[0].state_dict()
    after = ranks(folder, **resumed)
    if case == "dali-cpu":  # a pass under way, its read-ahead started, then the state loaded
        read(after, 1)
    for loader in after:
        loader.load_state_dict(json.loads(json.dumps(state)) if case == "JSON, then a chain" else state)
        if case == "loaded twice":
            loader.load_state_dict(state)
        if case == "set_epoch of its epoch":
            loader.set_epoch(0)
    lengths = [len(loader) for loader in after]
    if case == "JSON, then a chain":
        middle, _ = read(after, 1)
        chained = json.loads(json.dumps(after[0].state_dict()))
        after = ranks(folder, 1, batch_size=4)
        after[0].load_state_dict(chained)
        got += middle
    tail, _ = read(after)
    return got, tail, lengths, after


SWEEP = ["shuffle=False", "draws", "fewer left than ranks", "dali-cpu", "loaded twice", "set_epoch of its epoch"]


@pytest.mark.parametrize("case", [*SWEEP, "JSON, then a chain"])
def test_what_held_reads_the_rest_of_the_epoch_once_then_the_next_epoch_whole(folder, case):
    got, tail, lengths, after = _sweep(folder, case)
    counts = Counter(got + tail)
    padded = len(got + tail) - len(counts)
    if case == "draws":  # 13 drawn by weight, with replacement: the uninterrupted run's draws, padded to 14
        whole_run, _ = read(ranks(folder, 2, weights=[1.0 + k % 3 for k in range(N)]))
        more, fewer = Counter(got + tail) - Counter(whole_run), Counter(whole_run) - Counter(got + tail)
        assert sum(more.values()) <= 1 and sum(fewer.values()) <= 1, "the same draws, but for the padded one"
    else:
        assert set(counts) == set(range(N))
        assert padded == {"fewer left than ranks": 3, "JSON, then a chain": 0}.get(case, 1), "padding aside, once"
    assert len(set(lengths)) == 1 and lengths[0] == -(-len(tail) // len(after)) or case == "JSON, then a chain"
    states = [loader.state_dict() for loader in after]
    assert {(s["epoch"], s["batches_done"], "offset" in s) for s in states} == {(1, 0, False)}
    fresh = ranks(folder, len(after), **({"batch_size": 1} if len(after) > 1 else {"batch_size": 4}))
    kw = {"dali-cpu": {"backend": "dali-cpu"}, "shuffle=False": {"shuffle": False}}.get(case, {})
    if not kw and case != "draws":
        for loader in fresh:
            loader.set_epoch(1)
        assert read(after)[0] == read(fresh)[0], "the next epoch as a run of the new split reads it"


def test_a_swapped_data_loader_with_a_distributed_sampler_reads_the_rest_on_three_ranks(folder):
    from torch.utils.data.distributed import DistributedSampler
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    dataset = ImageFolder(folder, transform=v2.Compose([v2.PILToTensor(), v2.Resize((8, 8))]))

    def swapped(world, rank, batch_size):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=5)
        generator = torch.Generator().manual_seed(1)
        return gpupipe.DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=generator)

    before = [swapped(2, rank, 2) for rank in range(2)]
    got, _ = read(before, 2)
    after = [swapped(3, rank, 1) for rank in range(3)]
    for loader in after:
        loader.load_state_dict(before[0].state_dict())
    assert [len(loader) for loader in after] == [2, 2, 2], "the 5 left, padded to 6 on 3 ranks"
    tail, _ = read(after)
    assert sorted(set(got + tail)) == list(range(N)) and len(got + tail) == N + 1
