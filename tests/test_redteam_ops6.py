"""Red team (ops6): masks warped by ``RandomAffine`` against the documented nearest-neighbour rule (each
output pixel's centre mapped back, the source pixel it falls in read; on an edge, the one below/right of
it), and ``AutoAugment``'s parity between dali-cpu and torchvision; each test was failing before its fix."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, needs_dali
from PIL import Image

import gpupipe
from gpupipe import ops

FILL = 255  # the default ignore_index: where no source pixel maps


def _image(path: Path, h: int, w: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def _coordinate_masks(tmp_path: Path, h: int, w: int):
    """A mask whose value is its row (first image) and one whose value is its column (second image)."""
    rows = (np.arange(h)[:, None] + np.zeros((1, w), int)).astype(np.uint8)
    cols = (np.arange(w)[None, :] + np.zeros((h, 1), int)).astype(np.uint8)
    for name, ids in (("a", rows), ("b", cols)):
        _image(tmp_path / "images" / f"{name}.png", h, w)
        (tmp_path / "masks").mkdir(parents=True, exist_ok=True)
        Image.fromarray(ids).save(tmp_path / "masks" / f"{name}.png")
    return gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")


def _source_index(j: int, n: int, scale: float, shift: float, centre: Fraction) -> int:
    """The documented rule in exact arithmetic: output pixel ``j``'s centre ``j + 1/2``, moved back through
    ``x -> scale * (x - centre) + centre + shift`` (the planned float32 scale), floored; ``-1`` outside."""
    s = Fraction(float(np.float32(scale)))
    k = (Fraction(2 * j + 1, 2) - centre - Fraction(shift)) / s + centre
    i = k.numerator // k.denominator
    return i if 0 <= i < n else -1


def _expected(n: int, scale: float, shift: float, centre: Fraction | None = None) -> np.ndarray:
    c = Fraction(n, 2) if centre is None else centre
    return np.array([_source_index(j, n, scale, shift, c) for j in range(n)])


def _masks(source, backend: str, pipeline) -> torch.Tensor:
    loader = gpupipe.loader(source, pipeline, batch_size=2, backend=backend, shuffle=False, num_threads=1)
    return next(iter(loader))[1]


# (h, w), scale, centre: 1.5 about an even-sized image's centre (every third row on an edge), 0.7, 2 and
# 0.75 (edges every other row), an odd size (its centre a pixel centre), a centre of the user's off the middle.
CASES = [
    ((12, 12), 1.5, None),
    ((12, 12), 0.7, None),
    ((10, 14), 2.0, None),
    ((13, 9), 0.75, None),
    ((12, 16), 1.25, (3.0, 9.5)),
    ((11, 12), 0.5, (4.0, 2.0)),
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(("size", "scale", "centre"), CASES)
def test_a_mask_scaled_by_an_affine_reads_the_source_pixel_the_documented_rule_names(
    tmp_path, backend, size, scale, centre
):
    h, w = size
    affine = ops.RandomAffine(0, scale=(scale, scale), center=centre)
    masks = _masks(
        _coordinate_masks(tmp_path, h, w), backend, [ops.Decode(), affine, ops.CenterCrop((h, w)), ops.Output("uint8")]
    )
    cx, cy = (None, None) if centre is None else (Fraction(centre[0]), Fraction(centre[1]))
    rows, cols = _expected(h, scale, 0, cy), _expected(w, scale, 0, cx)
    inside = (rows[:, None] >= 0) & (cols[None, :] >= 0)
    assert masks[0].numpy().tolist() == np.where(inside, rows[:, None], FILL).tolist()
    assert masks[1].numpy().tolist() == np.where(inside, cols[None, :], FILL).tolist()


def _random_pairs(tmp_path: Path, h: int, w: int, n: int = 4):
    for k in range(n):
        _image(tmp_path / "images" / f"{k}.png", h, w, seed=k)
        (tmp_path / "masks").mkdir(parents=True, exist_ok=True)
        values = np.random.default_rng(k + 9).integers(0, 20, (h, w), dtype=np.uint8)
        Image.fromarray(values).save(tmp_path / "masks" / f"{k}.png")
    return gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")


@needs_dali
@pytest.mark.parametrize(("centre", "scale"), [(None, (1.5, 1.5)), (None, (0.5, 1.7)), ((3.3, 5.1), (0.5, 1.7))])
@pytest.mark.parametrize("size", [(12, 12), (17, 11)])
def test_images_and_masks_scaled_and_shifted_at_random_agree_between_the_backends(tmp_path, size, centre, scale):
    """Whole-pixel shifts drawn at random, with a scale that puts rows on edges (1.5) or drawn scales (float32,
    not round numbers) and a centre off the pixel grid: the image (nearest, RandomAffine's default) and its
    mask read the same source pixels on both backends."""
    source = _random_pairs(tmp_path, *size)
    affine = ops.RandomAffine(0, translate=(0.3, 0.3), scale=scale, center=centre)
    pipeline = [ops.Decode(), affine, ops.CenterCrop(size), ops.Output("uint8")]
    got = {}
    for backend in ("dali-cpu", "torchvision"):
        loader = gpupipe.loader(source, pipeline, batch_size=4, backend=backend, shuffle=False, num_threads=1, seed=3)
        got[backend] = next(iter(loader))
    (dali_images, dali_masks), (tv_images, tv_masks) = got["dali-cpu"], got["torchvision"]
    assert (dali_masks == 255).any() == (scale[0] < 1)  # only a scale below 1 leaves parts unmapped
    assert torch.equal(dali_masks, tv_masks)
    assert torch.equal(dali_images, tv_images)


def _noise_folder(tmp_path: Path, n: int = 8):
    for k in range(n):
        _image(tmp_path / "noise" / "c" / f"{k}.png", 17, 11, seed=k)
    return gpupipe.ImageFolder(tmp_path / "noise")


def _policy_images(source, backend: str, crop) -> torch.Tensor:
    pipeline = [ops.Decode(), ops.CenterCrop(crop), ops.AutoAugment(), ops.Output("uint8")]
    loader = gpupipe.loader(source, pipeline, batch_size=8, backend=backend, shuffle=False, num_threads=1, seed=1)
    return next(iter(loader))[0].int()


@needs_dali
@pytest.mark.parametrize("form", ["cpu", "gpu", "torch"])
@pytest.mark.parametrize("crop", [(3, 9), (6, 5), (2, 7)])
def test_sharpness_keeps_the_border_pixels_as_torchvision_does(tmp_path, monkeypatch, form, crop):
    """torchvision's ``adjust_sharpness`` (as PIL) blurs only where the 3x3 kernel lies inside the image and
    leaves the one-pixel border (a whole image of 2 pixels or fewer a side) as it is; DALI's filter reflected
    past the edge and sharpened the border too: 2/3 of a 3x9 image, 87 levels of 255 apart, 18.8 on average.
    The policy is narrowed to Sharpness at its bin 7 (AutoAugment's), always applied, either sign."""
    from gpupipe.ops import pixel

    monkeypatch.setitem(pixel.AUTO_AUGMENT_POLICIES, "imagenet", ((("Sharpness", 1.0, 7), ("Sharpness", 0.0, 7)),))
    monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
    source = _noise_folder(tmp_path)
    dali, tv = _policy_images(source, "dali-cpu", crop), _policy_images(source, "torchvision", crop)
    border = torch.ones(crop, dtype=torch.bool)
    if min(crop) > 2:
        border[1:-1, 1:-1] = False
    assert torch.equal(dali[..., border], tv[..., border])
    assert (dali - tv).abs().max() <= 8  # the interior: docs/pipelines.md's bound for sharpness


@needs_dali
@pytest.mark.parametrize("form", ["cpu", "gpu", "torch"])
@pytest.mark.parametrize("crop", [(3, 9), (15, 17)])
def test_equalize_leaves_an_image_of_fewer_than_256_pixels_as_torchvision_does(tmp_path, monkeypatch, form, crop):
    """torchvision's ``equalize`` (as PIL) changes no channel with fewer than 255 pixels below its brightest
    level, so never an image of fewer than 256 pixels; DALI's (OpenCV's formula) equalized it: 15.4 levels of
    255 apart on average on 3x9 noise, 127 at most. The policy is narrowed to Equalize, always applied."""
    from gpupipe.ops import pixel

    monkeypatch.setitem(pixel.AUTO_AUGMENT_POLICIES, "imagenet", ((("Equalize", 1.0, None), ("Invert", 0.0, None)),))
    monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
    source = _noise_folder(tmp_path)
    dali, tv = _policy_images(source, "dali-cpu", crop), _policy_images(source, "torchvision", crop)
    assert torch.equal(dali, tv)
