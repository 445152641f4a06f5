"""A torchvision folder dataset's ``target_transform``, kept: gpupipe applies it to each batch's class
indices (worked out once per class), so the swapped loader's labels are those torch's ``DataLoader`` gives,
in value, dtype and shape; what cannot be worked out per class is refused by name (or read as it is with
``fallback="torchvision"``)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import ConcatDataset, Subset
from torchvision import transforms as T

import gpupipe
from gpupipe.interop.datasets import UnsupportedDataset
from helpers import flat_folder

SMALL = T.Compose([T.CenterCrop(8), T.PILToTensor()])
MERGE = {0: 0, 1: 0, 2: 1}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("tt") / "flat", 22, classes=3)


TRANSFORMS = {
    "shifted int": lambda y: y + 10,
    "merged classes (dict lookup)": MERGE.__getitem__,
    "float tensor": lambda y: torch.tensor(y, dtype=torch.float32),
    "python float": float,
    "one-hot": lambda y: F.one_hot(torch.tensor(y), 3).float(),
    "numpy float32": np.float32,
}


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_the_labels_are_torchs_after_the_target_transform(folder, backend, name):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=TRANSFORMS[name])
    ours = gpupipe.DataLoader(dataset, batch_size=5, device="cpu", backend=backend)
    theirs = torch.utils.data.DataLoader(dataset, batch_size=5)
    count = 0
    for (_, mine), (_, expected) in zip(ours, theirs, strict=True):
        assert mine.dtype == expected.dtype and mine.shape == expected.shape, (mine, expected)
        assert torch.equal(mine, expected), (mine, expected)
        count += 1
    assert count == 5


def test_a_subset_and_a_concat_of_parts_sharing_the_target_transform(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=MERGE.__getitem__)
    both = ConcatDataset([Subset(dataset, [3, 9, 15, 21]), dataset])
    ours = torch.cat([y for _, y in gpupipe.DataLoader(both, batch_size=6, device="cpu", backend="torchvision")])
    theirs = torch.cat([y for _, y in torch.utils.data.DataLoader(both, batch_size=6)])
    assert ours.tolist() == theirs.tolist() and len(ours) == 26


def test_shuffled_and_under_mixup_the_labels_follow_their_images(folder):
    """Shuffled: each image keeps its own mapped label (the flat folder's colours give each image's id)."""
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=lambda y: 100 + y)
    loader = gpupipe.DataLoader(dataset, batch_size=4, shuffle=True, device="cpu", backend="torchvision")
    from helpers import sample_ids

    label_of = {int(path.split("s")[-1][:4]): 100 + label for path, label in dataset.samples}
    seen = [(i, int(y)) for images, labels in loader for i, y in zip(sample_ids(images), labels)]
    assert len(seen) == 22 and all(label_of[i] == y for i, y in seen)
    ops = gpupipe.from_torchvision(T.Compose([T.CenterCrop(8), T.ToTensor()]))
    ops = [op for op in ops if not isinstance(op, gpupipe.ops.Output)] + [gpupipe.ops.MixUp(alpha=0.2)]
    with pytest.raises(ValueError, match=r"target_transform and MixUp"):
        gpupipe.loader(dataset, ops, batch_size=4, device="cpu", backend="torchvision")


@pytest.mark.parametrize(
    "target_transform, named",
    [
        (lambda y: y + int(np.random.default_rng().integers(0, 1000)), "not the same"),
        (lambda y: f"class-{y}", "str"),
        (lambda y: (y, y), "tuple|list"),
        (lambda y: 1 // (y - 1), "ZeroDivisionError"),
    ],
)
def test_a_target_transform_gpupipe_cannot_work_out_per_class_is_refused_or_read_as_it_is(
    folder, target_transform, named
):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=target_transform)
    with pytest.raises(UnsupportedDataset, match=rf"target_transform.*({named})"):
        gpupipe.DataLoader(dataset, batch_size=4, device="cpu")
    if named == "ZeroDivisionError":  # torch's DataLoader fails on class 1 too
        return
    with pytest.warns(UserWarning, match="fallback='torchvision' reads"):
        loader = gpupipe.DataLoader(dataset, batch_size=4, device="cpu", fallback="torchvision")
    assert loader.backend == "torch-dataset"


def test_parts_with_other_target_transforms_are_refused_naming_the_part(folder):
    a = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=lambda y: y + 1)
    b = torchvision.datasets.ImageFolder(str(folder), SMALL)
    with pytest.raises(UnsupportedDataset, match=r"datasets\[1\] has another target_transform"):
        gpupipe.DataLoader(ConcatDataset([a, b]), batch_size=4, device="cpu")


def test_a_target_transform_replaced_after_the_loader_was_built_is_refused(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=lambda y: y + 1)
    loader = gpupipe.DataLoader(dataset, batch_size=4, device="cpu", backend="torchvision")
    assert next(iter(loader))[1].min() >= 1
    dataset.target_transform = None
    with pytest.raises(UnsupportedDataset, match="target_transform changed"):
        next(iter(loader))
