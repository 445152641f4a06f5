"""Red team (ops7): masks (and nearest images) under rotations and shears against the documented
nearest-neighbour rule (each output pixel's centre moved back through the op's inverse map, the source pixel
it falls in read; on an edge, the one after it), the same on dali-cpu and torchvision; each test was failing
before its fix."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, needs_dali
from PIL import Image
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

import gpupipe
from gpupipe import ops

FILL = 255  # the default ignore_index: where no source pixel maps


def _image(path: Path, h: int, w: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def _source(tmp_path: Path, masks: list[np.ndarray]):
    for k, values in enumerate(masks):
        _image(tmp_path / "images" / f"{k}.png", *values.shape, seed=k)
        (tmp_path / "masks").mkdir(parents=True, exist_ok=True)
        Image.fromarray(values.astype(np.uint8)).save(tmp_path / "masks" / f"{k}.png")
    return gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")


def _checkerboards(h: int, w: int) -> list[np.ndarray]:
    """Labels with sharp edges everywhere: a checkerboard of 1 px cells (two phases), rows banded by 3."""
    i, j = np.arange(h)[:, None], np.arange(w)[None, :]
    return [(i + j + k) % 2 * 3 + i % 3 for k in range(2)]


def _coordinates(h: int, w: int) -> list[np.ndarray]:
    """A mask whose value is its row, and one whose value is its column."""
    i, j = np.arange(h)[:, None] + np.zeros((1, w), int), np.arange(w)[None, :] + np.zeros((h, 1), int)
    return [i, j]


def _batch(source, backend: str, op, size, seed: int = 0):
    pipeline = [ops.Decode(), op, ops.CenterCrop(size), ops.Output("uint8")]
    loader = gpupipe.loader(source, pipeline, batch_size=2, backend=backend, shuffle=False, num_threads=1, seed=seed)
    return next(iter(loader))


TURNS = {
    "rotate 30": ops.RandomRotation((30, 30)),
    "rotate 45": ops.RandomRotation((45, 45)),
    "rotate 90": ops.RandomRotation((90, 90)),
    "rotate -90": ops.RandomRotation((-90, -90)),
    "rotate 180": ops.RandomRotation((180, 180)),
    "affine 90": ops.RandomAffine((90, 90)),
    "affine 45": ops.RandomAffine((45, 45)),
    "shear 10": ops.RandomAffine(0, shear=(10, 10)),
    "shear 45": ops.RandomAffine(0, shear=(45, 45)),
    "shear x and y": ops.RandomAffine(0, shear=(-20, -20, 30, 30)),
    "all at once": ops.RandomAffine(25, translate=(0.2, 0.2), scale=(0.7, 1.3), shear=(-15, 15, -10, 10)),
}


@needs_dali
@pytest.mark.parametrize("size", [(12, 13), (16, 16), (9, 9)])
@pytest.mark.parametrize("op", list(TURNS.values()), ids=list(TURNS))
def test_masks_turned_or_sheared_agree_between_the_backends(tmp_path, size, op):
    """Before: DALI's float32 ``warp_affine`` / ``rotate`` and torchvision's ``grid_sample`` took different
    sides of pixel edges: a quarter turn of a 12x13 checkerboard differed in 242 of 312 pixels, a 45-degree
    shear of 12x12 in 128 of 288 (the image too, nearest by default), 45 degrees of 16x16 in 42 of 512."""
    source = _source(tmp_path, _checkerboards(*size))
    (dali_images, dali_masks), (tv_images, tv_masks) = (
        _batch(source, backend, op, size, seed=1) for backend in ("dali-cpu", "torchvision")
    )
    assert torch.equal(dali_masks, tv_masks)
    if isinstance(op, ops.RandomAffine):  # nearest by default: the image reads the mask's pixels
        assert torch.equal(dali_images, tv_images)
    else:  # bilinear
        assert (dali_images.int() - tv_images.int()).abs().max() <= 1


def _exact_turn(h: int, w: int, quarter: int) -> tuple[np.ndarray, np.ndarray]:
    """The rule in exact arithmetic for a counter-clockwise turn by ``quarter`` quarter turns about the centre."""
    cos, sin = [(1, 0), (0, 1), (-1, 0), (0, -1)][quarter % 4]
    rows, cols = np.full((h, w), -1), np.full((h, w), -1)
    cx, cy = Fraction(w, 2), Fraction(h, 2)
    for i in range(h):
        for j in range(w):
            dx, dy = Fraction(2 * j + 1, 2) - cx, Fraction(2 * i + 1, 2) - cy
            x, y = cos * dx - sin * dy + cx, sin * dx + cos * dy + cy  # F.rotate's inverse map
            r, c = math.floor(y), math.floor(x)
            if 0 <= r < h and 0 <= c < w:
                rows[i, j], cols[i, j] = r, c
    return rows, cols


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("turn", [90, -90, 180])
@pytest.mark.parametrize("size", [(12, 13), (7, 4), (12, 12)])
def test_a_mask_turned_by_quarter_turns_reads_the_pixel_the_documented_rule_names(tmp_path, backend, turn, size):
    """Where ``h - w`` is odd every pixel centre of a quarter turn lands on an edge: the pixel after it is read
    (torchvision's float32 ``grid_sample`` took the one before in 1/4 of the 12x13 pixels, DALI's in others)."""
    h, w = size
    masks = _batch(_source(tmp_path, _coordinates(h, w)), backend, ops.RandomRotation((turn, turn)), size)[1]
    rows, cols = _exact_turn(h, w, turn // 90)
    assert masks[0].numpy().tolist() == np.where(rows >= 0, rows, FILL).tolist()
    assert masks[1].numpy().tolist() == np.where(cols >= 0, cols, FILL).tolist()


def _distance_to_edges(h: int, w: int, degrees: float) -> np.ndarray:
    """``(h, w)``: how far each output pixel's centre, moved back through ``F.rotate``'s inverse map (float64),
    lands from the nearest pixel edge, in pixels."""
    rot = math.radians(-float(np.float32(degrees)))
    i, j = np.mgrid[0:h, 0:w].astype(np.float64)
    dx, dy = j + 0.5 - w / 2, i + 0.5 - h / 2
    x, y = math.cos(rot) * dx + math.sin(rot) * dy + w / 2, -math.sin(rot) * dx + math.cos(rot) * dy + h / 2
    return np.minimum(np.abs(x - np.round(x)), np.abs(y - np.round(y)))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(("size", "degrees"), [((9, 9), 30), ((17, 11), 30), ((16, 16), 45), ((20, 24), 37)])
def test_a_turned_mask_differs_from_torchvisions_rotate_only_on_pixel_edges(tmp_path, backend, size, degrees):
    """The residual against torchvision's own ``F.rotate(mask, NEAREST)``: only pixels whose source point lies
    on an edge (within 1e-4 px) may read the other side, at most 7 % of a mask in these cases."""
    masks = _checkerboards(*size)
    got = _batch(_source(tmp_path, masks), backend, ops.RandomRotation((degrees, degrees)), size)[1]
    on_edge = _distance_to_edges(*size, degrees) < 1e-4
    for k, values in enumerate(masks):
        theirs = F.rotate(
            torch.from_numpy(values.astype(np.uint8))[None],
            float(np.float32(degrees)),
            interpolation=InterpolationMode.NEAREST,
            fill=FILL,
        )[0]
        differ = (got[k] != theirs.long()).numpy()
        assert not (differ & ~on_edge).any()
        assert differ.mean() <= 0.07


def _opencv_equalize(image: np.ndarray) -> np.ndarray:
    """OpenCV's ``equalizeHist`` per channel of ``(H, W, C)`` uint8: from the darkest level present (0), each
    level's count up to and including it times ``255 / (pixels - count of the darkest)`` in float32, rounded."""
    out = np.empty_like(image)
    for c in range(image.shape[2]):
        channel = image[..., c]
        hist = np.bincount(channel.ravel(), minlength=256)
        darkest = int(np.flatnonzero(hist)[0])
        if hist[darkest] == channel.size:
            out[..., c] = darkest
            continue
        scale = np.float32(255.0) / np.float32(channel.size - hist[darkest])
        cumulative = np.cumsum(hist) - hist[darkest]
        lut = np.minimum(255, np.rint(cumulative.astype(np.float32) * scale)).astype(np.uint8)
        lut[: darkest + 1] = 0
        out[..., c] = lut[channel]
    return out


def _equalize_images(h: int, w: int) -> list[np.ndarray]:
    """Noise, a smooth picture, and three flat bands (a quarter dark, half mid-grey, a quarter bright)."""
    from helpers import textured_image

    bands = np.full((h, w, 3), 128, np.uint8)
    bands[: h // 4], bands[-(h // 4) :] = 12, 240
    return [
        np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8),
        textured_image(np.random.default_rng(1), h, w),
        bands,
    ]


@needs_dali
@pytest.mark.parametrize("form", ["cpu", "gpu"])
def test_equalize_on_images_of_256_pixels_or_more_is_opencvs_on_dali_and_pils_on_torchvision(
    tmp_path, monkeypatch, form
):
    """Left as documented, not fixed: DALI's ``equalize`` is OpenCV's formula exactly, torchvision's is PIL's
    (the count *below* each level, divided by a step of ``(pixels - count of the brightest) // 255``). A
    histogram in DALI's operators costs 256 comparisons a pixel (0.8 s per 224 px image on a CPU), so the
    difference stays, exactly the two formulas': 77 levels of 255 on the mid-grey band (half the pixels),
    about 11 on average on noise and smooth images."""
    from gpupipe.ops import pixel

    monkeypatch.setitem(pixel.AUTO_AUGMENT_POLICIES, "imagenet", ((("Equalize", 1.0, None), ("Invert", 0.0, None)),))
    monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
    h, w = 40, 56
    images = _equalize_images(h, w)
    for k, pixels in enumerate(images):
        (tmp_path / "c").mkdir(exist_ok=True)
        Image.fromarray(pixels).save(tmp_path / "c" / f"{k}.png")
    pipeline = [ops.Decode(), ops.CenterCrop((h, w)), ops.AutoAugment(), ops.Output("uint8")]
    got = {}
    for backend in ("dali-cpu", "torchvision"):
        loader = gpupipe.loader(tmp_path, pipeline, batch_size=3, backend=backend, shuffle=False, num_threads=1)
        got[backend] = next(iter(loader))[0]
    for k, pixels in enumerate(images):
        chw = torch.from_numpy(pixels).permute(2, 0, 1)
        assert torch.equal(got["dali-cpu"][k], torch.from_numpy(_opencv_equalize(pixels)).permute(2, 0, 1))
        assert torch.equal(got["torchvision"][k], F.equalize(chw))
    apart = (got["dali-cpu"].int() - got["torchvision"].int()).abs()
    assert apart[2].max() == 77
    assert 5 < apart[:2].float().mean() < 15


@needs_dali
@pytest.mark.parametrize("size", [(1, 9), (3, 1), (5, 2)])
@pytest.mark.parametrize(
    "op",
    [ops.RandomRotation(180), ops.RandomAffine(25, translate=(0.3, 0.3), scale=(0.5, 1.5), shear=(-30, 30, -20, 20))],
    ids=["rotation", "affine"],
)
def test_masks_of_one_or_two_pixels_a_side_warp_alike(tmp_path, size, op):
    """Warps of masks one pixel wide or tall (the map's centre on a pixel's centre or edge): the same labels."""
    source = _source(tmp_path, _checkerboards(*size))
    (dali_images, dali_masks), (tv_images, tv_masks) = (
        _batch(source, backend, op, size, seed=2) for backend in ("dali-cpu", "torchvision")
    )
    assert torch.equal(dali_masks, tv_masks)
    assert (dali_images.int() - tv_images.int()).abs().max() <= (0 if isinstance(op, ops.RandomAffine) else 1)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    ("size", "resize"),
    [((7, 19), ops.Resize(4)), ((19, 7), ops.Resize(4, max_size=9)), ((20, 31), ops.Resize(None, max_size=13))],
)
def test_resize_by_the_shorter_side_truncates_the_longer_as_torchvision(tmp_path, backend, size, resize):
    """Already right (a guard): 19 * 4 / 7 = 10.86 gives 10 px, as ``v2.Resize`` (the docstring said "rounded")."""
    from torchvision.transforms import v2

    h, w = size
    folder = tmp_path / "c"
    _image(folder / "0.png", h, w)
    out_size = resize.resized(h, w)
    pipeline = [ops.Decode(), resize, ops.CenterCrop(out_size), ops.Output("uint8")]
    loader = gpupipe.loader(tmp_path, pipeline, batch_size=1, backend=backend, shuffle=False, num_threads=1)
    images = next(iter(loader))[0]
    theirs = v2.Resize(resize.size, max_size=resize.max_size)(torch.zeros(3, h, w, dtype=torch.uint8))
    assert tuple(images.shape[-2:]) == tuple(theirs.shape[-2:]) == out_size
