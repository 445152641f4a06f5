"""Mid-epoch resume on another split: another world size, per-rank batch size, drop_last or even_batches.

A state saved ``k`` batches into an epoch on ``W`` ranks (in step, as DDP keeps them) resumes on ``W'`` ranks with
batch size ``B'``: the rest of the epoch (the slots after the ``k * B * W`` read) is read exactly once over the new
ranks, plus the padding their own split adds, each sample with the augmentation it had in the uninterrupted run;
``len(loader)`` and ``state_dict()`` follow the resumed pass, whose states resume again (4 -> 2 -> 3), and the next
epoch is normal. Ranks are simulated in one process (explicit ``rank`` / ``world_size``); one real torchrun (gloo)
saves on 2 ranks and resumes on 3 (``resume_resplit_worker.py``).
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import CPU_BACKENDS, flat_folder
from helpers import rank_loader as make
from helpers import rank_loaders as ranks
from helpers import read_in_step as read
from PIL import Image

import gpupipe

HERE = Path(__file__).parent
N = 13
RANDOM = [gpupipe.Decode(), gpupipe.RandomResizedCrop((8, 8)), gpupipe.Output("uint8")]


def graded_folder(root: Path, count: int) -> Path:
    """``flat_folder``'s index in R and G (flat, so any crop keeps it), and a gradient in B that shows the crop."""
    for i in range(count):
        folder = root / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.zeros((20, 24, 3), np.uint8)
        pixels[..., 0], pixels[..., 1] = (i % 16) * 16 + 8, (i // 16) * 16 + 8
        pixels[..., 2] = np.arange(24, dtype=np.uint8)[None, :] * 10
        Image.fromarray(pixels).save(folder / f"s{i:04d}.png")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return graded_folder(tmp_path_factory.mktemp("resplit") / "graded", N)


def order(loader, epoch):
    """The ids (coded in the file names) of an epoch's order."""
    names = loader.source.names
    return [
        int(Path(names[i]).stem[1:]) for i in loader.source.epoch_order(seed=loader.seed, epoch=epoch, shuffle=True)
    ]


def ids(got):
    return [i for i, _, _ in got]


CASES = {  # (saved split, batches read, resumed split)
    "2x2->3x1": (dict(world=2), 2, dict(world=3, batch_size=1)),
    "4x1->1x3": (dict(world=4, batch_size=1), 2, dict(world=1, batch_size=3)),
    "2x2 drop_last->3x2": (dict(world=2, drop_last=True), 1, dict(world=3)),
    "3x2->2x2 drop_last": (dict(world=3), 1, dict(world=2, drop_last=True)),
    "2x2 uneven->3x2": (dict(world=2, even_batches=False), 2, dict(world=3)),
    "1x4->2x2 uneven": (dict(world=1, batch_size=4), 2, dict(world=2, even_batches=False)),
}


@pytest.mark.parametrize("saved, k, resumed", CASES.values(), ids=list(CASES))
def test_the_rest_of_the_epoch_is_read_exactly_once_on_another_split(folder, saved, k, resumed):
    before = ranks(folder, **saved)
    for loader in before:
        loader.set_epoch(1)
    got, _ = read(before, k)
    state = before[0].state_dict()
    assert (state["epoch"], state["batches_done"]) == (1, k)
    consumed = min(k * before[0].batch_size * saved["world"], N)
    rest = order(before[0], 1)[consumed:]
    assert sorted(ids(got)) == sorted(order(before[0], 1)[:consumed]), "the first k*B*W slots were read"

    after = ranks(folder, **resumed)
    for loader in after:
        loader.load_state_dict(state)
    shares = [loader.rank_share() for loader in after]
    lengths = [len(loader) for loader in after]
    tail, _ = read(after)
    counts = Counter(ids(tail))
    assert not set(counts) & set(ids(got)), "nothing read before is read again"
    padded, dropped = shares[0].padded, shares[0].dropped
    if resumed.get("drop_last"):
        assert set(counts) <= set(rest) and max(counts.values()) == 1
        assert len(tail) == sum(lengths) * after[0].batch_size, "whole batches only"
    else:
        assert set(counts) == set(rest), "every sample not read before, once"
        assert len(tail) == len(rest) + padded and sum(counts.values()) - len(counts) == padded
    assert not dropped or resumed.get("drop_last")
    assert [len(loader) for loader in after] == [len(loader) for loader in ranks(folder, **resumed)], "whole epochs"
    assert [loader.state_dict()["epoch"] for loader in after] == [2] * len(after)
    fresh = ranks(folder, **resumed)
    for loader in fresh:
        loader.set_epoch(2)
    assert ids(read(after)[0]) == ids(read(fresh)[0]), "the next epoch as a run of the new split reads it"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_each_sample_keeps_the_augmentation_of_the_uninterrupted_run(folder, backend):
    whole, _ = read(ranks(folder, 2, pipeline=RANDOM, backend=backend))
    seen = Counter(ids(whole))
    drawn = {i: images for i, images, _ in whole if seen[i] == 1}  # the padded sample is drawn twice
    before = ranks(folder, 2, pipeline=RANDOM, backend=backend)
    got, _ = read(before, 2)
    state = before[0].state_dict()
    after = ranks(folder, 3, pipeline=RANDOM, backend=backend, batch_size=1)
    for loader in after:
        loader.load_state_dict(state)
    tail, _ = read(after)
    compared = [(i, images) for i, images, _ in tail if i in drawn and Counter(ids(tail))[i] == 1]
    assert len(compared) >= 4 and len({images[2].sum().item() for _, images in compared}) > 1, "crops differ"
    for i, images in compared:
        assert (images == drawn[i]).all(), f"sample {i} cropped as in the uninterrupted run"


def test_a_chain_of_resumes_4_2_3_reads_the_epoch_once_and_states_follow_the_pass(folder, recwarn):
    first = ranks(folder, 4, batch_size=1)
    got, _ = read(first, 1)  # 4 slots read
    state = first[0].state_dict()
    second = ranks(folder, 2)
    for loader in second:
        loader.load_state_dict(state)
    assert [len(loader) for loader in second] == [3, 3], "the rest (9 slots, padded to 10) in batches of 2"
    assert second[0].state_dict()["offset"] == 4 and second[0].state_dict()["batches_done"] == 0
    middle, its = read(second, 1)
    resumed = second[0].state_dict()
    assert {k: resumed[k] for k in ("format", "epoch", "batches_done", "offset", "world_size")} == {
        "format": 4,
        "epoch": 0,
        "batches_done": 1,
        "offset": 4,
        "world_size": 2,
    }
    same = ranks(folder, 2)  # the state of a resumed pass on its own split: the rest of that pass, exactly
    for loader in same:
        loader.load_state_dict(resumed)
    assert ids(read(same)[0]) == ids(read(second, its=its)[0])
    assert [len(loader) for loader in second] == [4, 4], "after the resumed pass: whole epochs (7 samples) again"
    assert all(k not in second[0].state_dict() for k in ("offset",)) and second[0].state_dict()["format"] == 3
    third = ranks(folder, 3, batch_size=1)
    for loader in third:
        loader.load_state_dict(resumed)
    assert third[0].state_dict()["offset"] == 8
    last, _ = read(third)
    counts = Counter(ids(got) + ids(middle) + ids(last))
    assert set(counts) == set(range(N)) and sum(counts.values()) == N + 1, "5 left, padded to 6 on 3 ranks"
    assert [k for k, v in counts.items() if v > 1] == [order(first[0], 0)[8]], "padding repeats the rest's start"
    assert not [w for w in recwarn if "load_state_dict" in str(w.message)], "nothing said to be unchecked"


def test_even_batches_false_rank_0s_state_resumes_exactly_a_finished_ranks_says_the_next_epoch(folder):
    before = ranks(folder, 4, batch_size=3, even_batches=False)  # 4, 3, 3, 3 samples: 2, 1, 1, 1 batches
    got, _ = read(before, 1)
    states = [loader.state_dict() for loader in before]
    assert [(s["epoch"], s["batches_done"]) for s in states] == [(0, 1), (1, 0), (1, 0), (1, 0)]
    after = ranks(folder, 2, batch_size=1)
    for loader in after:
        loader.load_state_dict(states[0])
    tail, _ = read(after)
    assert ids(tail) == [order(before[0], 0)[12]] * 2, "the one slot left, padded for 2 ranks"
    assert sorted(ids(got)) == sorted(order(before[0], 0)[:12])


@pytest.mark.parametrize(
    "change, refusal",
    [
        (dict(seed=8), "seed differs: the state has seed 7, this loader seed 8"),
        (dict(shuffle=False), "shuffle differs: the state has shuffle True, this loader shuffle False"),
        (dict(source="smaller"), "samples differs: the state has samples 13, this loader samples 12"),
        (
            dict(state={"batch_size": None}),
            "world_size differs: the state has world_size 2, this loader "
            "world_size 3, and the state (format 3) does not record batch_size",
        ),
        (dict(state={"offset": 30, "format": 4}), "offset 30 is outside 0..12"),
        (dict(state={"offset": 3}), "a state of format 3 has no offset (format 4 records it), this one has offset 3"),
    ],
    ids=["seed", "shuffle", "dataset", "no batch_size", "offset out of range", "offset in format 3"],
)
def test_what_decides_the_samples_is_still_refused_naming_it(folder, tmp_path, change, refusal):
    before = ranks(folder, 2)
    _, its = read(before, 1)  # the passes live on (a state mid-epoch)
    state = dict(before[0].state_dict())
    assert state["batches_done"] == 1
    for name, value in change.pop("state", {}).items():
        state.pop(name) if value is None else state.update({name: value})
    source = graded_folder(tmp_path / "d12", 12) if change.pop("source", None) else folder
    with pytest.raises(ValueError, match="load_state_dict: " + refusal.replace("(", r"\(").replace(")", r"\)")):
        make(source, 3, **change).load_state_dict(state)


def test_labels_and_masks_follow_their_samples(tmp_path):
    labelled = flat_folder(tmp_path / "flat", N)
    for root in (tmp_path / "images", tmp_path / "masks"):
        root.mkdir()
    for k in range(N):
        Image.open(next(labelled.glob(f"*/s{k:04d}.png"))).save(tmp_path / "images" / f"s{k:02d}.png")
        Image.fromarray(np.full((20, 24), k % 3, np.uint8)).save(tmp_path / "masks" / f"s{k:02d}.png")
    masked = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    for source, target_of in ((labelled, lambda t: int(t)), (masked, lambda t: int(t.unique().item()))):
        before = ranks(source, 2)
        got, _ = read(before, 2)
        after = ranks(source, 3, batch_size=1)
        for loader in after:
            loader.load_state_dict(before[0].state_dict())
        tail, _ = read(after)
        assert len(set(ids(got) + ids(tail))) == N
        assert [target_of(t) for _, _, t in tail] == [i % 3 for i in ids(tail)]


@pytest.mark.slow
def test_torchrun_two_ranks_save_mid_epoch_three_resume_and_read_the_rest_once(tmp_path):
    """2 ranks (gloo) save after 2 batches of epoch 1; 3 new ranks load rank 0's state and read on."""
    flat_folder(tmp_path / "d13", N)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for world, phase in ((2, "save"), (3, "resume")):
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]
        command += [str(HERE / "resume_resplit_worker.py"), str(tmp_path), phase]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    saved = [json.loads((tmp_path / f"save-{r}.json").read_text()) for r in range(2)]
    resumed = [json.loads((tmp_path / f"resume-{r}.json").read_text()) for r in range(3)]
    epoch = saved[0]["order"]
    before = sum((r["before"] for r in saved), [])
    after = sum((r["after"] for r in resumed), [])
    assert sorted(before) == sorted(epoch[:8]) and sorted(set(after)) == sorted(epoch[8:])
    assert len(after) == 6 and Counter(after)[epoch[8]] == 2, "5 left, padded with the rest's first to 6"
    assert [r["len"] for r in resumed] == [2, 2, 2] and [r["next_epoch"] for r in resumed] == [2, 2, 2]
    padding = [resumed[0]["epoch2"][0], resumed[1]["epoch2"][0]]  # 13 padded to 15 with the epoch's first two
    assert sorted(sum((r["epoch2"] for r in resumed), [])) == sorted(list(range(N)) + padding)
