"""Red team of the swap, part 10: v2's ``ToDtype`` given a dtype per tensor type (the detection references'
``ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)``), compiled with torchvision's
meaning (which entry applies depends on whether the image is a ``tv_tensors.Image`` or a plain tensor there) or
refused by name; and samplers built over another object of the dataset's length (``SequentialSampler(range(n))``,
``DistributedSampler(range(n))``: torch's read only ``len()`` of it), compared with torch's own ``DataLoader``."""

import warnings

import numpy as np
import pytest
import torch
from helpers import needs_dali, textured_image, write_image
from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler
from torchvision import transforms as T1
from torchvision import tv_tensors
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe.interop.compile import UnsupportedTransform
from gpupipe.interop.dataloader import UnsupportedArgument

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
F32 = torch.float32
IMAGE_ONLY = {tv_tensors.Image: F32, "others": None}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Seven PNGs (lossless) of their own sizes in three classes."""
    base = tmp_path_factory.mktemp("swap10") / "data"
    rng = np.random.default_rng(10)
    for i in range(7):
        write_image(base / ("cat", "dog", "eel")[i % 3] / f"{i}.png", textured_image(rng, 20 + 3 * i, 26 - i))
    return str(base)


def passes(dataset, batch_size=3, **kwargs):
    """``(images, labels)`` of one pass of torch's ``DataLoader`` and of gpupipe's, over the same dataset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = list(torch.utils.data.DataLoader(dataset, batch_size=batch_size, **kwargs))
        ours = list(gpupipe.DataLoader(dataset, batch_size=batch_size, backend="torchvision", device="cpu", **kwargs))
    assert len(ours) == len(theirs)
    return [(torch.cat([x for x, _ in run]), torch.cat([y for _, y in run])) for run in (theirs, ours)]


# --- 1. ToDtype with a dtype per tensor type ---------------------------------------------------------------

LEVEL = 1 / 255 + 1e-3  # one level of 255 (PIL's resize and gpupipe's differ by up to one), in [0, 1] units
#: Steps after ``Resize``, the batch dtype torch gives, and the tolerance (one level, in the batch's units).
DICT_FORMS = {
    "image-float": ([T2.ToImage(), T2.ToDtype(IMAGE_ONLY, scale=True)], F32, LEVEL),
    "image-float-normalize": (
        [T2.ToImage(), T2.ToDtype(IMAGE_ONLY, scale=True), T2.Normalize(MEAN, STD)],
        F32,
        LEVEL / min(STD),
    ),
    "plain-tensor-passes": ([T2.PILToTensor(), T2.ToDtype(IMAGE_ONLY, scale=True)], torch.uint8, 1),
    "plain-after-pure": ([T2.ToImage(), T2.ToPureTensor(), T2.ToDtype(IMAGE_ONLY, scale=True)], torch.uint8, 1),
    "tensor-key": ([T2.PILToTensor(), T2.ToDtype({torch.Tensor: F32}, scale=True)], F32, LEVEL),
    "others-half": ([T2.ToImage(), T2.ToDtype({"others": torch.float16}, scale=True)], torch.float16, LEVEL),
    "unscaled": ([T2.ToImage(), T2.ToDtype({tv_tensors.Image: F32, "others": None})], F32, 1),
    "pil-passes": ([T2.ToDtype({"others": None}), T2.ToImage()], torch.uint8, 1),
}


@pytest.mark.parametrize("name", list(DICT_FORMS))
def test_to_dtype_per_type_gives_torchvisions_batches(root, name):
    """Before: every dict form refused ("a dtype per tensor type"). Now: the entry torchvision applies to the
    image there (its ``tv_tensors.Image`` entry after ``ToImage()``, its ``torch.Tensor`` one after
    ``PILToTensor()``, else ``"others"``; ``None``: left as it is) gives torch's dtype and values."""
    steps, dtype, tolerance = DICT_FORMS[name]
    transform = T2.Compose([T2.Resize((16, 18)), *steps])
    (theirs, their_labels), (ours, our_labels) = passes(ImageFolder(root, transform))
    assert ours.dtype == theirs.dtype == dtype
    assert ours.shape == theirs.shape == (7, 3, 16, 18)
    assert torch.equal(our_labels, their_labels)
    assert float((ours.double() - theirs.double()).abs().max()) <= tolerance
    if dtype == F32 and "unscaled" in name:
        assert float(ours.max()) > 2  # floats in [0, 255], as torchvision leaves them without scale


def test_to_dtype_per_type_refused_by_name(root):
    """What torchvision fails on (no entry for the image's type: its ``ValueError``) or what gpupipe cannot tell
    (a v1 transform between ``ToImage()`` and the dict, which may give back a plain tensor, where the two
    entries differ) is refused naming the transform and the reason, never guessed."""
    missing = T2.Compose([T2.ToImage(), T2.ToDtype({tv_tensors.Mask: torch.int64}, scale=True)])
    with pytest.raises(ValueError):  # torchvision's own failure at the first image
        next(iter(torch.utils.data.DataLoader(ImageFolder(root, missing), batch_size=2)))
    unknown = T2.Compose([T2.ToImage(), T1.RandomHorizontalFlip(), T2.ToDtype(IMAGE_ONLY, scale=True)])
    same = T2.Compose([T2.ToImage(), T1.RandomHorizontalFlip(), T2.ToDtype({"others": F32}, scale=True)])
    with pytest.raises(UnsupportedTransform) as refused:
        gpupipe.from_torchvision(missing)
    assert "Compose[1] ToDtype" in str(refused.value) and "no dtype for" in str(refused.value)
    with pytest.raises(UnsupportedTransform) as refused:
        gpupipe.from_torchvision(unknown)
    assert "Compose[2] ToDtype" in str(refused.value) and "plain tensor" in str(refused.value)
    assert gpupipe.from_torchvision(same)  # one entry for both: compiles


# --- 2. a sampler over another object of the dataset's length ------------------------------------------------


def test_sampler_over_an_object_of_the_same_length(root):
    """Before: ``SequentialSampler(range(n))``, ``DistributedSampler(range(n))`` (torch's read only its
    ``len()``) refused as "over another dataset". Now: read as over the dataset itself; a shorter one
    (``SequentialSampler(range(k))``, ``DistributedSampler(range(k))``) reads the first ``k`` samples, as torch's."""
    dataset = ImageFolder(root, T1.Compose([T1.Resize((12, 12)), T1.ToTensor()]))
    n = len(dataset)
    samplers = {
        "sequential": SequentialSampler(range(n)),
        "sequential-short": SequentialSampler(list(range(5))),
        "distributed": DistributedSampler(range(n), num_replicas=2, rank=1, shuffle=False),
        "distributed-short": DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False),
        "distributed-drop": DistributedSampler(range(5), num_replicas=2, rank=0, shuffle=False, drop_last=True),
        "copy": SequentialSampler(ImageFolder(root)),
    }
    for name, sampler in samplers.items():
        (theirs, their_labels), (ours, our_labels) = passes(dataset, sampler=sampler)
        assert torch.equal(our_labels, their_labels), name
        assert float((ours - theirs).abs().max()) <= 1 / 255 + 1e-6, name
    generator = torch.Generator().manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shuffled = gpupipe.DataLoader(dataset, batch_size=7, sampler=RandomSampler(range(n), generator=generator))
        alike = gpupipe.DataLoader(dataset, batch_size=7, shuffle=True, generator=generator, backend="torchvision")
        first, second = next(iter(shuffled))[1], next(iter(alike))[1]
    assert sorted(first.tolist()) == sorted(dataset.targets) and torch.equal(first, second)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        short = RandomSampler(range(4), generator=generator)
        drawn = torch.cat([x for x, _ in gpupipe.DataLoader(dataset, batch_size=3, sampler=short)])
        ranks = [DistributedSampler(range(5), num_replicas=2, rank=r, seed=1) for r in (0, 1)]
        shared = [torch.cat([x for x, _ in gpupipe.DataLoader(dataset, batch_size=2, sampler=d)]) for d in ranks]
    every = torch.stack([dataset[i][0] for i in range(n)])

    def which(images):  # the dataset index of each image (the nearest of torch's own)
        return [int((every - x).abs().flatten(1).amax(1).argmin()) for x in images]

    assert sorted(which(drawn)) == [0, 1, 2, 3]  # the first 4 samples, each once, as torch's
    assert [len(x) for x in shared] == [3, 3]  # 5 samples padded to 3 per rank, as torch's DistributedSampler
    assert set(which(torch.cat(shared))) == {0, 1, 2, 3, 4}


def test_sampler_over_a_longer_or_shorter_source_refused_by_name(root):
    """A sampler whose source is longer than the dataset (torch reads past its end: ``IndexError`` mid-epoch),
    or a shorter one drawn at random, is refused naming ``sampler`` and both lengths."""
    dataset = ImageFolder(root, T1.Compose([T1.Resize((12, 12)), T1.ToTensor()]))
    for sampler in (SequentialSampler(range(9)), DistributedSampler(range(9), num_replicas=1, rank=0),
                    RandomSampler(range(4), replacement=True), RandomSampler(range(4), num_samples=3)):  # fmt: skip
        with pytest.raises(UnsupportedArgument, match=r"sampler=.* (over|from) \d+ items, the dataset has 7 samples"):
            gpupipe.DataLoader(dataset, batch_size=2, sampler=sampler, backend="torchvision")


# --- 3. torchvision's image backend set to accimage -----------------------------------------------------------


def test_accimage_backend_refused_by_name(root):
    """Before: with ``torchvision.set_image_backend("accimage")`` an ``ImageFolder``'s ``default_loader`` opens
    files with accimage (torch's ``DataLoader`` fails at the first file without it installed; with it, another
    decode and resize), yet gpupipe read them as PIL does, silently. Now: refused naming the backend; an explicit
    ``pil_loader`` (which ignores the backend) still reads."""
    import torchvision
    from torchvision.datasets.folder import pil_loader

    from gpupipe.interop.datasets import UnsupportedDataset

    transform = T1.Compose([T1.Resize((12, 12)), T1.ToTensor()])
    before = torchvision.get_image_backend()
    torchvision.set_image_backend("accimage")
    try:
        with pytest.raises(UnsupportedDataset, match=r"ImageFolder\(loader='default_loader'\).*'accimage'"):
            gpupipe.DataLoader(ImageFolder(root, transform), batch_size=2, backend="torchvision")
        assert len(gpupipe.DataLoader(ImageFolder(root, transform, loader=pil_loader), batch_size=2)) == 4
    finally:
        torchvision.set_image_backend(before)
    assert len(gpupipe.DataLoader(ImageFolder(root, transform), batch_size=2, backend="torchvision")) == 4


# --- 4. a policy (or erasing) before the resize, on images of several sizes ---------------------------------

POLICY_FIRST = {
    "randaugment": T1.Compose([T1.RandAugment(), T1.RandomResizedCrop(16), T1.ToTensor()]),
    "trivial-v2": T2.Compose([T2.TrivialAugmentWide(), T2.Resize((16, 16)), T2.ToImage()]),
    "autoaugment": T1.Compose([T1.AutoAugment(), T1.CenterCrop(16), T1.ToTensor()]),
    "erasing": T1.Compose([T1.ToTensor(), T1.RandomErasing(p=1.0), T1.Resize((16, 16))]),
}


@pytest.mark.parametrize("name", list(POLICY_FIRST))
def test_policy_before_the_resize_refused_as_a_transform(root, name):
    """Before: ``Compose([RandAugment(), RandomResizedCrop(16), ...])`` over images of several sizes (torchvision
    augments each at its own size) failed with a bare ``ValueError`` naming gpupipe's ``pipeline[1]``, and
    ``fallback="torchvision"`` (which promises to run any transform as it is) failed the same way. Now: an
    ``UnsupportedTransform`` naming the transform and what to do, and the fallback gives torch's batches."""
    dataset = ImageFolder(root, POLICY_FIRST[name])
    with pytest.raises(UnsupportedTransform, match=r"needs images of one size.*\n.*fallback='torchvision'") as refused:
        gpupipe.DataLoader(dataset, batch_size=3, backend="torchvision")
    assert type(POLICY_FIRST[name].transforms[int(name == "erasing")]).__name__ in str(refused.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = list(
            gpupipe.DataLoader(dataset, batch_size=3, backend="torchvision", device="cpu", fallback="torchvision")
        )
    theirs = list(torch.utils.data.DataLoader(dataset, batch_size=3))
    assert [tuple(x.shape) for x, _ in ours] == [tuple(x.shape) for x, _ in theirs]
    assert [x.dtype for x, _ in ours] == [x.dtype for x, _ in theirs]
    assert torch.equal(torch.cat([y for _, y in ours]), torch.cat([y for _, y in theirs]))


def test_refused_after_compiling_falls_back_to_the_transform_itself(root):
    """Before: a transform refused after it compiled (a ``RandomCrop`` larger than some images, found from the
    scan) with ``fallback="torchvision"`` handed the fallback gpupipe's op list instead of the transform: every
    batch failed with ``TypeError: 'list' object is not callable``. Now: the fallback runs the user's transform,
    which raises torchvision's own ``ValueError`` for the small images, as torch's ``DataLoader`` does, and gives
    torch's batches where every image is large enough."""
    too_large = ImageFolder(root, T1.Compose([T1.RandomCrop(30), T1.ToTensor()]))
    with pytest.raises(ValueError, match="larger than input image size"):
        list(torch.utils.data.DataLoader(too_large, batch_size=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.DataLoader(too_large, batch_size=2, backend="torchvision", fallback="torchvision")
        with pytest.raises(ValueError, match="larger than input image size"):
            list(loader)


def test_an_epoch_without_a_batch_is_refused_by_name(root):
    """torch's ``DataLoader`` gives an empty epoch (a loop that trains on nothing) for fewer samples than
    ``batch_size`` with ``drop_last=True``, an empty ``Subset`` or ``sampler=[]``; gpupipe refuses each when the
    loader is built, naming the numbers (documented in docs/torchvision.md's ``drop_last`` row)."""
    dataset = ImageFolder(root, T1.Compose([T1.Resize((12, 12)), T1.ToTensor()]))
    assert len(torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)) == 0
    with pytest.raises(ValueError, match=r"batch_size 8 .* 7 samples .*drop_last=True"):
        gpupipe.DataLoader(dataset, batch_size=8, drop_last=True, backend="torchvision")
    for empty in ({"dataset": torch.utils.data.Subset(dataset, [])}, {"dataset": dataset, "sampler": []}):
        with pytest.raises(ValueError, match="holds no samples"):
            gpupipe.DataLoader(batch_size=2, backend="torchvision", **empty)


def test_policy_before_the_resize_over_images_of_one_size_compiles(tmp_path):
    """Before: ``Compose([RandAugment(), RandomResizedCrop(16), ...])`` was refused (a bare ``ValueError``) even
    over images all of one size (CIFAR's 32 x 32 PNGs), where gpupipe's policy can take them. Now: it compiles
    (the one size read from the scan) and gives torch's shapes, dtype and labels."""
    rng = np.random.default_rng(3)
    for i in range(4):
        write_image(tmp_path / ("a", "b")[i % 2] / f"{i}.png", textured_image(rng, 32, 32))
    for transform in (
        T1.Compose([T1.RandAugment(), T1.RandomResizedCrop(16), T1.ToTensor()]),
        T2.Compose([T2.ToImage(), T2.TrivialAugmentWide(), T2.Resize((16, 20))]),
    ):
        (theirs, their_labels), (ours, our_labels) = passes(ImageFolder(str(tmp_path), transform), batch_size=2)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        assert torch.equal(our_labels, their_labels)


# --- 5. a transform DALI cannot keep: backend="auto" takes torchvision, a DALI backend asked for refuses ---------


PER_CHANNEL_FILLS = {
    "RandAugment": T1.RandAugment(fill=[10, 20, 30]),
    "TrivialAugmentWide": T2.TrivialAugmentWide(fill=[10, 20, 30]),
    "RandomAffine": T1.RandomAffine(degrees=20, fill=[10, 20, 30]),
}


@needs_dali
@pytest.mark.parametrize("name", sorted(PER_CHANNEL_FILLS))
def test_a_fill_per_channel_takes_torchvision_under_auto_and_is_refused_by_a_dali_backend(root, name):
    """Before: the loader built on ``auto`` (DALI), then failed at its first batch inside DALI's graph ("in user
    code: ... ValueError: ... differs per channel"), even with ``fallback="torchvision"``; now ``auto`` takes the
    torchvision backend, which keeps the fill, with a warning naming the op, and ``backend="dali-cpu"`` refuses it
    when the loader is built."""
    transform = T1.Compose([T1.Resize((16, 16)), PER_CHANNEL_FILLS[name], T1.PILToTensor()])
    dataset = ImageFolder(root, transform)
    with pytest.warns(UserWarning, match=rf"backend='auto' chose 'torchvision'.*{name[:10]}.*differs per channel"):
        loader = gpupipe.DataLoader(dataset, batch_size=3, device="cpu")
    assert loader.backend == "torchvision"
    images, labels = (torch.cat(parts) for parts in zip(*loader))
    assert images.shape == (7, 3, 16, 16) and images.dtype == torch.uint8 and labels.tolist() == dataset.targets
    with pytest.raises(ValueError, match=r"on backend 'dali-cpu': fill=\(10.0, 20.0, 30.0\) differs per channel"):
        gpupipe.DataLoader(dataset, batch_size=3, device="cpu", backend="dali-cpu")
    one = T1.Compose([T1.Resize((16, 16)), type(PER_CHANNEL_FILLS[name])(**_one_fill(name)), T1.PILToTensor()])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # one value: DALI keeps it, auto stays on DALI
        assert gpupipe.DataLoader(ImageFolder(root, one), batch_size=3, device="cpu").backend == "dali-cpu"


def _one_fill(name):
    return {"degrees": 20, "fill": 10} if name == "RandomAffine" else {"fill": 10}
