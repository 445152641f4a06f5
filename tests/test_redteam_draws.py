"""Red team of a folder dataset's ``target_transform`` (``gpupipe.interop.target_map``) and of epochs drawn by
weight (``gpupipe.loading.draws``): the labels and draws stay torch's (or are refused by name) through subsets,
dtypes, backends, ranks, frameworks and resumes."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from helpers import flat_folder, sample_ids
from torch.utils.data import ConcatDataset, RandomSampler, Subset, WeightedRandomSampler, random_split
from torchvision import transforms as T

import gpupipe
from gpupipe.interop.datasets import UnsupportedDataset
from gpupipe.interop.target_map import LabelMap, UnmappableTarget
from gpupipe.loading.draws import Draws
from gpupipe.plan.seeding import order_generator

HERE = Path(__file__).parent
SMALL = T.Compose([T.CenterCrop(8), T.PILToTensor()])  # uint8: flat_folder's colours read back as sample ids
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
N = 22


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("r14") / "flat", N, classes=3)


def ids(loader):
    return [i for images, _ in loader for i in sample_ids(images)]


def labels(loader):
    return [y for _, y in loader]


def multinomial(weights, count, seed, epoch, replacement=True):
    weights = torch.as_tensor(weights, dtype=torch.float64)
    return torch.multinomial(weights, count, replacement, generator=order_generator(seed, epoch)).tolist()


# -- target_transform -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"backend": "dali-cpu", "dtype": "float16", "channels_last": True},
        {"backend": "torchvision", "dtype": "uint8"},
        {"backend": "dali-cpu", "pipeline": PIPELINE},  # replaces the dataset's transform; the labels stay mapped
    ],
    ids=["dali-float16-channels_last", "torchvision-uint8", "dali-explicit-pipeline"],
)
def test_the_labels_of_a_random_split_and_a_concat_stay_torchs_whatever_the_images_are(folder, options):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=lambda y: np.float32(1 - y))
    train, val = random_split(dataset, [0.6, 0.4], generator=torch.Generator().manual_seed(2))
    for part in (train, ConcatDataset([val, Subset(dataset, [21, 0])])):
        ours = gpupipe.DataLoader(part, batch_size=4, device="cpu", **options)
        theirs = torch.utils.data.DataLoader(part, batch_size=4)
        for (images, mine), (_, expected) in zip(ours, theirs, strict=True):
            assert mine.dtype == expected.dtype == torch.float32 and torch.equal(mine, expected)
            assert images.dtype == getattr(torch, options.get("dtype", "uint8"))


@pytest.mark.parametrize(
    "transform, first, other",
    [
        (lambda y: 1.5 if y == 2 else y, "int", "float"),  # torch: int64 batches, then float64 ones
        (lambda y: torch.tensor(y, dtype=torch.float32 if y else torch.int64), "int64", "float32"),
        (lambda y: np.int64(y) if y else np.float32(y), "float32", "int64"),
        (lambda y: y == 1 if y < 2 else y, "bool", "int"),
    ],
    ids=["int-and-float", "tensor-dtypes", "numpy-dtypes", "bool-and-int"],
)
def test_a_target_transform_giving_classes_values_of_other_types_is_refused_by_name(folder, transform, first, other):
    """torch's default_collate batches by the batch's first sample: each batch's dtype would depend on which
    class comes first (int64 for one batch, float64 for the next); one table of one dtype would be silently
    another dtype than every one of torch's batches."""
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=transform)
    with pytest.raises(UnsupportedDataset, match=rf"class 0 .*{first}.*class \d .*{other}"):
        gpupipe.DataLoader(dataset, batch_size=5, device="cpu", backend="torchvision")


def test_a_target_table_too_large_for_the_device_is_refused_before_it_is_built():
    """A one-hot target_transform over ImageNet-21k's classes: a (21841, 21841) float32 table (1.9 GB), which
    would sit on the GPU; refused after the first class, naming the size, before the other classes are asked."""
    asked = []

    def one_hot(y):
        asked.append(y)
        return F.one_hot(torch.tensor(y), 21841).float()

    with pytest.raises(UnmappableTarget, match=r"21,841 classes .*GiB"):
        LabelMap.of(one_hot, 21841, "ImageFolder")
    assert asked == [0]


@pytest.mark.timeout(120)  # a table built value by value through Python runs for minutes; no time is asserted
def test_a_thousand_class_one_hot_table_is_built():
    table = LabelMap.of(lambda y: F.one_hot(torch.tensor(y), 1000).float(), 1000, "ImageFolder").table
    assert table.shape == (1000, 1000) and torch.equal(table, torch.eye(1000))


def test_a_target_transform_replaced_under_a_split_is_refused_at_the_next_pass(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=lambda y: y + 1)
    train, _ = random_split(dataset, [0.5, 0.5], generator=torch.Generator().manual_seed(0))
    loader = gpupipe.DataLoader(train, batch_size=4, device="cpu", backend="torchvision")
    next(iter(loader))
    dataset.target_transform = lambda y: y + 2
    with pytest.raises(UnsupportedDataset, match=r"ImageFolder\.target_transform changed after the loader was built"):
        next(iter(loader))


def test_a_class_mapped_to_nan_is_not_taken_for_a_random_transform():
    table = LabelMap.of(lambda y: float("nan") if y == 1 else float(y), 3, "ImageFolder").table
    assert table.dtype == torch.float64 and table[0] == 0 and table[1].isnan() and table[2] == 2


class Smoothed:
    """A one-hot target with label smoothing whose ``eps`` the training loop changes between epochs."""

    def __init__(self):
        self.eps = 0.0

    def __call__(self, y):
        return F.one_hot(torch.tensor(y), 3).float() * (1 - self.eps) + self.eps / 3


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_a_target_transform_whose_values_change_between_epochs_gives_each_epoch_torchs_labels(folder, backend):
    """torch's DataLoader workers, started at each pass, see the transform as it is then; a table worked out
    once, when the loader was built, would go on giving the first epoch's labels, silently."""
    smoothed, merge = Smoothed(), {0: 0, 1: 0, 2: 1}
    for transform, change in (
        (smoothed, lambda: setattr(smoothed, "eps", 0.3)),
        (merge.__getitem__, lambda: merge.update({2: 7})),
    ):
        dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=transform)
        ours = gpupipe.DataLoader(dataset, batch_size=8, device="cpu", backend=backend)
        for epoch in range(2):
            theirs = labels(torch.utils.data.DataLoader(dataset, batch_size=8))
            got = labels(ours)
            assert all(a.dtype == b.dtype and torch.allclose(a, b) for a, b in zip(got, theirs, strict=True)), epoch
            change()
        assert torch.cat(got).max() in (0.8, 7)  # the second epoch's values


def test_a_target_transform_that_fails_after_a_change_is_named_at_the_next_pass(folder):
    merge = {0: 0, 1: 0, 2: 1}
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=merge.__getitem__)
    loader = gpupipe.DataLoader(dataset, batch_size=8, device="cpu", backend="torchvision")
    del merge[2]
    with pytest.raises(UnsupportedDataset, match=r"fails on class 2: KeyError"):
        next(iter(loader))


# -- draws by weight ------------------------------------------------------------------------------------------


def test_weights_whose_sum_overflows_are_refused_not_drawn_as_one_sample(folder):
    """torch.multinomial over weights summing to inf draws one sample every time, silently."""
    with pytest.raises(ValueError, match=r"weights sum to inf"):
        gpupipe.loader(folder, PIPELINE, weights=np.full(N, 1e308), batch_size=4, device="cpu", backend="torchvision")


@pytest.mark.parametrize("weights", [np.ones(N, complex), torch.ones(N, dtype=torch.complex64)], ids=["numpy", "torch"])
def test_complex_weights_are_refused_not_cut_to_their_real_part(folder, weights):
    with pytest.raises(ValueError, match=r"weights must be real numbers"):
        gpupipe.loader(folder, PIPELINE, weights=weights, batch_size=4, device="cpu", backend="torchvision")


def test_numpy_bool_weights_draw_as_a_bool_tensor_does(folder):
    mask = np.arange(N) % 2 == 0
    a = ids(gpupipe.loader(folder, PIPELINE, weights=mask, batch_size=4, device="cpu", backend="torchvision"))
    b = ids(
        gpupipe.loader(
            folder, PIPELINE, weights=torch.from_numpy(mask), batch_size=4, device="cpu", backend="torchvision"
        )
    )
    assert a == b and len(a) == N


def test_more_samples_than_torch_multinomial_draws_from_are_refused_when_the_loader_is_built():
    """torch.multinomial takes at most 2**24 categories; the failure would come at the first batch."""
    Draws.checked(np.ones(2**24), 4, True, 2**24)  # the limit itself draws
    with pytest.raises(ValueError, match=r"16,777,217 samples.*2\*\*24"):
        Draws.checked(np.ones(2**24 + 1), 4, True, 2**24 + 1)


@pytest.fixture(scope="module")
def one_bad(tmp_path_factory):
    """A flat folder whose first sample (ImageFolder's order) is no image."""
    root = flat_folder(tmp_path_factory.mktemp("r14-bad") / "flat", N, classes=3)
    (root / "class_0" / "s0000.png").write_bytes(b"not an image")
    return root


@pytest.mark.parametrize("replacement", [True, False])
def test_without_num_samples_an_epoch_draws_as_many_as_the_samples_left_after_skipping(one_bad, replacement):
    """num_samples's default is the source's samples, as WeightedRandomSampler's is its weights': the samples
    left once the bad ones are skipped (not the listing's, refused without replacement as too many)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.loader(
            one_bad,
            PIPELINE,
            weights=np.ones(N),
            replacement=replacement,
            on_error="skip",
            batch_size=4,
            device="cpu",
            backend="torchvision",
        )
    got = ids(loader)
    assert len(got) == N - 1 and 0 not in got
    if not replacement:
        assert sorted(got) == list(range(1, N))


def test_draws_refused_once_bad_files_are_skipped_say_so(one_bad):
    weights = np.zeros(N)
    weights[0] = 1.0  # only the bad file can be drawn
    with warnings.catch_warnings(), pytest.raises(ValueError, match=r"all 0.*1 bad file .*left out.*s0000\.png"):
        warnings.simplefilter("ignore")
        gpupipe.loader(
            one_bad, PIPELINE, weights=weights, on_error="skip", batch_size=4, device="cpu", backend="torchvision"
        )


def test_a_weighted_sampler_over_other_samples_than_the_dataset_s_is_refused_naming_it(folder):
    """torch's would draw among the first 5 samples only (or index past the dataset's end)."""
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    with pytest.raises(ValueError, match=r"sampler=.*WeightedRandomSampler.*5 weights.*22 samples"):
        gpupipe.DataLoader(dataset, batch_size=4, sampler=WeightedRandomSampler(torch.ones(5), 8), device="cpu")


def test_a_loader_over_a_weighted_loader_s_dataset_reads_it_as_it_is(folder):
    """``gpupipe.loader(weighted.dataset)`` (or a Subset of it) takes the samples, not the other loader's draws:
    every sample once, as torch's DataLoader over that dataset (not 22 draws of sample 9, from 4 samples)."""
    weights = np.zeros(N)
    weights[3] = 1.0
    weighted = gpupipe.loader(folder, PIPELINE, weights=weights, batch_size=4, device="cpu", backend="torchvision")
    assert set(ids(weighted)) == {9}
    whole = gpupipe.loader(weighted.dataset, PIPELINE, batch_size=4, device="cpu", backend="torchvision", shuffle=False)
    part = gpupipe.DataLoader(
        Subset(weighted.dataset, [0, 1, 2, 3]), batch_size=4, device="cpu", backend="torchvision", pipeline=PIPELINE
    )
    assert sorted(ids(whole)) == list(range(N)) and whole.source.draws is None
    assert ids(part) == slot_ids(folder)[:4] and len(part) == 1


def test_an_epoch_of_more_draws_than_memory_holds_is_refused_when_the_loader_is_built(folder):
    """torch.multinomial would try to allocate 8 bytes a draw at the first pass (80 GB here), or fail there."""
    with pytest.raises(ValueError, match=r"num_samples must be an int in 1\.\.1073741824, got 10000000000"):
        gpupipe.loader(
            folder, PIPELINE, weights=np.ones(N), num_samples=10**10, batch_size=4, device="cpu", backend="torchvision"
        )


class Items(torch.utils.data.Dataset):
    """A dataset gpupipe reads as it is (``fallback="torchvision"``): item ``i`` is ``(i as an image, i)``."""

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return torch.full((2,), float(index)), index


def test_weights_over_a_dataset_read_as_it_is_draw_its_items():
    weights = [0.0] * 6 + [1.0, 2.0, 3.0, 4.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.loader(Items(), weights=weights, num_samples=12, batch_size=4, seed=5, fallback="torchvision")
    assert loader.backend == "torch-dataset" and len(loader) == 3
    got = torch.cat(labels(loader)).tolist()
    assert got == multinomial(weights, 12, 5, 0)


@pytest.mark.parametrize("kind", ["weighted", "replacement"])
def test_the_swapped_loader_draws_over_a_dataset_read_as_it_is(kind):
    dataset = Items()
    generator = torch.Generator().manual_seed(9)
    sampler = (
        WeightedRandomSampler([1.0] * 5 + [0.0] * 5, 7, generator=generator)
        if kind == "weighted"
        else RandomSampler(dataset, replacement=True, num_samples=7, generator=generator)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.DataLoader(dataset, batch_size=3, sampler=sampler, fallback="torchvision")
    got = torch.cat(labels(loader)).tolist()
    assert len(got) == 7 and len(loader) == 3
    assert got == multinomial([1.0] * 5 + [0.0] * 5 if kind == "weighted" else [1.0] * 10, 7, 9, 0)


# -- two ranks: on their own, under Accelerate and under Lightning (one torchrun launch) ------------------------


@pytest.fixture(scope="module")
def two_rank_run(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("r14-ranks")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for name in (
        "LOCAL_WORLD_SIZE",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PL_GLOBAL_SEED",
    ):
        env.pop(name, None)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(HERE / "redteam_draws_worker.py"),
        str(folder),
        str(out),
        "torchvision",
        "dali-cpu",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


WORKER_WEIGHTS = [float(i % 4) for i in range(N)]  # redteam_draws_worker.WEIGHTS


def slot_ids(folder):
    """The sample id (flat_folder's colour) of each of torchvision's ImageFolder's indices."""
    dataset = torchvision.datasets.ImageFolder(str(folder))
    return [int(path.split("s")[-1][:4]) for path, _ in dataset.samples]


def check_labels(got, folder):
    """Each sample's label is ``halved`` of its class (flat_folder: sample i is in class i % 3), float64."""
    assert got["dtype"] == "torch.float64"
    assert got["labels"] == [(i % 3) / 2 for i in got["ids"]]


def test_two_ranks_split_the_draws_as_a_distributed_sampler_over_them_would(two_rank_run, folder):
    """9 draws on 2 ranks: padded from their start (even_batches), as they are (even_batches=False), or cut
    (drop_last), on every backend."""
    slots = slot_ids(folder)
    draws = [slots[k] for k in multinomial(WORKER_WEIGHTS, 9, 4, 0)]
    expected = {
        "even=True drop_last=False": (draws + draws[:1], [3, 3]),
        "even=False drop_last=False": (draws, [3, 2]),
        "even=True drop_last=True": (draws[:8], [2, 2]),
    }
    for backend in ("torchvision", "dali-cpu"):
        for case, (order, lengths) in expected.items():
            ranks = [run["draws"][f"{backend} {case}"] for run in two_rank_run]
            assert [r["ids"] for r in ranks] == [order[0::2], order[1::2]], (backend, case)
            assert [r["len"] for r in ranks] == [len(r["batches"]) for r in ranks] == lengths, (backend, case)


def test_two_ranks_keep_the_target_transform_under_a_distributed_sampler(two_rank_run, folder):
    ours, theirs = [run["distributed"] for run in two_rank_run], [run["distributed_torch"] for run in two_rank_run]
    for got in ours + theirs:
        check_labels(got, folder)
    assert sorted(ours[0]["ids"] + ours[1]["ids"]) == sorted(theirs[0]["ids"] + theirs[1]["ids"]) == list(range(N))


@pytest.mark.parametrize("framework", ["accelerate", "lightning"])
def test_a_framework_splits_a_weighted_sampler_s_draws_among_ranks_with_the_labels_mapped(
    two_rank_run, folder, framework
):
    """gpupipe.DataLoader(sampler=WeightedRandomSampler(weights, 10)): Accelerate's prepare and Lightning's ddp
    (use_distributed_sampler, which wraps torch's in a DistributedSamplerWrapper: rank r takes every 2nd draw)
    give each rank 5 of the epoch's 10 draws, the same draws on both ranks, a new draw each epoch."""
    slots = slot_ids(folder)
    runs = [run[framework] for run in two_rank_run]
    epochs = (
        [{"ids": r["ids"], "labels": r["labels"], "dtype": r["dtype"]} for r in runs]
        if framework == "accelerate"
        else [r["seen"][e] | {"dtype": "torch.float64"} for e in ("0", "1") for r in runs]
    )
    for k in range(0, len(epochs), 2):
        seed, epoch = runs[0]["seed"], k // 2
        draws = [slots[i] for i in multinomial(WORKER_WEIGHTS, 10, seed, epoch)]
        assert [epochs[k]["ids"], epochs[k + 1]["ids"]] == [draws[0::2], draws[1::2]], epoch
        for got in epochs[k : k + 2]:
            check_labels(got, folder)
    if framework == "accelerate":  # the sampler's own generator seeds the draws, as it seeds torch's sampler
        assert [r["seed"] for r in runs] == [6, 6]
    if framework == "lightning":
        assert epochs[0]["ids"] != epochs[2]["ids"]
