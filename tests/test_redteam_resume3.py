"""Red team, round 3: loader checkpoints as users really save them.

Every kind of loader's state through ``torch.save`` / ``torch.load(weights_only=True)``; states saved at odd
moments (never iterated, before the first batch, after an epoch's last batch, after ``set_epoch`` mid-pass, twice,
after a load); passes ended under the user's loop by ``load_state_dict`` or ``skip``; a state taken after an exception
left the pass; resumes with another world size, batch size or ``drop_last`` (mid-epoch: refused naming both values;
at an epoch's end: exact), seed, shuffle, weights or files; ``skip(n)`` after a loaded state. Under a real torchrun
(gloo): states of 2 ranks resumed on 4 and on 1, a Lightning fit resumed from mid-epoch ``every_n_train_steps``
checkpoints, Accelerate's ``save_state`` / ``load_state`` in new processes, and ranks that load unalike states
(``redteam_resume3_worker.py``; three launches: 2 ranks, 2 again, then 4 that also resume on 1).
"""

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import flat_folder, make_detection_set, sample_ids
from PIL import Image

import gpupipe
from gpupipe.loading.frameworks import PassEnded

HERE = Path(__file__).parent
WORKER = HERE / "redteam_resume3_worker.py"
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
N = 13  # samples: 5 batches of 3 (the last of 1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("resume3") / "flat", N)


def make(source, **kw):
    kw = {"batch_size": 3, "seed": 7, **kw}
    return gpupipe.loader(source, kw.pop("pipeline", PIPELINE), backend="torchvision", num_threads=0, **kw)


def ids(batches) -> list:
    return [sample_ids(images) for images, _ in batches]


def through_torch(state):
    """``state`` after ``torch.save`` and ``torch.load(..., weights_only=True)`` (torch's default since 2.6)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return type(value) in (int, str, bool, float) or value is None


# -- every kind of loader: plain data, loaded with weights_only=True ---------------------------------------------


def _masks(root: Path):
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for k in range(N):
        Image.fromarray(np.full((12, 16, 3), 16 * k, np.uint8)).save(root / "images" / f"s{k:02d}.png")
        Image.fromarray(np.full((12, 16), k % 3, np.uint8)).save(root / "masks" / f"s{k:02d}.png")
    return gpupipe.SegmentationFolder(root / "images", root / "masks")


def _tars(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    for shard in range(2):
        with tarfile.open(root / f"data-{shard}.tar", "w") as tar:
            for k in range(shard * 7, min(N, shard * 7 + 7)):
                for name, data in ((f"{k:04d}.png", _png(k)), (f"{k:04d}.cls", str(k % 3).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return gpupipe.WebDataset(str(root / "data-{0..1}.tar"), cache_dir=root / "cache")


def _png(k: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((12, 16, 3), 16 * k, np.uint8)).save(out, "PNG")
    return out.getvalue()


def _pack(root: Path, folder: Path) -> Path:
    from gpupipe.pack import PackSettings, pack

    pack(folder, root / "packed", PackSettings(shard_size=2048), workers=1, progress=False)
    return root / "packed"


def _remote(root: Path, folder: Path, request):
    from servers import FolderServer

    server = FolderServer(_pack(root, folder))
    request.addfinalizer(server.stop)
    return gpupipe.Shards(server.url, cache_dir=root / "cache")


def _target_transform(folder: Path):
    from torchvision import datasets, transforms

    return datasets.ImageFolder(folder, transform=transforms.Resize((8, 8)), target_transform=lambda y: 10 * y)


def _data_loader(folder: Path):
    from torchvision import datasets, transforms

    dataset = datasets.ImageFolder(
        folder, transform=transforms.Compose([transforms.Resize((8, 8)), transforms.PILToTensor()])
    )
    sampler = torch.utils.data.WeightedRandomSampler([1.0] * N, 9, generator=torch.Generator().manual_seed(5))
    return gpupipe.DataLoader(dataset, batch_size=3, sampler=sampler)


def _concat(folder: Path):
    from torchvision import datasets

    whole = datasets.ImageFolder(folder)
    return torch.utils.data.ConcatDataset([torch.utils.data.Subset(whole, range(8, 13)), whole])


KINDS = {
    "folder": lambda folder, root, request: make(folder),
    "weights": lambda folder, root, request: make(folder, weights=[1.0 + k % 2 for k in range(N)], num_samples=20),
    "no-replacement": lambda folder, root, request: make(
        folder, weights=torch.ones(N, dtype=torch.float32), num_samples=8, replacement=False
    ),
    "multi-label": lambda folder, root, request: make(
        gpupipe.FileList(
            [(p, [k % 3, (k + 1) % 3]) for k, p in enumerate(sorted(folder.rglob("*.png")))], classes=["a", "b", "c"]
        )
    ),
    "target_transform": lambda folder, root, request: make(_target_transform(folder)),
    "masks": lambda folder, root, request: make(_masks(root)),
    "boxes": lambda folder, root, request: gpupipe.DetectionLists(
        make(
            gpupipe.CocoDetection(*make_detection_set(root, N)),
            pipeline=[gpupipe.Decode(), gpupipe.Resize((32, 32)), gpupipe.Output("uint8")],
        )
    ),
    "pack": lambda folder, root, request: make(gpupipe.Shards(_pack(root, folder))),
    "remote-pack": lambda folder, root, request: make(_remote(root, folder, request)),
    "webdataset": lambda folder, root, request: make(_tars(root)),
    "DataLoader-weighted": lambda folder, root, request: _data_loader(folder),
    "concat-of-subsets": lambda folder, root, request: make(_concat(folder)),
}


def batch_digest(batch) -> str:
    """The sums of every tensor of a batch (images, labels, masks, boxes; lists and dicts of them)."""
    if isinstance(batch, torch.Tensor):
        return str(int(batch.to(torch.float64).sum() * 1000))
    parts = batch.values() if isinstance(batch, dict) else batch
    return "(" + "/".join(batch_digest(part) for part in parts) + ")"


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_loader_state_is_plain_data_that_weights_only_loads_and_resumes(folder, tmp_path, request, kind):
    first = KINDS[kind](folder, tmp_path / "a", request)
    it = iter(first)
    next(it)
    state = first.state_dict()
    rest = [batch_digest(b) for b in it]
    assert plain(state), state
    loaded = through_torch(state)
    assert loaded == state and json.loads(json.dumps(state)) == state
    second = KINDS[kind](folder, tmp_path / "b", request)
    second.load_state_dict(loaded)
    assert [batch_digest(b) for b in second] == rest and rest


# -- states saved at odd moments ----------------------------------------------------------------------------------


def _never_iterated(loader):
    return loader.state_dict(), [ids(loader), ids(loader)]


def _before_the_first_batch(loader):
    it = iter(loader)
    return loader.state_dict(), [ids(it), ids(loader), ids(loader)]


def _after_the_last_batch_before_the_next_iter(loader):
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)  # the pass has not yet raised StopIteration
    return loader.state_dict(), [ids(it), ids(loader), ids(loader)]


def _mid_epoch_after_set_epoch(loader):
    loader.set_epoch(3)
    it = iter(loader)
    next(it), next(it)
    return loader.state_dict(), [ids(it), ids(loader), ids(loader)]


def _twice_in_a_row(loader):
    it = iter(loader)
    next(it)
    first = loader.state_dict()
    assert loader.state_dict() == first
    return first, [ids(it), ids(loader), ids(loader)]


def _set_epoch_for_the_next_epoch_then_saved(loader):
    """A loop that holds its iterator (``next(it)`` for a fixed number of steps per epoch) sets the next epoch,
    then saves: the pass under way keeps its epoch and the state says so; the loop, resumed, sets that epoch
    again (as it does in the uninterrupted run), which leaves the rest of epoch 0 behind there too."""
    it = iter(loader)
    next(it), next(it)
    loader.set_epoch(1)
    return loader.state_dict(), [ids(loader), ids(loader)]


_set_epoch_for_the_next_epoch_then_saved.resumed_at = 1


def _saved_again_after_a_load(loader):
    it = iter(loader)
    next(it)
    again = make(loader.source)
    again.load_state_dict(loader.state_dict())
    return again.state_dict(), [ids(it), ids(loader), ids(loader)]


MOMENTS = [
    _never_iterated,
    _before_the_first_batch,
    _after_the_last_batch_before_the_next_iter,
    _mid_epoch_after_set_epoch,
    _twice_in_a_row,
    _set_epoch_for_the_next_epoch_then_saved,
    _saved_again_after_a_load,
]


@pytest.mark.parametrize("moment", MOMENTS, ids=[m.__name__.strip("_") for m in MOMENTS])
def test_a_state_saved_at_an_odd_moment_resumes_as_the_uninterrupted_run(folder, moment):
    state, passes = moment(make(folder))
    uninterrupted = sum(passes, [])
    resumed = make(folder)
    resumed.load_state_dict(through_torch(state))
    if hasattr(moment, "resumed_at"):
        resumed.set_epoch(moment.resumed_at)
    again = sum((ids(resumed) for _ in range(3)), [])
    assert again[: len(uninterrupted)] == uninterrupted, state


@pytest.mark.parametrize(
    "action, by",
    [
        (lambda loader, state: loader.load_state_dict(state), "load_state_dict"),
        (lambda loader, state: loader.skip(2), "skip(2)"),
    ],
    ids=["load_state_dict", "skip"],
)
def test_a_pass_ended_under_its_loop_says_so_at_its_next_batch_not_ends_short(folder, action, by):
    loader = make(folder)
    state = make(folder).state_dict()
    it = iter(loader)
    next(it)
    action(loader, state)
    with pytest.raises(PassEnded, match=re.escape(f"the pass over epoch 0 was ended after 1 of 5 batches by {by},")):
        next(it)


def test_set_epoch_leaves_the_pass_under_way_alone(folder):
    loader = make(folder)
    it = iter(loader)
    next(it)
    loader.set_epoch(4)
    assert len(list(it)) == 4 and loader.state_dict()["epoch"] == 4


# -- resumed with other settings ----------------------------------------------------------------------------------


def _states(folder):
    """``(mid, end)``: a state after batch 2 of epoch 1, and one after epoch 1's last batch (3 per batch)."""
    loader = make(folder)
    loader.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    mid = loader.state_dict()
    list(it)
    return mid, loader.state_dict()


@pytest.mark.parametrize(
    "changed, slots",
    [
        ({"batch_size": 4}, list(range(6, 13))),
        ({"drop_last": True}, list(range(6, 12))),
        ({"rank": 1, "world_size": 2}, [7, 9, 11, 6]),  # the 7 left padded to 8 with the first of them
    ],
    ids=["batch_size", "drop_last", "world_size"],
)
def test_another_split_reads_the_rest_mid_epoch_and_is_exact_at_an_epochs_end(folder, changed, slots, recwarn):
    mid, end = _states(folder)
    whole = make(folder)
    whole.set_epoch(1)
    epoch = sum(ids(whole), [])
    rest = make(folder, **changed)  # the slots after the 6 read, split as this loader splits (test_resume_resplit)
    rest.load_state_dict(through_torch(mid))
    assert sum(ids(rest), []) == [epoch[slot] for slot in slots]
    resumed, fresh = make(folder, **changed), make(folder, **changed)
    resumed.load_state_dict(through_torch(end))
    fresh.set_epoch(2)
    assert [ids(resumed) for _ in range(2)] == [ids(fresh) for _ in range(2)], "as a run with the new setting"
    assert not [w for w in recwarn if "load_state_dict" in str(w.message)], "nothing said to be unchecked"


@pytest.mark.parametrize(
    "changed", [{"seed": 8}, {"shuffle": False}, {"weights": [1.0] * N}], ids=["seed", "shuffle", "weights"]
)
def test_what_decides_the_order_is_refused_also_at_an_epochs_end(folder, changed):
    _, end = _states(folder)
    refusal = "draw by weight" if "weights" in changed else f"{list(changed)[0]} differs"
    with pytest.raises(ValueError, match=refusal):
        make(folder, **changed).load_state_dict(through_torch(end))


def test_a_dataset_with_a_file_added_removed_or_renamed_is_refused_naming_it(folder, tmp_path):
    import shutil

    mid, end = _states(folder)
    copies = {what: shutil.copytree(folder, tmp_path / what) for what in ("added", "removed", "renamed")}
    shutil.copy(copies["added"] / "class_0" / "s0000.png", copies["added"] / "class_1" / "extra.png")
    (copies["removed"] / "class_2" / "s0005.png").unlink()
    (copies["renamed"] / "class_1" / "s0004.png").rename(copies["renamed"] / "class_1" / "t0004.png")
    for what, field in (("added", "samples"), ("removed", "samples"), ("renamed", "dataset")):
        with pytest.raises(ValueError, match=f"{field} differs: .*the rest of the epoch would repeat or skip"):
            make(copies[what]).load_state_dict(mid)
        with pytest.raises(
            ValueError, match=re.escape("to read the changed dataset from epoch 2 on, call loader.set_epoch(2) instead")
        ):
            make(copies[what]).load_state_dict(end)


def test_skip_after_a_loaded_state_keeps_it_or_is_refused(folder):
    mid, _ = _states(folder)
    uninterrupted = make(folder)
    uninterrupted.load_state_dict(mid)
    rest = ids(uninterrupted)
    same = make(folder)
    same.load_state_dict(mid)
    assert ids(same.skip(2)) == rest, "skip of the batches the state resumes at: the same rest"
    other = make(folder)
    other.load_state_dict(mid)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "skip(1): the state loaded (load_state_dict, or Accelerate's load_state) already resumes epoch 1 at batch 2"
        ),
    ):
        other.skip(1)
    assert ids(other) == rest, "the state loaded stands"


def test_a_swapped_data_loader_resumed_without_its_seed_says_where_the_seed_comes_from(folder):
    from torchvision import datasets, transforms

    def swapped():
        dataset = datasets.ImageFolder(
            folder, transform=transforms.Compose([transforms.Resize((8, 8)), transforms.PILToTensor()])
        )
        return gpupipe.DataLoader(dataset, batch_size=3, shuffle=True)

    torch.manual_seed(1)
    first = swapped()
    it = iter(first)
    next(it)
    state = first.state_dict()
    torch.manual_seed(2)  # a new process: torch's seed is drawn afresh
    with pytest.raises(ValueError, match=r"seed differs: .*torch.initial_seed\(\)"):
        swapped().load_state_dict(state)


# -- under torchrun (gloo): other world sizes, Lightning and Accelerate in new processes ---------------------------


def torchrun(ranks: int, data: Path, out: Path, phase: str) -> list:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={ranks}",
        str(WORKER),
        "--data",
        str(data),
        "--out",
        str(out),
        "--phase",
        phase,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=out)
    records = [out / f"{phase}{ranks}-rank{r}.json" for r in range(ranks)]
    # every rank wrote its record after its last check: a rank ended by a signal only as the process exits (a
    # C++ thread of the frameworks torn down at exit, seen once in 8 runs on a loaded 2-core VM) loses no check
    finished = all(path.exists() for path in records) and "terminate called" in proc.stderr
    assert proc.returncode == 0 or finished, proc.stdout[-3000:] + proc.stderr[-4000:]
    return [json.loads(path.read_text()) for path in records]


@pytest.fixture(scope="module")
def launches(tmp_path_factory, request):
    """Each rank's record of each launch: ``run`` and ``resume`` on 2 ranks, ``other`` on 4 and on 1 (one launch of 4,
    whose ranks also build loaders of ``rank=0, world_size=1``: ``"one"``). Launched once
    per session: under pytest-xdist the first worker to ask launches, the others read its records."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    under_xdist = hasattr(request.config, "workerinput")  # each worker's basetemp is in the session's folder
    data = (base.parent if under_xdist else base) / "resume3_ddp"
    records = data / "records.json"
    with FileLock(str(data) + ".lock"):
        if not records.exists():
            flat_folder(data / "d13", 13)
            flat_folder(data / "d24", 24)
            out = data / "out"
            out.mkdir()
            launched = {"run": torchrun(2, data, out, "run"), "resume": torchrun(2, data, out, "resume")}
            four = torchrun(4, data, out, "other")  # and, in the same launch, world size 1 ("one")
            launched.update({"4": [{k: v for k, v in r.items() if k != "one"} for r in four], "1": [four[0]["one"]]})
            records.write_text(json.dumps(launched))
    return json.loads(records.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [4, 1])
def test_states_of_two_ranks_on_another_world_size_read_the_rest_mid_epoch_exact_at_an_epochs_end(launches, world_size):
    ranks = launches[str(world_size)]
    before = sum((sum(run["epochs"][1][:2], []) for run in launches["run"]), [])
    rest = sum((sum(rank["rest"], []) for rank in ranks), [])
    assert not set(before) & set(rest) and sorted(set(before + rest)) == list(range(N)), "the epoch, once"
    assert len(rest) == -(-(N - len(before)) // world_size) * world_size, "the 5 left, padded as torch pads"
    for rank in ranks:
        assert rank["resumed"] == rank["fresh"], "epochs 1 and 2 as a run of the new world size reads them"
    padded = -(-N // world_size) * world_size  # as DistributedSampler pads
    for epoch in range(2):
        read = sum((sum(rank["resumed"][epoch], []) for rank in ranks), [])
        assert sorted(set(read)) == list(range(N)) and len(read) == padded
    assert launches["run"][0]["epochs"][1] != [], "the run the states came from read epoch 1"


@pytest.mark.slow
def test_lightning_resumed_from_a_mid_epoch_checkpoint_on_two_ranks_sees_the_uninterrupted_batches(launches):
    for run, resumed in zip(launches["run"], launches["resume"]):
        full = run["lightning_full"]
        assert run["lightning_saving"] == full and len(full) == 6
        for step, seen in resumed["lightning_resumed"].items():
            assert seen == full[int(step) :], f"resumed from the checkpoint of step {step}"


@pytest.mark.slow
def test_accelerate_load_state_then_the_skip_its_docs_do_sees_the_uninterrupted_batches(launches):
    for run, resumed in zip(launches["run"], launches["resume"]):
        assert "call loader.skip(n) instead" in resumed["accelerate"]["skip_first_batches"]
        assert resumed["accelerate"]["after"] == run["accelerate"]["after"] and len(run["accelerate"]["after"]) == 6


# -- a state taken after the loop left its pass --------------------------------------------------------------------


def _interrupted(loader):
    """A training loop stopped by Ctrl-C (an exception out of the loop) at batch 2 of epoch 1."""
    for epoch in range(3):
        loader.set_epoch(epoch)
        for i, _ in enumerate(loader):
            if epoch == 1 and i == 2:
                raise KeyboardInterrupt


def test_a_state_taken_after_an_exception_left_the_pass_says_that_the_rest_of_the_epoch_is_not_read(folder):
    loader = make(folder)
    with pytest.raises(KeyboardInterrupt):
        _interrupted(loader)
    with pytest.warns(
        gpupipe.loading.epochs.LeftPass,
        match=re.escape(
            "the pass over epoch 1 was left after 3 of 5 batches (a break, or an exception out of the loop), so "
            "this state resumes at epoch 2"
        ),
    ) as caught:
        state = loader.state_dict()
    assert (state["epoch"], state["batches_done"]) == (2, 0), "as the next pass here reads it (rule 1)"
    assert caught[0].filename == __file__, "the warning points at the caller"


def test_no_word_where_the_state_says_what_the_loop_chose(folder, recwarn):
    loader = make(folder)
    for _ in zip(range(2), loader):  # a loop capped at 2 batches an epoch, which then sets the next epoch
        pass
    loader.set_epoch(1)
    assert loader.state_dict()["epoch"] == 1
    list(loader)  # a finished pass
    loader.state_dict()
    it = iter(loader)
    next(it)
    loader.state_dict()  # a pass under way
    assert not [w for w in recwarn if issubclass(w.category, gpupipe.loading.epochs.LeftPass)]


def test_a_split_drawn_again_without_its_seed_is_refused_saying_why(folder):
    from torchvision import datasets

    def split():  # torch's tutorials: random_split without a generator draws from torch's default one
        train, _ = torch.utils.data.random_split(datasets.ImageFolder(folder), [0.7, 0.3])
        return make(train)

    torch.manual_seed(1)
    first = split()
    it = iter(first)
    next(it)
    state = first.state_dict()
    torch.manual_seed(2)  # a new process: torch's seed is drawn afresh
    with pytest.raises(ValueError, match=r"dataset differs: .*random_split"):
        split().load_state_dict(state)


@pytest.mark.slow
def test_ranks_that_load_unalike_states_are_refused_on_every_rank_not_left_to_part(launches):
    """Per-rank files of which one is older (a job killed between the ranks' saves) left the ranks reading different
    batches and batch counts (DDP then hangs); a state one rank refused left the other resuming alone."""
    ranks = launches["resume"]
    for rank, record in enumerate(ranks):
        assert record["unalike"]["alike"] == "accepted"
        assert record["unalike"]["older"].startswith(
            "load_state_dict: the ranks loaded states that resume at different batches: (epoch, batches_done) is "
            "(1, 2) on rank 0; (1, 0) on rank 1"
        ), record["unalike"]["older"]
        refused = record["unalike"]["one_refuses"]
        if rank == 1:
            assert refused.startswith("load_state_dict: shuffle differs: the state has shuffle False"), refused
        else:
            assert refused.startswith(
                "load_state_dict: rank 1 refused its state (load_state_dict: shuffle differs"
            ), refused
