"""Epochs drawn by weight (``weights=``; ``WeightedRandomSampler`` and ``RandomSampler(replacement=True)``
given to ``gpupipe.DataLoader``): the draws are ``torch.multinomial``'s from ``(seed, epoch)``, the same on
every backend and rank split and after a resume; bad weights and what cannot be drawn are refused by name."""

import collections

import numpy as np
import pytest
import torch
import torchvision
from torch.utils.data import RandomSampler, WeightedRandomSampler
from torchvision import transforms as T

import gpupipe
from gpupipe.plan.seeding import order_generator
from helpers import flat_folder, sample_ids

SMALL = T.Compose([T.CenterCrop(8), T.PILToTensor()])  # uint8: flat_folder's colours read back as sample ids
N = 22


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("draws") / "flat", N, classes=2)


def label_of(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder))
    return {int(path.split("s")[-1][:4]): label for path, label in dataset.samples}, dataset


def read(loader):
    return [i for images, _ in loader for i in sample_ids(images)]


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_epochs_are_torchs_multinomial_draws_from_the_seed_and_epoch(folder, backend):
    labels, dataset = label_of(folder)
    weights = [0.0 if label == 0 else 1.0 + (i % 3) for i, (_, label) in enumerate(dataset.samples)]
    loader = gpupipe.loader(folder, SMALL, weights=weights, num_samples=50, batch_size=8, seed=7, backend=backend,
                            device="cpu")
    assert len(loader) == 7  # ceil(50 / 8), as torch's DataLoader with such a sampler
    slot_ids = {k: int(dataset.samples[k][0].split("s")[-1][:4]) for k in range(N)}
    for epoch in range(2):
        drawn = torch.multinomial(torch.tensor(weights, dtype=torch.float64), 50, True,
                                  generator=order_generator(7, epoch)).tolist()
        got = read(loader)
        assert got == [slot_ids[k] for k in drawn], epoch
        assert all(labels[i] == 1 for i in got)  # a sample of weight 0 never comes
        assert max(collections.Counter(got).values()) > 1  # with replacement: some sample comes twice


def test_backends_and_a_two_rank_split_read_the_same_draws(folder):
    weights = np.linspace(0.1, 2.0, N)
    one = read(gpupipe.loader(folder, SMALL, weights=weights, num_samples=40, batch_size=5, backend="torchvision",
                              device="cpu"))
    assert read(gpupipe.loader(folder, SMALL, weights=weights, num_samples=40, batch_size=5, backend="dali-cpu",
                               device="cpu")) == one
    ranks = [read(gpupipe.loader(folder, SMALL, weights=weights, num_samples=40, batch_size=5, backend="torchvision",
                                 device="cpu", rank=r, world_size=2)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 20
    assert [ranks[k % 2][k // 2] for k in range(40)] == one  # rank r takes every 2nd slot from r


def test_a_resumed_weighted_epoch_continues_exactly_and_other_weights_are_refused(folder):
    def make(weights):
        return gpupipe.loader(folder, SMALL, weights=weights, num_samples=30, batch_size=4, backend="torchvision",
                              device="cpu")

    weights = [1.0 + i for i in range(N)]
    whole = read(make(weights))
    first = make(weights)
    it = iter(first)
    taken = [i for _ in range(3) for i in sample_ids(next(it)[0])]
    state = first.state_dict()
    resumed = make(weights)
    resumed.load_state_dict(state)
    assert taken + read(resumed) == whole
    with pytest.raises(ValueError, match="draws differs"):
        make([1.0] * N).load_state_dict(state)
    plain = gpupipe.loader(folder, SMALL, batch_size=4, backend="torchvision", device="cpu")
    with pytest.raises(ValueError, match="the state's loader draws by weight, this loader does not"):
        plain.load_state_dict(state)
    with pytest.raises(ValueError, match="does not draw by weight, this loader does"):
        make(weights).load_state_dict(plain.state_dict())


def test_a_skipped_bad_file_takes_its_weight_with_it(tmp_path):
    root = flat_folder(tmp_path / "flat", 6, classes=2)
    bad = sorted(root.rglob("*.png"))[0]
    bad.write_bytes(b"not an image")
    weights = [100.0] + [1.0] * 5  # the bad file is the first sample (sorted, as ImageFolder lists)
    names = [p for p, _ in torchvision.datasets.ImageFolder(str(root)).samples]
    assert names[0] == str(bad)
    loader = gpupipe.loader(root, SMALL, weights=weights, num_samples=12, batch_size=4, backend="torchvision",
                            device="cpu", on_error="skip")
    assert [s.path for s in loader.skipped] == [str(bad)] and len(read(loader)) == 12


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"weights": [1.0] * (N - 1)}, r"one number per sample \(22\), got shape \(21,\)"),
        ({"weights": [1.0] * (N - 1) + [-1.0]}, r"finite and >= 0: weights\[21\] is -1.0"),
        ({"weights": [1.0] * (N - 1) + [float("nan")]}, r"weights\[21\] is nan"),
        ({"weights": [0.0] * N}, "all 0"),
        ({"weights": "abc"}, "weights must be numbers"),
        ({"weights": [1.0] * N, "num_samples": 0}, "num_samples must be an int >= 1, got 0"),
        ({"weights": [1.0] * 3 + [0.0] * (N - 3), "num_samples": 4, "replacement": False},
         "num_samples=4 without replacement needs as many samples of weight > 0; 3 have one"),
        ({"num_samples": 5}, "num_samples= and replacement= go with weights="),
    ],
)
def test_bad_draws_are_refused_naming_the_argument(folder, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gpupipe.loader(folder, SMALL, batch_size=4, device="cpu", **kwargs)


def test_a_pack_refuses_draws_by_weight(folder, tmp_path):
    from gpupipe.pack import pack

    pack(folder, tmp_path / "packed", workers=1, progress=False)
    with pytest.raises(ValueError, match="weights=: epochs drawn by weight read loose files.*Shards reads tars"):
        gpupipe.loader(tmp_path / "packed", SMALL, weights=[1.0] * N, batch_size=4, device="cpu")


def test_the_swapped_loader_takes_torchs_weighted_and_replacement_samplers(folder):
    labels, _ = label_of(folder)
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    weights = [0.0 if label == 0 else 1.0 for _, label in dataset.samples]
    sampler = WeightedRandomSampler(weights, num_samples=30, generator=torch.Generator().manual_seed(3))
    ours = gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, device="cpu")
    theirs = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler)
    assert len(ours) == len(theirs) == 8
    got = read(ours)
    assert len(got) == 30 and all(labels[i] == 1 for i in got)
    drop = gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True, device="cpu")
    assert len(drop) == len(torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True)) == 7
    uniform = RandomSampler(dataset, replacement=True, num_samples=45)
    assert len(read(gpupipe.DataLoader(dataset, batch_size=5, sampler=uniform, device="cpu"))) == 45
    shorter = RandomSampler(dataset, num_samples=10)  # without replacement: 10 different samples
    got = read(gpupipe.DataLoader(dataset, batch_size=5, sampler=shorter, device="cpu"))
    assert len(got) == len(set(got)) == 10


def test_the_loader_pages_example_weighs_every_class_alike(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    from helpers import make_image_folder

    text = (Path(__file__).parents[1] / "docs" / "loader.md").read_text()
    [code] = [b for b in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M) if "weights=weights" in b]
    make_image_folder(tmp_path / "data" / "train", {"cat": 12, "dog": 3}, sizes=(40, 64))
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(code.replace('"train", batch_size=256', '"val", batch_size=5, device="cpu"'), "<loader.md>", "exec"),
         names)
    labels, weights, loader = names["labels"], names["weights"], names["loader"]
    assert weights[labels == 0].sum() == pytest.approx(weights[labels == 1].sum())
    assert len(loader) == 3 and loader.source.draws.num_samples == 15


def test_under_torchrun_ranks_split_the_draws_and_refuse_other_weights(folder, tmp_path):
    from helpers import two_ranks

    ranks = two_ranks(tmp_path, f"""
        from torchvision import transforms as T
        small = T.Compose([T.CenterCrop(8), T.PILToTensor()])
        weights = [1.0 + i for i in range({N})]
        loader = gpupipe.loader({str(folder)!r}, small, weights=weights, num_samples=20, batch_size=5,
                                backend="torchvision", device="cpu")
        result = {{"ids": [i for images, _ in loader for i in sample_ids(images)], "batches": len(loader)}}
        mine = weights if dist.get_rank() == 0 else weights[::-1]
        try:
            gpupipe.loader({str(folder)!r}, small, weights=mine, batch_size=5, backend="torchvision", device="cpu")
        except gpupipe.Error as err:
            result["refused"] = str(err)
    """)
    one = read(gpupipe.loader(folder, SMALL, weights=[1.0 + i for i in range(N)], num_samples=20, batch_size=5,
                              backend="torchvision", device="cpu"))
    assert [r["batches"] for r in ranks] == [2, 2]
    assert [ranks[k % 2]["ids"][k // 2] for k in range(20)] == one
    assert all("disagree on the loader's files and settings: draws is" in r["refused"] for r in ranks), ranks
