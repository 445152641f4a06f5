"""``fallback="torchvision"`` with a dataset gpupipe cannot read: the dataset read as it is, batches as torch's.

Each case compares with what ``torch.utils.data.DataLoader`` gives for the same dataset and arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset, IterableDataset

import gpupipe
from gpupipe.interop.dataloader import UnsupportedArgument
from gpupipe.interop.datasets import UnsupportedDataset


class Toy(Dataset):
    """CIFAR-like: in-memory float images and integer labels, with class names."""

    classes = ["cat", "dog", "owl"]

    def __init__(self, count: int = 37) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        pixels = torch.rand(3, 6, 5, generator=torch.Generator().manual_seed(i))
        return pixels, i % 3


class Records(Dataset):
    """Items of several structures: an image, its label, its name, a dict of extras."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        return torch.full((2, 2), float(i)), i, f"item-{i}", {"weight": torch.tensor(i / 10), "pid": os.getpid()}


class FailsAt(Toy):
    def __getitem__(self, i: int):
        if i == 5:
            raise ValueError("sample five is broken")
        return super().__getitem__(i)


def quiet_loader(dataset, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return gpupipe.DataLoader(dataset, fallback="torchvision", **kwargs)


def assert_same(got, want) -> None:
    """Equal structure, types and values (tensors bit for bit)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and torch.equal(got, want)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b)
    else:
        assert got == want


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_dataset_of_its_own_gives_torchs_batches(drop_last):
    dataset = Toy()
    with pytest.warns(UserWarning, match=r"cannot read a Toy, so fallback='torchvision' reads the Toy as it is"):
        loader = gpupipe.DataLoader(dataset, batch_size=8, drop_last=drop_last, fallback="torchvision")
    want = list(TorchLoader(dataset, batch_size=8, drop_last=drop_last))
    assert loader.backend == "torch-dataset"
    assert loader.dataset is dataset and loader.classes == ["cat", "dog", "owl"]
    assert len(loader) == len(want) == (4 if drop_last else 5)
    assert_same(list(loader), want)
    assert_same(list(loader), want)  # a second pass: the same, no shuffle


def test_without_the_fallback_it_is_refused_as_before():
    with pytest.raises(UnsupportedDataset, match=r"cannot read a Toy.*keep torch.utils.data.DataLoader"):
        gpupipe.DataLoader(Toy(), batch_size=8)


def test_items_of_any_structure_are_collated_as_torch_does():
    want = list(TorchLoader(Records(), batch_size=4))
    got = list(quiet_loader(Records(), batch_size=4))
    for batch in want:
        batch[3].pop("pid")
    for batch in got:
        batch[3].pop("pid")
    assert_same(got, want)
    assert [b[2] for b in got] == [("item-0", "item-1", "item-2", "item-3"), ("item-4", "item-5", "item-6", "item-7"),
                                   ("item-8", "item-9")]


def test_a_collate_fn_runs_on_a_dataset_read_as_it_is(image_folder):
    def pairs(items):
        return tuple(zip(*items))  # the detection references' collate

    want = list(TorchLoader(Toy(10), batch_size=4, collate_fn=pairs))
    loader = quiet_loader(Toy(10), batch_size=4, collate_fn=pairs)
    assert loader.collate_fn is pairs
    assert_same(list(loader), want)
    with pytest.raises(UnsupportedArgument, match=r"collate_fn=.*fallback='torchvision'"):
        gpupipe.DataLoader(Toy(10), batch_size=4, collate_fn=pairs)
    from torchvision import datasets, transforms

    readable = datasets.ImageFolder(str(image_folder), transform=transforms.Compose([transforms.Resize((8, 8)),
                                                                                    transforms.ToTensor()]))
    with pytest.raises(UnsupportedArgument, match=r"collate_fn=.*gpupipe batches images itself"):
        gpupipe.DataLoader(readable, batch_size=4, collate_fn=pairs, fallback="torchvision")


def test_shuffled_epochs_ranks_and_resume_are_gpupipes():
    dataset = Toy(50)
    loader = quiet_loader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))

    def order(batches):
        return torch.cat([pixels[:, 0, 0, 0] for pixels, _ in batches])

    ids = {float(dataset[i][0][0, 0, 0]): i for i in range(50)}
    epochs = [[ids[float(v)] for v in order(loader)] for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(50))
    assert epochs[0] != epochs[1]
    again = quiet_loader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
    assert [ids[float(v)] for v in order(again)] == epochs[0]

    resumed = quiet_loader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
    passing = iter(resumed)
    first = [next(passing) for _ in range(3)]
    state = resumed.state_dict()
    later = quiet_loader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
    later.load_state_dict(state)
    assert [ids[float(v)] for v in order(first) ] + [ids[float(v)] for v in order(later)] == epochs[0]

    shares = []
    for rank in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            part = gpupipe.loader(dataset, batch_size=8, rank=rank, world_size=2, fallback="torchvision", seed=1)
        shares.append([ids[float(v)] for v in order(part)])
    assert len(shares[0]) == len(shares[1]) == 25
    assert set(shares[0]) | set(shares[1]) == set(range(50)) and not set(shares[0]) & set(shares[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_num_workers_is_honoured_for_a_dataset_read_as_it_is(workers):
    batches = list(quiet_loader(Records(), batch_size=5, num_workers=workers))
    pids = {int(p) for batch in batches for p in batch[3]["pid"]}
    assert (pids == {os.getpid()}) == (workers == 0)


def test_an_error_of_the_dataset_keeps_its_type_and_names_the_sample():
    loader = quiet_loader(FailsAt(), batch_size=4)
    with pytest.raises(ValueError, match="sample five is broken") as raised:
        list(loader)
    notes = "".join(getattr(raised.value, "__notes__", []))
    assert "FailsAt[5]" in notes


def test_an_image_folder_with_paths_runs_with_its_own_getitem(tmp_path):
    from torchvision import datasets, transforms

    for k in range(6):
        (tmp_path / f"c{k % 2}").mkdir(exist_ok=True)
        Image.fromarray(np.full((9, 7, 3), 40 * k, np.uint8)).save(tmp_path / f"c{k % 2}" / f"{k}.png")

    class WithPaths(datasets.ImageFolder):
        def __getitem__(self, index):
            image, label = super().__getitem__(index)
            return image, label, self.samples[index][0]

    dataset = WithPaths(str(tmp_path), transform=transforms.ToTensor())
    with pytest.raises(UnsupportedDataset, match="defines its own __getitem__"):
        gpupipe.DataLoader(dataset, batch_size=4)
    assert_same(list(quiet_loader(dataset, batch_size=4)), list(TorchLoader(dataset, batch_size=4)))


def test_what_cannot_be_read_as_it_is_is_refused_by_name():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(UnsupportedDataset, match="Stream gives its samples as a stream"):
        quiet_loader(Stream(), batch_size=2)
    with pytest.raises(UnsupportedDataset, match="pipeline= cannot be applied"):
        quiet_loader(Toy(), batch_size=2, pipeline="train")
    with pytest.raises(ValueError, match="not on backend 'dali-cpu'"):
        quiet_loader(Toy(), batch_size=2, backend="dali-cpu")


@pytest.mark.slow
def test_two_ranks_read_torchs_shares_of_a_dataset_read_as_it_is(tmp_path):
    """torchrun, 2 gloo ranks: with a DistributedSampler(shuffle=False) each rank reads exactly torch's share
    (without a sampler, and no framework, every sample, as torch's);
    shuffled, the ranks' shares are disjoint, cover the dataset (21 samples: one repeated to even them, as
    torch's sampler pads) and change with ``set_epoch``."""
    worker = Path(__file__).with_name("dataset_fallback_worker.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
               str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for record in ranks:
        assert record["ours"] == record["torch"] and record["len"] == [3, 3]
        ours, torchs = record["unsampled"]  # no sampler, no framework: every sample in every process, as torch's
        assert ours == torchs == list(range(21))
    for epoch in (0, 1):
        shares = [set(record["epochs"][epoch]) for record in ranks]
        assert len(ranks[0]["epochs"][epoch]) == len(ranks[1]["epochs"][epoch]) == 11
        assert shares[0] | shares[1] == set(range(21))
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]
