"""Red team of the swap, part 4: training scripts ported as they are written (torchvision's references, Kaggle
notebooks, progressive-resizing and curriculum schedules), each compared with torch's own ``DataLoader`` on
the same tiny images: the same batches (values, dtypes, labels, order), or a refusal naming the transform or
argument; never a silent difference."""

import warnings

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, textured_image, write_image
from torch.utils.data import Subset
from torchvision import transforms as T1
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe.interop.dataloader import UnsupportedArgument
from gpupipe.interop.datasets import UnsupportedDataset

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
F32 = torch.float32
#: Image sizes (h, w): no two alike.
SIZES = [(41, 57), (60, 44), (48, 48), (75, 52), (43, 70), (66, 61), (52, 40)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Seven PNGs (lossless: PIL and gpupipe decode the same pixels) in two classes."""
    base = tmp_path_factory.mktemp("swap4")
    rng = np.random.default_rng(11)
    for i, (h, w) in enumerate(SIZES):
        write_image(base / "data" / ("cat" if i % 3 else "dog") / f"{i}.png", textured_image(rng, h, w))
    return str(base / "data")


def theirs(dataset, **kwargs):
    """``(images, labels)`` of one epoch from torch's own ``DataLoader``."""
    batches = list(torch.utils.data.DataLoader(dataset, **kwargs))
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def ours(loader):
    """``(images, labels)`` of one pass of a gpupipe loader."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's own deprecation of v2's ToTensor
        batches = list(loader)
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def swapped(dataset, backend="torchvision", **kwargs):
    return gpupipe.DataLoader(dataset, backend=backend, device="cpu", **kwargs)


def levels(a, b, std=None):
    """The largest absolute difference of two float batches, in uint8 levels (normalised by ``std``)."""
    scale = 255 * (torch.tensor(std).view(1, 3, 1, 1) if std is not None else 1)
    return float(((a.float() - b.float()).abs() * scale).max())


# -- a transform changed in place after the loader was built --------------------------------------------------

#: name -> (transform, change made in place between epochs): what schedules in training scripts do.
CHANGED = {
    "progressive resizing (Resize.size)": (
        lambda: T1.Compose([T1.Resize((24, 24)), T1.RandomHorizontalFlip(0.0), T1.ToTensor()]),
        lambda t: setattr(t.transforms[0], "size", (32, 32)),
    ),
    "a flip turned on (RandomHorizontalFlip.p)": (
        lambda: T2.Compose(
            [T2.ToImage(), T2.Resize((24, 24)), T2.RandomHorizontalFlip(0.0), T2.ToDtype(F32, scale=True)]
        ),
        lambda t: setattr(t.transforms[2], "p", 1.0),
    ),
    "a Normalize appended to the Compose": (
        lambda: T1.Compose([T1.Resize((24, 24)), T1.ToTensor()]),
        lambda t: t.transforms.append(T1.Normalize(MEAN, STD)),
    ),
    "a RandAugment magnitude schedule": (
        lambda: T1.Compose([T1.Resize((24, 24)), T1.RandAugment(2, 0), T1.ToTensor()]),
        lambda t: setattr(t.transforms[1], "magnitude", 9),
    ),
}


@pytest.mark.parametrize("name", list(CHANGED))
def test_a_transform_changed_in_place_is_refused_at_the_next_pass_not_ignored(root, name):
    """torch's ``DataLoader`` applies the transform as it is at each pass; gpupipe compiled it once. A schedule
    that edits it in place (progressive resizing) must not go on training on the old transform silently."""
    make, change = CHANGED[name]
    transform = make()
    dataset = ImageFolder(root, transform)
    loader = swapped(dataset, batch_size=4)
    images, labels = ours(loader)
    assert labels.tolist() == dataset.targets and images.shape[-2:] == (24, 24)
    ours(loader)  # unchanged: a second pass reads as the first
    change(transform)
    with pytest.raises(gpupipe.UnsupportedTransform, match="changed after the loader was built") as refused:
        ours(loader)
    assert "build the loader again" in str(refused.value)
    rebuilt = swapped(dataset, batch_size=4)  # as the message says: the new transform, compiled
    assert ours(rebuilt)[0].shape == theirs(dataset, batch_size=4)[0].shape


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_transform_given_as_the_pipeline_and_changed_in_place_is_refused_too(root, backend):
    transform = T1.Compose([T1.Resize((24, 24)), T1.ToTensor()])
    loader = gpupipe.loader(root, transform, batch_size=4, backend=backend, device="cpu")
    assert ours(loader)[0].shape[-2:] == (24, 24)
    transform.transforms[0].size = (16, 16)
    with pytest.raises(gpupipe.UnsupportedTransform, match="changed after the loader was built") as refused:
        ours(loader)
    assert "pipeline Compose" in str(refused.value) and "Resize(size=(16, 16)" in str(refused.value)


def test_a_transform_run_as_it_is_follows_its_change_as_torch_does(root):
    """With ``fallback='torchvision'`` the transform object itself runs at each pass: a change is followed."""
    transform = T1.Compose([T1.Resize((24, 24)), T1.Lambda(lambda x: x), T1.ToTensor()])
    dataset = ImageFolder(root, transform)
    with pytest.warns(UserWarning, match="Lambda"):
        loader = swapped(dataset, batch_size=4, fallback="torchvision")
    assert ours(loader)[0].shape[-2:] == (24, 24)
    transform.transforms[0].size = (32, 32)
    images, labels = ours(loader)
    expected, their_labels = theirs(dataset, batch_size=4)
    assert images.shape == expected.shape and torch.equal(images, expected) and torch.equal(labels, their_labels)


def test_loaders_sharing_a_source_keep_their_own_transform_checks(root):
    """A second loader built over the first's ``dataset`` with another transform does not take over the first's
    check (nor drop it)."""
    first_transform = T1.Compose([T1.Resize((24, 24)), T1.ToTensor()])
    first = gpupipe.loader(root, first_transform, batch_size=4, backend="torchvision", device="cpu")
    second = gpupipe.loader(
        first.dataset,
        T1.Compose([T1.Resize((16, 16)), T1.ToTensor()]),
        batch_size=4,
        backend="torchvision",
        device="cpu",
    )
    first_transform.transforms[0].size = (20, 20)
    assert ours(second)[0].shape[-2:] == (16, 16)
    with pytest.raises(gpupipe.UnsupportedTransform, match="changed after the loader was built"):
        ours(first)


#: name -> (dataset over the ImageFolder, edit in place, what the refusal names): same object, same length.
EDITED = {
    "a pseudo-label written into samples": (
        lambda folder: folder,
        lambda folder, data: folder.samples.__setitem__(0, (folder.samples[0][0], 1)),
        "ImageFolder.samples",
    ),
    "a Subset's array indices shuffled in place": (
        lambda folder: Subset(folder, np.arange(6)),
        lambda folder, data: data.indices.__setitem__(slice(None), data.indices[::-1]),
        "Subset.indices",
    ),
    "a Subset's list indices edited in place": (
        lambda folder: Subset(folder, [0, 1, 2]),
        lambda folder, data: data.indices.__setitem__(0, 6),
        "Subset.indices",
    ),
}


@pytest.mark.parametrize("name", list(EDITED))
def test_samples_or_indices_edited_in_place_are_refused_at_the_next_pass_not_ignored(root, name):
    """A semi-supervised loop writes its pseudo-labels into ``samples``; torch's ``DataLoader`` reads them at the
    next pass. gpupipe read them once: same object and length, another content, must not pass silently."""
    make, edit, named = EDITED[name]
    folder = ImageFolder(root, T1.Compose([T1.Resize((24, 24)), T1.ToTensor()]))
    data = make(folder)
    loader = swapped(data, batch_size=4)
    images, labels = ours(loader)
    assert torch.equal(labels, theirs(data, batch_size=4)[1])
    before = theirs(data, batch_size=4)
    edit(folder, data)
    after = theirs(data, batch_size=4)
    assert not (torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]))  # torch reads the edit
    with pytest.raises(UnsupportedDataset, match=rf"{named} changed after the loader was built"):
        ours(loader)
    images, labels = ours(swapped(data, batch_size=4))  # built again: the edit, as torch reads it
    assert torch.equal(labels, after[1]) and levels(images, after[0]) <= 1.5


# -- Normalize's mean and std as torchvision takes them -------------------------------------------------------

NORMALIZE = {
    "Normalize(0.5, 0.5)": T1.Normalize(0.5, 0.5),
    "mean and std as (3, 1, 1) tensors": T1.Normalize(
        torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    ),
    "mean and std as (3, 1, 1) arrays": T1.Normalize(np.array(MEAN).reshape(3, 1, 1), np.array(STD).reshape(3, 1, 1)),
    "v2 with 0-d tensors": T2.Normalize([torch.tensor(m) for m in MEAN], [torch.tensor(s) for s in STD]),
    "mean and std as (1,) tensors": T1.Normalize(torch.tensor([0.5]), torch.tensor([0.25])),
}


@pytest.mark.parametrize("name", list(NORMALIZE))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_normalize_with_a_scalar_or_channel_shaped_mean_gives_torchs_batches(root, name, backend):
    normalize = NORMALIZE[name]
    dataset = ImageFolder(root, T1.Compose([T1.Resize((32, 32)), T1.ToTensor(), normalize]))
    expected, their_labels = theirs(dataset, batch_size=4)
    images, labels = ours(swapped(dataset, backend, batch_size=4))
    assert images.shape == expected.shape and images.dtype == expected.dtype
    assert torch.equal(labels, their_labels)
    std = torch.as_tensor(np.asarray(normalize.std, dtype=np.float64).reshape(-1)).expand(3).tolist()
    assert levels(images, expected, std) <= 1.5


def test_a_per_pixel_normalize_is_refused_by_name_not_a_type_error(root):
    per_pixel = torch.full((3, 32, 32), 0.5)
    dataset = ImageFolder(root, T1.Compose([T1.Resize((32, 32)), T1.ToTensor(), T1.Normalize(per_pixel, per_pixel)]))
    with pytest.raises(gpupipe.UnsupportedTransform, match=r"Compose\[2\] Normalize: .*\(3, 32, 32\).*per channel"):
        swapped(dataset, batch_size=4)


# -- antialias=None on a tensor --------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [T1, T2], ids=["v1", "v2"])
@pytest.mark.parametrize(
    "make",
    [lambda T, a: T.Resize((16, 16), antialias=a), lambda T, a: T.RandomResizedCrop(16, antialias=a)],
    ids=["Resize", "RandomResizedCrop"],
)
def test_antialias_none_on_a_tensor_is_refused_as_false_is(T, make):
    """torchvision reads ``antialias=None`` as ``False`` on a tensor (a plain bilinear downscale, aliased); gpupipe
    always antialiases, so it must refuse ``None`` as it refuses ``False``, not compile it as ``True``."""
    image = torch.rand(3, 64, 64)
    assert torch.equal(T.Resize((16, 16), antialias=None)(image), T.Resize((16, 16), antialias=False)(image))
    on_tensor = T1.Compose([T1.ToTensor(), make(T, None)])
    with pytest.raises(gpupipe.UnsupportedTransform, match=r"Compose\[1\] \w+: antialias=None on a tensor"):
        gpupipe.from_torchvision(on_tensor)
    on_pil = T1.Compose([make(T, None), T1.ToTensor()])  # PIL always antialiases: the argument does nothing there
    assert len(gpupipe.from_torchvision(on_pil)) == 2


# -- v2's RGB -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_v2_rgb_compiles_to_the_rgb_images_gpupipe_decodes(root, backend):
    """``ImageFolder`` gives RGB images (its PIL loader converts every file), and so does gpupipe's decode:
    ``v2.RGB()``, written for datasets of mixed modes, changes nothing."""
    dataset = ImageFolder(root, T2.Compose([T2.RGB(), T2.ToImage(), T2.Resize((32, 32)), T2.ToDtype(F32, scale=True)]))
    assert (
        gpupipe.from_torchvision(dataset.transform)[1:]
        == gpupipe.from_torchvision(T2.Compose([T2.ToImage(), T2.Resize((32, 32)), T2.ToDtype(F32, scale=True)]))[1:]
    )
    expected, their_labels = theirs(dataset, batch_size=4)
    images, labels = ours(swapped(dataset, backend, batch_size=4))
    assert images.shape == expected.shape and torch.equal(labels, their_labels)
    assert levels(images, expected) <= 1.5


# -- a sampler given as a list of indices ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "indices",
    [[5, 0, 3, 3, 6], range(6, 0, -2), np.array([2, 4, 1]), torch.tensor([1, 6, 0])],
    ids=["list", "range", "array", "tensor"],
)
def test_a_sampler_given_as_indices_reads_them_as_torch_does(root, indices):
    """torch's ``DataLoader`` takes any iterable of indices as its sampler (``sampler=val_idx``) and reads them in
    that order at every pass; gpupipe reads them so too (it refused them before: tests/test_redteam_swap5.py), as
    the same ``Subset`` does."""
    dataset = ImageFolder(root, T1.Compose([T1.Resize((32, 32)), T1.ToTensor()]))
    expected, their_labels = theirs(dataset, batch_size=2, sampler=indices)
    for given in (swapped(dataset, batch_size=2, sampler=indices), swapped(Subset(dataset, indices), batch_size=2)):
        images, labels = ours(given)
        assert torch.equal(labels, their_labels) and levels(images, expected) <= 1.5


def test_a_sampler_object_of_the_users_own_is_not_offered_a_subset(root):
    class EveryOther(torch.utils.data.Sampler):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(0, self.n, 2))

        def __len__(self):
            return (self.n + 1) // 2

    dataset = ImageFolder(root, T1.Compose([T1.Resize((32, 32)), T1.ToTensor()]))
    with pytest.raises(UnsupportedArgument, match=r"DataLoader\(sampler=") as refused:
        swapped(dataset, batch_size=2, sampler=EveryOther(len(dataset)))
    assert "Subset" not in str(refused.value).split("SubsetRandomSampler")[-1]


# -- a transform of the user's own: multi-view (SimCLR, MoCo, SupCon, DINO), a plain function --------------------


class TwoCropTransform:
    """SupCon's / SimCLR's wrapper: two random views of each image, a list."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, image):
        return [self.transform(image), self.transform(image)]


class MultiCrop:
    """DINO's multi-crop: two global views and three smaller local ones."""

    def __init__(self):
        self.glob = T1.Compose([T1.RandomResizedCrop(24, scale=(0.4, 1.0)), T1.ToTensor()])
        self.local = T1.Compose([T1.RandomResizedCrop(12, scale=(0.05, 0.4)), T1.ToTensor()])

    def __call__(self, image):
        return [self.glob(image), self.glob(image)] + [self.local(image) for _ in range(3)]


OWN = {
    "TwoCropTransform": lambda: TwoCropTransform(T1.Compose([T1.RandomResizedCrop(16), T1.ToTensor()])),
    "DINO multi-crop": MultiCrop,
    "a function": lambda: lambda image: T1.functional.to_tensor(image.resize((16, 16))),
}


@pytest.mark.parametrize("name", list(OWN))
def test_a_transform_of_the_users_own_is_refused_by_name_saying_how_to_run_it(root, name):
    """Not a complaint about a ``pipeline=`` the script never passed: the dataset's transform, named, and the
    fallback that runs it."""
    transform = OWN[name]()
    dataset = ImageFolder(root, transform)
    with pytest.raises(gpupipe.UnsupportedTransform, match="not a torchvision or timm transform") as refused:
        swapped(dataset, batch_size=4)
    kind = type(transform).__name__
    assert f"\n  {kind}: not a torchvision" in str(refused.value) and "fallback='torchvision'" in str(refused.value)


@pytest.mark.parametrize("name", list(OWN))
@pytest.mark.parametrize(
    "target_transform",
    [None, lambda y: torch.nn.functional.one_hot(torch.tensor(y), 2).float()],
    ids=["labels", "one-hot"],
)
def test_a_multi_view_transform_run_as_it_is_gives_torchs_batches(root, name, target_transform):
    """With ``fallback='torchvision'``, a transform that gives several views gives what torch's ``DataLoader``
    gives: a list of view batches, with the labels (after the ``target_transform``); the same views with the same
    generator."""
    transform = OWN[name]()
    dataset = ImageFolder(root, transform, target_transform=target_transform)
    torch.manual_seed(0)
    expected = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    with pytest.warns(UserWarning, match=type(transform).__name__):
        loader = swapped(dataset, batch_size=4, fallback="torchvision", generator=torch.Generator().manual_seed(3))
    got = list(loader)
    assert len(got) == len(expected) == 2
    for (views, labels), (their_views, their_labels) in zip(got, expected):
        assert type(views) is type(their_views) and torch.equal(labels, their_labels)
        assert labels.dtype == their_labels.dtype
        if isinstance(views, torch.Tensor):
            assert views.shape == their_views.shape
            continue
        assert [v.shape for v in views] == [v.shape for v in their_views]
        assert all(v.dtype == torch.float32 and 0 <= v.min() and v.max() <= 1 for v in views)
    again = list(swapped(dataset, batch_size=4, fallback="torchvision", generator=torch.Generator().manual_seed(3)))
    for (views, _), (same, _) in zip(got, again):
        flat = views if isinstance(views, list) else [views]
        assert all(torch.equal(a, b) for a, b in zip(flat, same if isinstance(same, list) else [same]))
