"""Red team of the swap, part 12: CIFAR's training transform, ``RandomCrop(32, padding=4)`` (then a flip,
``ToTensor()``, ``Normalize()``) over a folder of 32 x 32 PNGs, which torchvision pads with black on every side
before drawing a window uniformly: compiled as a centred ``CenterCrop`` to the padded size, then ``RandomCrop``,
where the size reaching it is known (fixed by the ops before it, or the one size of every image). What a centred
pad cannot give is still refused by name; with ``fallback="torchvision"`` it runs as it is."""

import warnings

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, textured_image, write_image
from torchvision import transforms as T1
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe import ops as O
from gpupipe.interop.compile import UnsupportedTransform, from_torchvision

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)
F32 = torch.float32
COUNT = 16


def _folder(base, sizes):
    rng = np.random.default_rng(12)
    for i, (height, width) in enumerate(sizes):
        image = np.maximum(textured_image(rng, height, width), 1)  # no black pixel: a black one is padding
        write_image(base / ("airplane", "cat", "ship")[i % 3] / f"{i}.png", image)
    return str(base)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """CIFAR exported to an ImageFolder: 16 lossless 32 x 32 PNGs in three classes, none with a black pixel."""
    return _folder(tmp_path_factory.mktemp("swap12") / "cifar", [(32, 32)] * COUNT)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Images of two sizes (32 x 32 and 36 x 30): the size a pad starts from is not one."""
    return _folder(tmp_path_factory.mktemp("swap12") / "mixed", [(32, 32), (36, 30)] * 3)


def ours(dataset, backend, batch_size=COUNT, epochs=1, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.DataLoader(dataset, batch_size=batch_size, device="cpu", backend=backend, **kwargs)
        batches = []
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            batches += list(loader)
        return batches


def theirs(dataset, batch_size=COUNT):
    return list(torch.utils.data.DataLoader(dataset, batch_size=batch_size))


CIFAR = {
    "v1": lambda: T1.Compose(
        [T1.RandomCrop(32, padding=4), T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)]
    ),
    "v2": lambda: T2.Compose(
        [
            T2.ToImage(),
            T2.RandomCrop(32, padding=4),
            T2.RandomHorizontalFlip(),
            T2.ToDtype(F32, scale=True),
            T2.Normalize(MEAN, STD),
        ]
    ),
}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("version", list(CIFAR))
def test_cifars_padded_random_crop_compiles_over_32_pixel_pngs(cifar, version, backend):
    """Before: refused (``padding=4: gpupipe's RandomCrop does not pad around the image``). Now: batches of torch's
    shape, dtype, labels and value range."""
    dataset = ImageFolder(cifar, CIFAR[version]())
    ((images, labels),) = ours(dataset, backend, generator=torch.Generator().manual_seed(3))
    ((their_images, their_labels),) = theirs(dataset)
    assert images.shape == their_images.shape == (COUNT, 3, 32, 32) and images.dtype == their_images.dtype == F32
    assert sorted(labels.tolist()) == sorted(their_labels.tolist())
    low, high = (0 - max(MEAN)) / min(STD), (1 - min(MEAN)) / min(STD)
    assert low - 1e-4 <= float(images.min()) and float(images.max()) <= high + 1e-4


def _offsets(image, padded):
    """The ``(top, left)`` windows of ``padded`` ``(3, H, W)`` equal to ``image`` ``(3, h, w)``."""
    h, w = image.shape[1:]
    return [
        (i, j)
        for i in range(padded.shape[1] - h + 1)
        for j in range(padded.shape[2] - w + 1)
        if torch.equal(padded[:, i : i + h, j : j + w], image)
    ]


DRAWN = {  # (crop, black pixels on each side, window)
    "v1 padding=4": (lambda: T1.RandomCrop(32, padding=4), 4, 32),
    "v2 padding=4": (lambda: T2.RandomCrop(32, padding=4), 4, 32),
    # torchvision pads a side smaller than the crop by the difference on both sides: 40 x 40, windows of 36
    "v1 pad_if_needed": (lambda: T1.RandomCrop(36, pad_if_needed=True), 4, 36),
    "v2 padding=1 and pad_if_needed": (lambda: T2.RandomCrop(36, padding=1, pad_if_needed=True), 3, 36),
}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(DRAWN))
def test_every_offset_is_drawn_and_the_border_is_black(cifar, name, backend):
    """Each uint8 window is the image padded with black pixels on every side, cut at some ``(top, left)``; over
    128 draws every offset appears on each axis (torchvision draws them uniformly)."""
    make, pad, window = DRAWN[name]
    dataset = ImageFolder(cifar, T1.Compose([make(), T1.PILToTensor()]))
    plain = ImageFolder(cifar, T1.PILToTensor())
    originals = {plain[k][0].sum().item(): torch.nn.functional.pad(plain[k][0], (pad,) * 4) for k in range(COUNT)}
    assert len(originals) == COUNT  # told apart by their sums
    tops, lefts, black_seen = set(), set(), False
    for images, _ in ours(dataset, backend, epochs=8, shuffle=True, generator=torch.Generator().manual_seed(5)):
        assert images.shape == (COUNT, 3, window, window) and images.dtype == torch.uint8
        for image in images:
            padded = next(p for p in originals.values() if _offsets(image, p))
            ((top, left),) = _offsets(image, padded)
            tops.add(top), lefts.add(left)
            black_seen |= bool((image == 0).all(0).any())
    offsets = set(range(32 + 2 * pad - window + 1))
    assert tops == offsets and lefts == offsets
    assert black_seen


EXACT = {  # the crop as large as the padded image: no randomness left, torch's batches exactly
    "v1 int": lambda: T1.Compose([T1.RandomCrop(40, padding=4), T1.ToTensor(), T1.Normalize(MEAN, STD)]),
    "v1 (lr, tb)": lambda: T1.Compose([T1.RandomCrop((36, 38), padding=(3, 2)), T1.ToTensor()]),
    "v1 (l, t, r, b), one more after": lambda: T1.Compose(
        [T1.RandomCrop((35, 39), padding=(3, 1, 4, 2)), T1.ToTensor()]
    ),
    "v2 (l, t, r, b)": lambda: T2.Compose(
        [
            T2.ToImage(),
            T2.RandomCrop((35, 39), padding=[3, 1, 4, 2]),
            T2.ToDtype(F32, scale=True),
            T2.Normalize(MEAN, STD),
        ]
    ),
    "v1 after a fixed resize": lambda: T1.Compose(
        [T1.Resize((24, 20)), T1.RandomCrop((30, 28), padding=(4, 3)), T1.ToTensor()]
    ),
}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(EXACT))
def test_a_crop_as_large_as_the_padded_image_gives_torchs_batches(cifar, name, backend):
    dataset = ImageFolder(cifar, EXACT[name]())
    ((images, labels),) = ours(dataset, backend)
    ((their_images, their_labels),) = theirs(dataset)
    assert images.shape == their_images.shape and images.dtype == their_images.dtype
    assert torch.equal(labels, their_labels)
    if "resize" in name:  # gpupipe resizes within a level of PIL; the black border exactly where torch's is
        assert torch.equal((images == 0).all(1), (their_images == 0).all(1))
        assert bool((images == 0).all(1)[:, :3, :].all()) and not bool((images == 0).all(1)[:, 3:-3, 4:-4].any())
    tolerance = 1.01 / 255 if "resize" in name else 1e-5
    assert torch.allclose(images, their_images, atol=tolerance, rtol=0)


def test_the_ops_a_padded_random_crop_compiles_to():
    assert from_torchvision(T1.Compose([T1.Resize((32, 32)), T1.RandomCrop(32, padding=4)])) == [
        O.Decode(),
        O.Resize((32, 32)),
        O.CenterCrop(40),
        O.RandomCrop(32),
    ]
    cifar = CIFAR["v1"]()
    with pytest.raises(UnsupportedTransform, match=r"Compose\[0\] RandomCrop: padding=4"):
        from_torchvision(cifar)  # the size it pads is not known
    assert from_torchvision(cifar, image_size=(32, 32))[1:3] == [O.CenterCrop(40), O.RandomCrop(32)]
    assert from_torchvision(T1.Compose([T1.CenterCrop(8), T1.RandomCrop(6, pad_if_needed=True)]))[2:] == [
        O.RandomCrop(6)
    ], "pad_if_needed where no pad is needed: a plain RandomCrop"


REFUSED = {
    "reflect": (T1.RandomCrop(32, padding=4, padding_mode="reflect"), "padding_mode='reflect'"),
    "edge, v2": (T2.RandomCrop(32, padding=4, padding_mode="edge"), "padding_mode='edge'"),
    "fill": (T1.RandomCrop(32, padding=4, fill=(255, 0, 0)), "fill=(255, 0, 0)"),
    "left only": (T1.RandomCrop(32, padding=(4, 0, 0, 0)), "padding=(4, 0, 0, 0)"),
    "two more after, v2": (T2.RandomCrop(32, padding=[1, 1, 3, 1]), "padding="),
    "larger than the padded image": (T1.RandomCrop(48, padding=4), "size=(48, 48) is larger than the 40 x 40"),
    "pad_if_needed reflect": (T1.RandomCrop(36, pad_if_needed=True, padding_mode="reflect"), "padding_mode='reflect'"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_a_centred_black_pad_cannot_give_is_refused_by_name(cifar, name):
    crop, named = REFUSED[name]
    with pytest.raises(UnsupportedTransform, match=r"Compose\[0\] RandomCrop") as err:
        ours(ImageFolder(cifar, T1.Compose([crop, T1.ToTensor()])), "torchvision")
    assert named in str(err.value) and "fallback='torchvision'" in str(err.value)


@pytest.mark.parametrize("crop", [T1.RandomCrop(32, padding=4), T2.RandomCrop(40, pad_if_needed=True)])
def test_images_of_several_sizes_are_refused_and_the_fallback_runs_them(mixed, crop):
    """Over images of two sizes the pad starts from no one size: refused naming the sizes; the fallback pads each
    image at its own size, as torch does (here to one output size, which batches)."""
    dataset = ImageFolder(mixed, T1.Compose([crop, T1.ToTensor()]))
    with pytest.raises(UnsupportedTransform, match=r"Compose\[0\] RandomCrop") as err:
        ours(dataset, "torchvision", batch_size=3)
    assert "2 sizes" in str(err.value) and "fallback='torchvision'" in str(err.value)
    batches = ours(dataset, "torchvision", batch_size=3, fallback="torchvision")
    assert [tuple(images.shape) for images, _ in batches] == [(3, 3) + tuple(crop.size)] * 2


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_changed_transform_is_still_caught_after_a_padded_crop_compiled(cifar, backend):
    """The guard compiles the transform again before each pass, at the images' one size: unchanged, it passes;
    a padding edited in place is refused."""
    transform = CIFAR["v1"]()
    dataset = ImageFolder(cifar, transform)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.DataLoader(dataset, batch_size=COUNT, device="cpu", backend=backend)
        assert len(list(loader)) == 1 and len(list(loader)) == 1
        transform.transforms[0].padding = 2
        with pytest.raises(UnsupportedTransform, match="CenterCrop"):
            list(loader)


def test_a_concat_of_cifar_folders_with_equal_padded_crops_compiles(tmp_path):
    """Two folders, each with its own (equal) CIFAR transform object, compare alike; a padding that differs is
    named."""
    first, second = _folder(tmp_path / "a", [(32, 32)] * 4), _folder(tmp_path / "b", [(32, 32)] * 4)
    concat = torch.utils.data.ConcatDataset([ImageFolder(first, CIFAR["v1"]()), ImageFolder(second, CIFAR["v1"]())])
    assert [tuple(images.shape) for images, _ in ours(concat, "torchvision", batch_size=4)] == [(4, 3, 32, 32)] * 2
    other = T1.Compose(
        [T1.RandomCrop(32, padding=2), T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)]
    )
    concat = torch.utils.data.ConcatDataset([ImageFolder(first, CIFAR["v1"]()), ImageFolder(second, other)])
    with pytest.raises(gpupipe.Error, match="another transform"):
        ours(concat, "torchvision", batch_size=4)
