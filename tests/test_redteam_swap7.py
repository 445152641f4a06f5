"""Red team of the swap, part 7: a ``ConcatDataset`` whose parts each got their own transform object, equal in
every parameter (``ImageFolder(a, make_tf())``, ``ImageFolder(b, make_tf())``: the usual way), compared with
torch's own ``DataLoader`` over the same dataset: the same labels, shapes and values; parts that differ in any
op or parameter (or target value) refused naming the first difference; every part's transform watched."""

import warnings

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, DECODE_TOLERANCE, textured_image, write_image
from torch.utils.data import ConcatDataset, Subset
from torchvision import transforms as T1
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe.interop.datasets import UnsupportedDataset

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """Two folders of PNGs (lossless) with the same two classes, every image of its own size."""
    base = tmp_path_factory.mktemp("swap7")
    rng = np.random.default_rng(7)
    sizes = iter([(41, 57), (60, 44), (48, 48), (75, 52), (43, 70), (66, 61), (52, 40), (58, 63), (45, 50)])
    for folder, count in (("a", 5), ("b", 4)):
        for i in range(count):
            write_image(base / folder / ("cat" if i % 2 else "dog") / f"{i}.png", textured_image(rng, *next(sizes)))
    return str(base / "a"), str(base / "b")


def eval_tf(size=32, mean=MEAN):
    """The deterministic recipe, built anew at each call (as a script's ``make_tf()`` builds it)."""
    return T1.Compose([T1.Resize(size), T1.CenterCrop(28), T1.ToTensor(), T1.Normalize(mean, STD)])


def eval_tf_v2():
    return T2.Compose(
        [T2.ToImage(), T2.Resize(32), T2.CenterCrop(28), T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)]
    )


def train_tf():
    return T1.Compose([T1.RandomResizedCrop(24), T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)])


def epoch(loader):
    """``(images, labels)`` of one pass (torch's or gpupipe's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(loader)
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def swapped(dataset, backend="torchvision", **kwargs):
    return gpupipe.DataLoader(dataset, batch_size=4, backend=backend, device="cpu", **kwargs)


def levels(a, b):
    """The largest and the mean difference of two normalised batches, in uint8 levels."""
    diff = (a - b).abs() * 255 * torch.tensor(STD).view(1, 3, 1, 1)
    return float(diff.max()), float(diff.mean())


def layouts(a, b, make):
    """The same parts (each its own transform) in a ``ConcatDataset``, a ``Subset`` of it, and nested."""
    both = ConcatDataset([ImageFolder(a, make()), ImageFolder(b, make())])
    nested = ConcatDataset(
        [
            Subset(ImageFolder(b, make()), [3, 0]),
            ConcatDataset([ImageFolder(a, make()), Subset(ImageFolder(b, make()), [1])]),
        ]
    )
    return {"concat": both, "subset": Subset(both, [8, 0, 5, 3, 2]), "nested": nested}


@pytest.mark.parametrize("make", [eval_tf, eval_tf_v2], ids=["v1", "v2"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_parts_with_equal_transforms_built_apart_give_torchs_batches(roots, make, backend):
    for name, dataset in layouts(*roots, make).items():
        loader = swapped(dataset, backend)
        images, labels = epoch(loader)
        expected, their_labels = epoch(torch.utils.data.DataLoader(dataset, batch_size=4))
        assert labels.tolist() == their_labels.tolist(), name
        assert images.shape == expected.shape == (len(dataset), 3, 28, 28), name
        most, mean = levels(images, expected)  # a resize's rounding: one level at most, as for one ImageFolder
        assert most <= 1.01 and mean <= DECODE_TOLERANCE["cpu"], name
        assert epoch(loader)[1].tolist() == their_labels.tolist()  # a second pass: nothing changed, nothing refused


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_parts_with_equal_random_transforms_give_torchs_shapes_and_labels(roots, backend):
    for name, dataset in layouts(*roots, train_tf).items():
        images, labels = epoch(swapped(dataset, backend))
        expected, their_labels = epoch(torch.utils.data.DataLoader(dataset, batch_size=4))
        assert labels.tolist() == their_labels.tolist() and images.shape == expected.shape, name


#: name -> (the second part's transform, what the refusal names): one op or parameter other than ``eval_tf()``'s.
DIFFERENT = {
    "a Resize size": (lambda: eval_tf(size=36), r"op 1 Resize has size=36, datasets\[0\]'s size=32"),
    "a Normalize mean": (
        lambda: eval_tf(mean=(0.5, 0.5, 0.5)),
        r"op 3 Normalize has mean=\(0.5, 0.5, 0.5\), datasets\[0\]'s mean=\(0.485, 0.456, 0.406\)",
    ),
    "a flip added": (
        lambda: T1.Compose(
            [T1.Resize(32), T1.CenterCrop(28), T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)]
        ),
        r"op 3 is HorizontalFlip\(p=0.5\), datasets\[0\]'s Normalize",
    ),
    "no transform": (lambda: None, r"\(None, datasets\[0\] Compose"),
    "one gpupipe cannot compile": (
        lambda: T1.Compose([T1.Resize(32), T1.CenterCrop(28), T1.Lambda(lambda x: x), T1.ToTensor()]),
        r"gpupipe cannot compile its to compare the two:\n.*Lambda",
    ),
}


@pytest.mark.parametrize("name", list(DIFFERENT))
def test_parts_whose_transforms_differ_are_refused_naming_the_first_difference(roots, name):
    make, named = DIFFERENT[name]
    a, b = roots
    for dataset, where in (
        (ConcatDataset([ImageFolder(a, eval_tf()), ImageFolder(b, make())]), r"datasets\[1\]"),
        (
            Subset(
                ConcatDataset(
                    [ImageFolder(a, eval_tf()), ConcatDataset([ImageFolder(b, eval_tf()), ImageFolder(a, make())])]
                ),
                [0],
            ),
            r"datasets\[1\]\.datasets\[1\]",
        ),
    ):
        with pytest.raises(
            UnsupportedDataset, match=rf"ConcatDataset: {where} has another transform than (?s:.*){named}"
        ):
            swapped(dataset)
    if name in ("a Resize size", "a flip added"):  # several sizes or random: torch's own batches are compared elsewhere
        return
    dataset = ConcatDataset([ImageFolder(a, eval_tf()), ImageFolder(b, make())])
    with pytest.warns(UserWarning, match="fallback='torchvision' reads"):  # as it is: each part's own transform
        loader = swapped(dataset, fallback="torchvision")
    if name != "no transform":  # PIL images: torch's default collate fails on them, as does the fallback
        ours, theirs = epoch(loader), epoch(torch.utils.data.DataLoader(dataset, batch_size=4))
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


@pytest.mark.parametrize("layout", ["concat", "subset", "nested"])
def test_every_parts_transform_edited_in_place_is_refused_at_the_next_pass(roots, layout):
    dataset = layouts(*roots, eval_tf)[layout]
    folders = [d for d in _folders(dataset)]
    assert len({id(f.transform) for f in folders}) == len(folders) >= 2
    loader = swapped(dataset)
    epoch(loader)
    folders[-1].transform.transforms[0].size = 24  # the last part only: torch would resize its images to 24
    with pytest.raises(gpupipe.UnsupportedTransform, match="changed after the loader was built") as refused:
        epoch(loader)
    assert "ImageFolder.transform Compose" in str(refused.value) and "Resize(size=24" in str(refused.value)
    assert "ConcatDataset.datasets[1]" in str(refused.value)
    folders[-1].transform.transforms[0].size = 32  # back as it was: equal ops again, read
    assert epoch(loader)[1].tolist() == epoch(torch.utils.data.DataLoader(dataset, batch_size=4))[1].tolist()
    folders[-1].transform = eval_tf()  # replaced (even by an equal one): refused as for one folder
    with pytest.raises(UnsupportedDataset, match="ImageFolder.transform changed after the loader was built"):
        epoch(loader)


def _folders(dataset):
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    if isinstance(dataset, ConcatDataset):
        return [f for part in dataset.datasets for f in _folders(part)]
    return [dataset]


class Shift:
    """A target transform with a setting of its own (a label offset), as a curriculum edits it."""

    def __init__(self, by):
        self.by = by

    def __call__(self, y):
        return y + self.by


def test_target_transforms_giving_equal_values_are_accepted_and_each_watched(roots):
    a, b = roots
    dataset = ConcatDataset(
        [
            ImageFolder(a, eval_tf(), target_transform=Shift(10)),
            Subset(ImageFolder(b, eval_tf(), target_transform=lambda y: y + 10), [2, 1, 0]),
        ]
    )
    loader = swapped(dataset)
    labels, theirs = epoch(loader)[1], epoch(torch.utils.data.DataLoader(dataset, batch_size=4))[1]
    assert labels.tolist() == theirs.tolist() and labels.dtype == theirs.dtype and labels.min() >= 10
    twin = ConcatDataset(
        [ImageFolder(a, eval_tf(), target_transform=Shift(1)), ImageFolder(b, eval_tf(), target_transform=Shift(1))]
    )
    loader = swapped(twin)
    twin.datasets[0].target_transform.by = twin.datasets[1].target_transform.by = 3  # both alike: followed
    assert epoch(loader)[1].tolist() == epoch(torch.utils.data.DataLoader(twin, batch_size=4))[1].tolist()
    twin.datasets[1].target_transform.by = 5  # the second part alone: its labels would differ from the first's
    with pytest.raises(
        UnsupportedDataset,
        match=r"datasets\[1\] ImageFolder.target_transform changed after the "
        r"loader was built \(.*Shift.* gives class 0 5, datasets\[0\]'s .*Shift.* 3\)",
    ):
        epoch(loader)


@pytest.mark.parametrize(
    "first, second, named",
    [
        (Shift(1), Shift(2), r"Shift.* gives class 0 2, datasets\[0\]'s .*Shift.* 1"),
        (
            Shift(1),
            lambda y: float(y + 1),
            r"gives \(\) torch.float64 values, datasets\[0\]'s .*Shift.* \(\) torch.int64",
        ),
        (None, Shift(0), r"Shift.*, datasets\[0\] None"),
    ],
)
def test_target_transforms_giving_other_values_are_refused_naming_the_class(roots, first, second, named):
    a, b = roots
    dataset = ConcatDataset(
        [ImageFolder(a, eval_tf(), target_transform=first), ImageFolder(b, eval_tf(), target_transform=second)]
    )
    with pytest.raises(
        UnsupportedDataset, match=rf"datasets\[1\] has another target_transform than datasets\[0\] \(.*{named}"
    ):
        swapped(dataset)
