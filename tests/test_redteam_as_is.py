"""Red team: a dataset read as it is (``fallback="torchvision"``) and ``gpupipe.DataLoader`` without a sampler
under Lightning and Accelerate, each compared with what torch's own ``DataLoader`` gives for the same dataset and
arguments. The framework cases run in one torchrun launch each (tests/redteam_as_is_worker.py)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset

import gpupipe
from gpupipe.interop.datasets import UnsupportedDataset

HERE = Path(__file__).parent
SAMPLES = 21  # the worker's dataset: odd, so a share of 2 ranks is padded as torch's DistributedSampler pads


class Growing(Dataset):
    """``count`` samples; sample ``i`` is ``(tensor([i]), i)``."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        if i >= self.count:
            raise IndexError(i)
        return torch.tensor([float(i)]), i


def quiet(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return gpupipe.DataLoader(dataset, fallback="torchvision", **kwargs)


def ids(loader) -> list[int]:
    return [int(v) for values, _ in loader for v in values[:, 0]]


def test_a_dataset_whose_length_changed_is_refused_not_read_stale():
    """torch's DataLoader reads len(dataset) at every pass; gpupipe planned the order once: a changed length is
    refused at the next pass (as a changed folder dataset is), rather than samples left out or read past the end."""
    dataset = Growing(6)
    loader = quiet(dataset, batch_size=4)
    assert ids(loader) == ids(TorchLoader(dataset, batch_size=4)) == list(range(6))
    dataset.count = 9  # torch's reads 9 now
    assert ids(TorchLoader(dataset, batch_size=4)) == list(range(9))
    with pytest.raises(UnsupportedDataset, match=r"Growing.*6 samples.*now 9.*build the loader again"):
        list(loader)
    dataset.count = 3
    with pytest.raises(UnsupportedDataset, match=r"now 3"):
        list(loader)
    dataset.count = 6
    assert ids(loader) == list(range(6))  # as built again: read as before


RESUME = """
import sys, warnings, torch
sys.path.insert(0, {here!r})
from test_redteam_as_is import Growing, quiet
loader = quiet(Growing(23), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5), num_workers={w})
loader.load_state_dict(torch.load({state!r}))
print([int(v) for values, _ in loader for v in values[:, 0]])
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_resumes_the_exact_rest_of_the_epoch_in_a_new_process(tmp_path, workers):
    loader = quiet(Growing(23), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5),
                   num_workers=workers)
    passing = iter(loader)
    first = [int(v) for _ in range(2) for v in next(passing)[0][:, 0]]
    torch.save(loader.state_dict(), tmp_path / "state.pt")
    rest = [int(v) for values, _ in passing for v in values[:, 0]]
    assert sorted(first + rest) == list(range(23))
    script = RESUME.format(here=str(HERE), state=str(tmp_path / "state.pt"), w=workers)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == rest


def test_a_loader_kept_from_the_framework_reads_everything_when_told_world_size_1():
    """The documented way out of the sharding under Accelerate: an explicit world_size=1 stands."""
    loader = quiet(Growing(10), batch_size=4, rank=0, world_size=1)
    assert loader._world.origin == "argument" and ids(loader) == list(range(10))


def _launch(mode: str, out: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT", "LOCAL_WORLD_SIZE", "PL_GLOBAL_SEED")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(HERE / "redteam_as_is_worker.py"), mode, str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**env, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    (out / "launch.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"{done.stdout[-1500:]}\n{done.stderr[-4000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@functools.cache
def _run(mode: str) -> list[dict]:
    import tempfile

    return _launch(mode, Path(tempfile.mkdtemp(prefix=f"redteam-as-is-{mode}-")))


def _each_once(ranks: list[dict], name: str, epoch: str) -> None:
    """The ranks' shares: disjoint but for torch's padding (one repeat for 21 samples on 2 ranks), all samples."""
    shares = [record[name][epoch] for record in ranks]
    assert len(shares[0]) == len(shares[1]) == 11
    assert set(shares[0]) | set(shares[1]) == set(range(SAMPLES))


@pytest.mark.slow
def test_lightning_shards_a_dataset_read_as_it_is_as_it_shards_torchs():
    pytest.importorskip("lightning")
    ranks = _run("lightning")
    for name in ("torch_shuffled", "ours_shuffled", "ours_seeded"):
        for epoch in ("0", "1"):
            _each_once(ranks, name, epoch)
        assert ranks[0][name]["0"] != ranks[0][name]["1"]


@pytest.mark.slow
def test_lightning_orders_by_its_seed_not_by_a_generator_seeded_per_rank():
    """Lightning's DistributedSampler ignores the DataLoader's generator (PL_GLOBAL_SEED, else 0): a generator
    seeded per rank gave each rank another order, so the shares overlapped and samples went missing."""
    pytest.importorskip("lightning")
    ranks = _run("lightning")
    for epoch in ("0", "1"):
        _each_once(ranks, "torch_generator", epoch)
        _each_once(ranks, "ours_generator", epoch)
    assert [r["ours_generator"] for r in ranks] == [r["ours_shuffled"] for r in ranks]  # both PL_GLOBAL_SEED's


@pytest.mark.slow
def test_lightning_without_its_distributed_sampler_reads_everything_on_every_rank():
    pytest.importorskip("lightning")
    for record in _run("lightning"):
        for epoch in ("0", "1"):
            assert record["torch_unsharded"][epoch] == list(range(SAMPLES))
            assert record["ours_unsharded"][epoch] == list(range(SAMPLES))


@pytest.mark.slow
def test_lightning_validation_and_len_are_torchs():
    """trainer.validate shards the val loader as torch's (the same padded repeat, no more); len(loader) of the
    script's own loader is the whole dataset's before and after fit, as torch's (Lightning leaves it alone)."""
    pytest.importorskip("lightning")
    ranks = _run("lightning")
    for record in ranks:
        assert record["ours_val"] == record["torch_val"]
        assert record["ours_fit_val"] == record["torch_fit_val"]  # the sanity check's 2 batches, then 2 epochs
        for name in ("shuffled", "unsharded", "generator"):
            assert record[f"ours_{name}:len_before"] == record[f"torch_{name}:len_before"] == 6
            assert record[f"ours_{name}:len_after"] == record[f"torch_{name}:len_after"] == 6
    assert sorted(ranks[0]["ours_val"] + ranks[1]["ours_val"]) == sorted([*range(SAMPLES), 0])


@pytest.mark.slow
def test_lightning_predicts_each_sample_once_as_it_does_with_torchs():
    """trainer.predict gives a torch DataLoader an unrepeated share (no padding: 11 and 10 of 21 samples); the
    swapped loader padded its shares as for training, so one sample was predicted twice."""
    pytest.importorskip("lightning")
    ranks = _run("lightning")
    for record in ranks:
        assert record["ours_predict"] == record["torch_predict"]
    assert sorted(ranks[0]["ours_predict"] + ranks[1]["ours_predict"]) == list(range(SAMPLES))


@pytest.mark.slow
def test_accelerate_shards_prepared_and_kept_loaders_alike():
    """Documented: under Accelerate the swapped loader reads its share whether or not it went through prepare()
    (torch's is sharded by prepare() only); a generator seeded alike on every rank (documented: gpupipe cannot
    take rank 0's, as Accelerate does for torch's) orders the shares, and another seed another order."""
    pytest.importorskip("accelerate")
    ranks = _run("accelerate")
    for name in ("prepared", "kept"):
        assert sorted(ranks[0][name] + ranks[1][name]) == sorted([*range(SAMPLES), 0])
    for record in ranks:
        assert record["torch_kept"] == list(range(SAMPLES))
    for name in ("ours_generator", "ours_generator_2"):
        shares = [record[name] for record in ranks]
        assert len(shares[0]) == len(shares[1]) == 11 and set(shares[0]) | set(shares[1]) == set(range(SAMPLES))
    assert ranks[0]["ours_generator"] != ranks[0]["ours_generator_2"]


class Random(Dataset):
    """A dataset with its own random augmentation: ``(tensor([i]), a draw of torch's RNG)``."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]), torch.randint(0, 10**6, (1,))


@pytest.mark.slow
def test_the_generator_seeds_the_workers_and_leaves_the_global_rng_alone():
    """torch's DataLoader seeds its workers from its ``generator``: the dataset's random draws in the workers
    follow the generator, whatever the global RNG, which the pass does not advance. So does gpupipe's."""

    def draws(make):
        torch.manual_seed(0)
        first = [int(v) for _, values in make() for v in values]
        after = torch.rand(1)
        torch.manual_seed(1)
        second = [int(v) for _, values in make() for v in values]
        torch.manual_seed(0)
        return first == second, bool(torch.equal(after, torch.rand(1)))

    def seeded(seed):
        return torch.Generator().manual_seed(seed)

    assert draws(lambda: TorchLoader(Random(), batch_size=2, num_workers=2, generator=seeded(3))) == (True, True)
    assert draws(lambda: quiet(Random(), batch_size=2, num_workers=2, generator=seeded(3))) == (True, True)
    one = [int(v) for _, values in quiet(Random(), batch_size=2, num_workers=2, generator=seeded(3)) for v in values]
    other = [int(v) for _, values in quiet(Random(), batch_size=2, num_workers=2, generator=seeded(4)) for v in values]
    assert one != other  # another generator, other draws


FORKED_FROM_HERE: list[int] = []  # set in the test's process: a forked worker inherits it, a spawned one not


class WhereRead(Dataset):
    """``(tensor([i]), whether this process inherited the test's module state)``: forked (1) or spawned (0)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]), len(FORKED_FROM_HERE)


@pytest.mark.slow
def test_multiprocessing_context_is_honoured_for_a_dataset_read_as_it_is():
    """A dataset that cannot be forked (an open LMDB / HDF5 handle) needs ``multiprocessing_context="spawn"``,
    which torch's DataLoader honours: so must a dataset read as it is (it was forked anyway)."""
    FORKED_FROM_HERE.append(1)
    try:
        for context in ("spawn", "fork"):
            want = [int(f) for _, forked in TorchLoader(WhereRead(), batch_size=2, num_workers=1,
                                                        multiprocessing_context=context) for f in forked]
            got = [int(f) for _, forked in quiet(WhereRead(), batch_size=2, num_workers=1,
                                                 multiprocessing_context=context) for f in forked]
            assert got == want == [int(context == "fork")] * 4
    finally:
        FORKED_FROM_HERE.clear()


def test_worker_options_without_workers_are_refused_as_torch_refuses_them():
    """With num_workers=0 torch's DataLoader refuses prefetch_factor and persistent_workers (ValueError); a
    dataset read as it is honours num_workers as torch does, so these are refused alike, by name."""
    for option in ({"prefetch_factor": 2}, {"persistent_workers": True}):
        with pytest.raises(ValueError):
            TorchLoader(Growing(4), batch_size=2, **option)
        with pytest.raises(ValueError, match=rf"{next(iter(option))}=.*num_workers=0"):
            quiet(Growing(4), batch_size=2, **option)
        assert len(quiet(Growing(4), batch_size=2, num_workers=1, **option)) == 2


Pair = __import__("collections").namedtuple("Pair", "value label")


class Shaped(Dataset):
    """Items of the structure named: a namedtuple, numpy arrays, nested dicts and lists, a None, a PIL image."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int):
        import numpy as np
        from PIL import Image

        return {
            "namedtuple": lambda: Pair(torch.tensor(float(i)), i),
            "numpy": lambda: (np.full((2,), i, np.float32), np.int64(i)),
            "nested": lambda: {"a": [torch.tensor(i), {"b": (i, f"s{i}")}]},
            "none": lambda: (torch.tensor(i), None),
            "pil": lambda: (Image.new("RGB", (2, 2)), i),
        }[self.kind]()


def _outcome(make):
    """``("ok", batches)`` or ``("error", the error's type)``."""
    try:
        return "ok", list(make())
    except Exception as err:  # what torch raises, compared by type
        return "error", type(err)


@pytest.mark.parametrize("kind", ["namedtuple", "numpy", "nested", "none", "pil"])
def test_items_of_every_structure_are_torchs_or_fail_as_torchs(kind):
    want = _outcome(lambda: TorchLoader(Shaped(kind), batch_size=2))
    got = _outcome(lambda: quiet(Shaped(kind), batch_size=2))
    assert got[0] == want[0]
    if want[0] == "error":
        assert got[1] is want[1] is TypeError
    else:
        assert repr(got[1]) == repr(want[1])


def test_samplers_subsets_and_a_batch_larger_than_the_dataset_read_as_torch_reads_them():
    from torch.utils.data import ConcatDataset, RandomSampler, SequentialSampler, Subset, SubsetRandomSampler

    dataset = Growing(10)
    for wrapped in (Subset(dataset, [5, 1, 3]), ConcatDataset([dataset, Growing(3)])):
        assert ids(quiet(wrapped, batch_size=4)) == ids(TorchLoader(wrapped, batch_size=4))
    assert ids(quiet(dataset, batch_size=32)) == ids(TorchLoader(dataset, batch_size=32)) == list(range(10))
    assert ids(quiet(dataset, batch_size=4, sampler=SequentialSampler(dataset))) == list(range(10))
    shuffled = ids(quiet(dataset, batch_size=4, sampler=RandomSampler(dataset)))
    assert sorted(shuffled) == list(range(10))
    assert sorted(ids(quiet(dataset, batch_size=2, sampler=SubsetRandomSampler([1, 4, 7])))) == [1, 4, 7]
    for drop_last in (False, True):
        assert len(quiet(Growing(9), batch_size=4, drop_last=drop_last)) == len(
            TorchLoader(Growing(9), batch_size=4, drop_last=drop_last))
