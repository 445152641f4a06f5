"""Red team (ddp4): distributed loading, exact resume, and Lightning / Accelerate, as users meet them.

Lightning fits run in this process on one CPU device (``redteam_ddp4_worker.fit``); Accelerate runs under real
torchrun launches (gloo, CPU), three in all (1 process, 2, then 1): a state saved with 2 processes resumed with 1 and
one saved with 1 resumed with 2, each with ``load_state`` and then what Accelerate's docs do; the 2-process launch
also probes sharding under the real process group (one image on 2 ranks, exact validation, ``set_epoch`` never or
twice). Ranks simulated in one process (explicit ``rank`` / ``world_size``) resume on a new world size, batch size and
``drop_last`` together.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import flat_folder

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
N = 13


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("ddp4") / "flat", N)


# -- Lightning's limit_train_batches: an int is a number of batches, a float a fraction -----------------------------


@pytest.mark.parametrize("limit", [4, 0.8])
def test_lightning_refuses_a_rest_past_what_limit_train_batches_lets_it_count(folder, tmp_path, limit):
    """4 of 13 read in batches of 2; the 9 left are 3 batches of 3 from Lightning's batch 2, but Lightning counts 4
    batches an epoch (the whole epoch of 5 cut by ``limit_train_batches``): it would read 2 of the 3."""
    from redteam_ddp4_worker import fit

    fit(folder, tmp_path, 2, 2, limit_train_batches=limit)
    (ckpt,) = (tmp_path / "ck").glob("*.ckpt")
    after = fit(folder, tmp_path, 3, 2, str(ckpt), limit_train_batches=limit)
    assert after["error"].startswith(
        "load_state_dict: Lightning resumes epoch 0 at its batch 2 of 4 (num_training_batches, counted before the "
        f"state loaded: limit_train_batches={limit!r} of the split's 5), but the rest of the epoch on this split is "
        "3 batches: Lightning would read 2 of them"
    ), after.get("error")
    assert not after["seen"], "nothing trained on"


@pytest.mark.parametrize("limit", [5, 100, 1.0])
def test_lightning_resumes_a_rest_that_limit_train_batches_lets_it_count_whole(folder, tmp_path, limit):
    from redteam_ddp4_worker import fit

    fit(folder, tmp_path, 2, 2, limit_train_batches=limit)
    (ckpt,) = (tmp_path / "ck").glob("*.ckpt")
    before = _epoch(folder, 0, 2)  # what the saved fit read
    after = fit(folder, tmp_path, 3, 2, str(ckpt), limit_train_batches=limit)
    assert "error" not in after
    assert sorted(before + after["seen"]["0"]) == list(range(N)), "the stopped epoch once over the two fits"
    assert after["indices"]["0"] == [2, 3, 4] and sorted(after["seen"]["1"]) == list(range(N))
    assert after["lengths"]["1"] == math.ceil(N / 3)


# -- Accelerate across a world-size change, under torchrun ------------------------------------------------------------


def torchrun(world: int, folder: Path, out: Path, *phases: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]
    command += [str(HERE / "redteam_ddp4_worker.py"), str(folder), str(out), *phases]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env, cwd=out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]


@pytest.fixture(scope="module")
def accelerate_runs(folder, tmp_path_factory):
    """Every record of three launches: 1 process saves; 2 resume that and save their own; 1 resumes theirs."""
    out = tmp_path_factory.mktemp("ddp4_accelerate")
    torchrun(1, folder, out, "save")
    torchrun(2, folder, out, "resume-1", "save", "probe")
    torchrun(1, folder, out, "resume-2")
    return {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}


def _order(runs, saved):
    """Epoch 0's order: the ids the saved ranks read before the save, as a whole run reads them."""
    return sorted(i for rank in range(saved) for i in runs[f"save-{saved}-{rank}"]["before"])


@pytest.mark.slow
@pytest.mark.parametrize("saved, resumed", [(2, 1), (1, 2)])
def test_accelerate_load_state_on_another_world_size_reads_the_rest_once(accelerate_runs, saved, resumed):
    runs = accelerate_runs
    ranks = [runs[f"resume-{saved}-{resumed}-{rank}"] for rank in range(resumed)]
    before = _order(runs, saved)
    assert len(before) == 2 * 2 * saved and len(set(before)) == len(before)
    rest = [i for record in ranks for batch in record["rest"] for i in batch]
    assert set(before) | set(rest) == set(range(N)) and not set(before) & set(rest), "each sample of epoch 0 once"
    assert len(rest) == (N - len(before)) + (N - len(before)) % resumed, "padded as DistributedSampler pads"
    left = math.ceil(math.ceil((N - len(before)) / resumed) / 3)
    assert [record["len"] for record in ranks] == [left] * resumed, "len() counts the rest, alike on every rank"
    assert [len(record["rest"]) for record in ranks] == [left] * resumed
    for record in ranks:  # gather_for_metrics of the rest keeps each sample once (the padded repeat dropped)
        assert sorted(record["gathered"]) == sorted(set(range(N)) - set(before))
    nxt = [i for record in ranks for batch in record["next"] for i in batch]
    assert set(nxt) == set(range(N)) and len(nxt) == N + (-N) % resumed, "epoch 1 whole on the new world size"
    assert [record["next_len"] for record in ranks] == [math.ceil(math.ceil(N / resumed) / 3)] * resumed


@pytest.mark.slow
@pytest.mark.parametrize("saved, resumed", [(2, 1), (1, 2)])
def test_accelerate_skips_after_load_state_on_another_world_size(accelerate_runs, saved, resumed):
    """What Accelerate's docs do after ``load_state``: ``skip_first_batches`` is refused pointing to ``skip``, and
    ``skip(2)``, the steps the saved run counted, changes nothing (the rest above is read whole)."""
    for rank in range(resumed):
        record = accelerate_runs[f"resume-{saved}-{resumed}-{rank}"]
        assert "call loader.skip(n) instead" in record["skip_first_batches"]
        assert record["skip"] == "accepted"


def _epoch(folder, epoch, batches, batch_size=2):
    """The ids of the first ``batches`` batches of ``epoch`` as the worker's loaders read it."""
    from helpers import sample_ids
    from redteam_ddp4_worker import make

    loader = make(folder, batch_size)
    loader.set_epoch(epoch)
    return [i for _, (images, _) in zip(range(batches), loader) for i in sample_ids(images)]


@pytest.mark.parametrize("limit", [4, 0.6])
def test_a_checkpoint_at_the_batch_limit_train_batches_ends_the_epoch_at_resumes_the_next_epoch(
    folder, tmp_path, limit
):
    """Lightning's epoch of 7 batches cut to 4; a step checkpoint after its 4th batch (the epoch's last, as Lightning
    counts it) resumed: Lightning goes on with epoch 1, which must read epoch 1's order, not epoch 0's batches 4..6."""
    from redteam_ddp4_worker import fit

    fit(folder, tmp_path, 2, epochs=1, checkpoint={"every_n_train_steps": 4}, limit_train_batches=limit)
    (ckpt,) = (tmp_path / "ck").glob("*.ckpt")
    after = fit(folder, tmp_path, 2, ckpt=str(ckpt), epochs=2, limit_train_batches=limit)
    assert "error" not in after and list(after["seen"]) == ["1"]
    assert after["indices"]["1"] == [0, 1, 2, 3]
    assert after["seen"]["1"] == _epoch(folder, 1, 4), "epoch 1's order, as the uninterrupted fit reads it"


# -- DistributedSampler's semantics, ranks simulated in one process ---------------------------------------------------


def _rest(folder, saved, done, resumed):
    """Ranks of ``saved`` read ``done`` batches in step; ranks of ``resumed`` load rank 0's state and read the rest:
    the ids read before and after, the resumed ranks' ``len()`` and their states after the rest."""
    from helpers import rank_loaders, read_in_step

    before = rank_loaders(folder, **saved)
    got, _ = read_in_step(before, done)
    after = rank_loaders(folder, **resumed)
    for loader in after:
        loader.load_state_dict(before[0].state_dict())
    lengths = [len(loader) for loader in after]
    tail, _ = read_in_step(after)
    return [g[0] for g in got], [t[0] for t in tail], lengths, [loader.state_dict() for loader in after]


@pytest.mark.parametrize(
    "resumed, lost",
    [({"world": 1, "batch_size": 4, "drop_last": True}, 1), ({"world": 4, "batch_size": 1, "drop_last": True}, 1)],
)
def test_another_world_size_batch_size_and_drop_last_together_cut_the_rest_as_an_epoch(folder, resumed, lost):
    """8 of 13 read on 2 ranks in batches of 2; the 5 left, cut by the new ``drop_last`` as an epoch of theirs is
    (to a multiple of the ranks, then whole batches): one left out, none read twice, equal batch counts."""
    got, tail, lengths, states = _rest(folder, {"world": 2, "batch_size": 2}, 2, resumed)
    assert len(got) == 8 and not set(got) & set(tail) and len(set(tail)) == len(tail) == N - 8 - lost
    assert len(set(lengths)) == 1 and lengths[0] * resumed["batch_size"] * resumed["world"] == len(tail)
    assert {(s["epoch"], s["batches_done"]) for s in states} == {(1, 0)}


def test_a_rest_that_the_new_drop_last_leaves_without_a_batch_says_so(folder):
    """The 5 left on 3 ranks in batches of 2 with ``drop_last=True``: 1 per rank, no batch; the whole rest is left
    out, which a whole epoch of this split would refuse up front: a warning names it and what reads it."""
    with pytest.warns(UserWarning, match=r"the rest of epoch 0 \(5 samples\) makes no batch on this split") as caught:
        got, tail, lengths, states = _rest(
            folder, {"world": 2, "batch_size": 2}, 2, {"world": 3, "batch_size": 2, "drop_last": True}
        )
    assert "drop_last=True" in str(caught[0].message) and "batch_size 2" in str(caught[0].message)
    assert lengths == [0, 0, 0] and tail == [] and {(s["epoch"], s["batches_done"]) for s in states} == {(1, 0)}


# -- under the real process group (the 2-process launch above) --------------------------------------------------------


@pytest.mark.slow
def test_one_image_on_two_ranks_shards_as_distributed_sampler_does(accelerate_runs):
    ranks = [accelerate_runs[f"probe-2-{rank}"]["one"] for rank in range(2)]
    assert [r["even"] for r in ranks] == [[1, [[0]]], [1, [[0]]]], "padded: both ranks read the one image"
    assert [r["uneven"] for r in ranks] == [[1, [[0]]], [0, []]], "exact: read once, rank 1 has no batch"
    for r in ranks:
        assert r["drop_last"].startswith("batch_size 2 is larger than the 0 samples per rank (2 ranks)")


@pytest.mark.slow
def test_validation_under_two_ranks_counts_each_sample_once(accelerate_runs):
    for rank in range(2):
        record = accelerate_runs[f"probe-2-{rank}"]
        assert sorted(record["gathered"]) == list(range(N)), "gather_for_metrics drops the padded repeat"
        assert sorted(record["exact"]) == list(range(N)), "even_batches=False: each once over the ranks"


@pytest.mark.slow
def test_epochs_without_set_epoch_move_on_and_the_same_set_epoch_twice_repeats(accelerate_runs):
    ranks = [accelerate_runs[f"probe-2-{rank}"] for rank in range(2)]
    for epoch in range(2):
        ids = ranks[0]["epochs"][epoch] + ranks[1]["epochs"][epoch]
        assert set(ids) == set(range(N)) and len(ids) == N + 1
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1], "a new order each pass, as gpupipe's epochs go on"
    for record in ranks:
        assert record["twice"][0] == record["twice"][1]
    assert set(ranks[0]["twice"][0]) | set(ranks[1]["twice"][0]) == set(range(N))


def test_lightning_val_check_interval_checkpoint_mid_epoch_with_limit_val_batches_resumes_exactly(folder, tmp_path):
    """Validation every 3 batches (twice an epoch of 7), 2 batches of it each time; Lightning's checkpoint after the
    first validation, mid-epoch, resumed: the rest of epoch 0, then epoch 1 whole, each validation the same 4."""
    from redteam_ddp4_worker import fit

    kw = {"val": True, "val_check_interval": 3, "limit_val_batches": 2}
    fit(folder, tmp_path, 2, epochs=1, checkpoint={}, **kw)
    ckpt = tmp_path / "ck" / "epoch=0-step=3.ckpt"
    after = fit(folder, tmp_path, 2, ckpt=str(ckpt), epochs=2, **kw)
    assert after["seen"]["0"] == _epoch(folder, 0, 7)[6:] and after["indices"]["0"] == [3, 4, 5, 6]
    assert after["seen"]["1"] == _epoch(folder, 1, 7)
    assert after["val"] == [[0, 3, 6, 9]] * 3, "validations at batch 6 of epoch 0 and 3, 6 of epoch 1"


def test_lightning_accumulate_grad_batches_checkpoint_resumes_on_another_batch_size(folder, tmp_path):
    """Checkpoints every optimizer step of 2 batches: step 1 is 2 batches of 2 (4 read); resumed in batches of 3,
    Lightning counts on from its batch 2 and reads the 9 left in 3 batches, then epoch 1 whole."""
    from redteam_ddp4_worker import fit

    fit(folder, tmp_path, 2, epochs=1, checkpoint={"every_n_train_steps": 1}, accumulate_grad_batches=2)
    after = fit(folder, tmp_path, 3, ckpt=str(tmp_path / "ck" / "epoch=0-step=1.ckpt"), accumulate_grad_batches=2)
    assert "error" not in after and after["indices"]["0"] == [2, 3, 4]
    assert sorted(_epoch(folder, 0, 2) + after["seen"]["0"]) == list(range(N))
    assert after["seen"]["1"] == _epoch(folder, 1, 5, batch_size=3)
