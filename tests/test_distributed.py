"""torchrun --nproc_per_node=2 (gloo, CPU): sharding, equal batches, epochs, reproducibility, resume."""


import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CPU_BACKEND_NAMES, CPU_BACKENDS, flat_folder
from gpupipe.pack import PackSettings, pack

WORKER = Path(__file__).with_name("ddp_worker.py")
pytestmark = pytest.mark.slow


#: even_batches=False cases (2 ranks, batch 4): 1 < world, 9 = 2 x 4 + 1, 11 odd.
UNEVEN = {"one": 1, "nine": 9, "eleven": 11}


@pytest.fixture(scope="module")
def ddp_launches(tmp_path_factory):
    """Two torchrun launches, each running every CPU backend in turn: a full run (saving state mid-epoch, then
    the exact evaluation of ``ddp_eval_worker.py``), then a resume in new processes:
    ``{backend: (run, resume, evaluation)}``, one per rank each."""
    tmp = tmp_path_factory.mktemp("ddp")
    folder = flat_folder(tmp / "folder", 13)
    small = flat_folder(tmp / "small", 3)
    uneven = [flat_folder(tmp / name, n, classes=1) for name, n in UNEVEN.items()]
    listing = tmp / "list.txt"
    listing.write_text("".join(f"folder/class_{i % 3}/s{i:04d}.png {i % 3}\n" for i in range(13)))
    shards = tmp / "shards"
    pack(folder, shards, PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    out = tmp / "out"
    out.mkdir()
    base = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
            "--folder", str(folder), "--small-folder", str(small), "--list", str(listing), "--shards", str(shards),
            "--backends", ",".join(CPU_BACKEND_NAMES), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for extra in (["--eval-folders", *map(str, uneven)], ["--resume"]):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    load = lambda backend, name: [  # noqa: E731
        json.loads((out / backend / f"{name}-rank{r}.json").read_text()) for r in range(2)]
    return {b: (load(b, "run"), load(b, "resume"), load(b, "eval")) for b in CPU_BACKEND_NAMES}


@pytest.fixture(params=CPU_BACKENDS)
def ddp_launch(request, ddp_launches):
    """``(run, resume, evaluation)`` of :func:`ddp_launches` for one backend."""
    return ddp_launches[request.param]


@pytest.fixture
def ddp_runs(ddp_launch):
    """``(run, resume)`` of :func:`ddp_launch`."""
    return ddp_launch[:2]


def ids_of(epoch_batches):
    return [i for batch in epoch_batches for i in batch["ids"]]


def test_ranks_cover_the_dataset_with_equal_batches(ddp_runs):
    run, _ = ddp_runs
    for epoch in ("0", "1"):
        per_rank = [r["folder"]["epochs"][epoch] for r in run]
        assert [len(b) for b in per_rank] == [2, 2] == [r["folder"]["len"] for r in run]
        ids = ids_of(per_rank[0]) + ids_of(per_rank[1])
        assert set(ids) == set(range(13)), "every sample at least once"
        assert len(ids) == 14 and run[0]["folder"][f"padded_{epoch}"] == 1, "one sample repeated to pad"
        for batch in per_rank[0] + per_rank[1]:
            assert batch["labels"] == [i % 3 for i in batch["ids"]]


def test_epochs_reshuffle_and_reassign_shards(ddp_runs):
    run, _ = ddp_runs
    rank0 = [ids_of(run[0]["folder"]["epochs"][e]) for e in ("0", "1")]
    assert rank0[0] != rank0[1]
    assert set(rank0[0]) != set(rank0[1]), "shard assignment changes between epochs"


def test_drop_last_gives_disjoint_equal_shards(ddp_runs):
    run, _ = ddp_runs
    for epoch in ("0", "1"):
        per_rank = [ids_of(r["list_drop_last"]["epochs"][epoch]) for r in run]
        assert len(per_rank[0]) == len(per_rank[1]) == 4  # 6 samples per rank, one full batch of 4
        assert not set(per_rank[0]) & set(per_rank[1]), "no sample twice"


def test_dataset_smaller_than_world_times_batch(ddp_runs):
    run, _ = ddp_runs
    per_rank = [r["small"]["epochs"]["0"] for r in run]
    assert [len(b) for b in per_rank] == [1, 1]
    assert [len(b[0]["ids"]) for b in per_rank] == [2, 2]
    assert set(ids_of(per_rank[0]) + ids_of(per_rank[1])) == {0, 1, 2}


def test_packed_shards_shard_like_the_folder(ddp_runs):
    run, _ = ddp_runs
    for epoch in ("0", "1"):
        per_rank = [r["shards"]["epochs"][epoch] for r in run]
        assert [len(b) for b in per_rank] == [2, 2]
        ids = ids_of(per_rank[0]) + ids_of(per_rank[1])
        assert set(ids) == set(range(13)) and len(ids) == 14
        for batch in per_rank[0] + per_rank[1]:
            assert batch["labels"] == [i % 3 for i in batch["ids"]]


def test_same_seed_same_batches_across_runs(ddp_runs):
    run, resume = ddp_runs
    for rank in range(2):
        assert len(run[rank]["folder"]["epochs"]["0"]) == 2, "two batches per rank"
        assert resume[rank]["folder"]["epochs"]["0"] == run[rank]["folder"]["epochs"]["0"]


def test_resume_in_a_new_process_continues_exactly(ddp_runs):
    run, resume = ddp_runs
    for rank in range(2):
        full_epoch = run[rank]["folder"]["epochs"]["1"]
        assert len(full_epoch) == len(run[rank]["shards"]["epochs"]["1"]) == 2, "one batch left after the resume"
        assert resume[rank]["resumed"] == full_epoch[1:]
        assert resume[rank]["resumed_shards"] == run[rank]["shards"]["epochs"]["1"][1:]


def test_ddp_example_checkpoints_and_resumes_with_its_defaults(tmp_path):
    data = flat_folder(tmp_path / "data", 160)  # 80 per rank: 2 batches of 32 an epoch
    # the defaults that decide saving and resuming (batch size, epochs, --save-every); a 32 px crop, not the
    # default 128 px, only makes each step cheaper (no assertion depends on the crop size)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(Path(__file__).parents[1] / "examples" / "train_ddp.py"), str(data),
           "--checkpoint", str(tmp_path / "ck"), "--size", "32"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = lambda *extra: subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=600, env=env)  # noqa: E731
    first = run("--max-steps", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "gpupipe backend: " in first.stdout
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["rank0.pt", "rank1.pt"], "saved at --max-steps"
    second = run()
    assert second.returncode == 0, second.stderr[-3000:]
    assert "rank 0: resumed at epoch 0, batch 1, step 1" in second.stdout
    assert "epoch 0: validation accuracy" in second.stdout and "over 160 images" in second.stdout
    third = run()
    assert third.returncode == 0, third.stderr[-3000:]
    assert "rank 0: resumed at epoch 1, batch 0, step 2" in third.stdout, "the epoch end was saved"
    assert "nothing to do" in third.stdout and "validation accuracy" not in third.stdout


def test_uneven_batches_read_every_sample_exactly_once_over_the_ranks(ddp_launch):
    """even_batches=False: no padding, no cut, for awkward sizes (fewer samples than ranks, world x batch + 1)."""
    sizes = UNEVEN
    ranks = ddp_launch[2]
    for name, n in sizes.items():
        for shuffle in (False, True):
            key = f"{name}-{shuffle}"
            ids = ranks[0][key]["ids"] + ranks[1][key]["ids"]
            assert sorted(ids) == list(range(n)), f"{key}: every sample exactly once, none repeated"
            lens = [r[key]["len"] for r in ranks]
            assert lens == [-(-len(r[key]["ids"]) // 4) for r in ranks] and max(lens) - min(lens) <= 1
            assert ranks[0][key]["totals"] == [n, n], "one all_reduce of per-rank sums counts each image once"
