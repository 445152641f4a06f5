"""Segmentation: masks follow the image through every geometric op, on every backend; bad pairs are
reported; packed shards carry masks; a resume continues exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from gpupipe import ops
from gpupipe.pack import PackSettings, pack, verify
from helpers import BACKEND_DEVICES, CPU_BACKEND_NAMES, CPU_BACKENDS, load_example, rest_and_resumed, two_ranks

IGNORE = 255
COLOURS = {1: (230, 40, 40), 2: (40, 220, 60)}


def make_pair(root: Path, name: str, rng: np.random.Generator, size=(60, 80), palette=False):
    """An image whose class regions are bright colours on a dark background, and its mask of class ids."""
    h, w = size
    mask = np.zeros((h, w), np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    for cls in (1, 2):
        cy, cx = rng.uniform(0.25, 0.75) * h, rng.uniform(0.25, 0.75) * w
        ry, rx = rng.uniform(0.12, 0.25) * h, rng.uniform(0.12, 0.25) * w
        mask[((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1] = cls
    image = np.full((h, w, 3), 20, np.uint8)
    for cls, colour in COLOURS.items():
        image[mask == cls] = colour
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(root / "images" / f"{name}.png")
    if palette:
        img = Image.fromarray(mask, "P")
        img.putpalette([v for i in range(256) for v in ((i * 97) % 256, (i * 31) % 256, (i * 7) % 256)])
        img.save(root / "masks" / f"{name}.png")
    else:
        Image.fromarray(mask, "L").save(root / "masks" / f"{name}.png")


@pytest.fixture(scope="module")
def seg_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("seg")
    rng = np.random.default_rng(0)
    for i in range(16):
        make_pair(root, f"s{i:03d}", rng, size=(int(rng.integers(50, 90)), int(rng.integers(60, 100))),
                  palette=i % 2 == 1)
    return root


def source(root):
    return gpupipe.SegmentationFolder(root / "images", root / "masks", classes=["background", "red", "green"])


def class_of_pixels(images: torch.Tensor) -> torch.Tensor:
    """(B, H, W): the class an image's colour says (0 dark, 1 red, 2 green), -1 where it is unclear."""
    x = images.float()
    out = torch.full(x.shape[:1] + x.shape[2:], -1, dtype=torch.int64)
    out[(x.max(dim=1).values < 60)] = 0
    out[(x[:, 0] > 150) & (x[:, 1] < 110)] = 1
    out[(x[:, 1] > 150) & (x[:, 0] < 110)] = 2
    return out


def boundary(masks: torch.Tensor, width: int = 2) -> torch.Tensor:
    """Pixels within ``width`` of a change of class (where resampling may blur the image)."""
    m = masks.float()[:, None]
    grown = torch.nn.functional.max_pool2d(m, 2 * width + 1, stride=1, padding=width)
    shrunk = -torch.nn.functional.max_pool2d(-m, 2 * width + 1, stride=1, padding=width)
    return (grown != shrunk)[:, 0]


GEOMETRIES = {
    "random-resized-crop": [ops.RandomResizedCrop(48, scale=(0.3, 1.0))],
    "resize-center-crop": [ops.Resize(50), ops.CenterCrop(48)],
    "flip-pad": [ops.HorizontalFlip(0.5), ops.Resize(None, max_size=40), ops.PadTo(48)],
    "rotation": [ops.Resize((48, 48)), ops.RandomRotation(30)],
    "random-resize-crop": [ops.RandomResize(30, 70), ops.HorizontalFlip(0.5), ops.RandomCrop(48)],
    "zoom-out": [ops.RandomZoomOut(0, side_range=(1.0, 2.0), p=1.0), ops.Resize((48, 48))],
}


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_masks_stay_aligned_with_their_images(seg_data, backend, device, geometry):
    pipeline = [ops.Decode(), *GEOMETRIES[geometry], ops.Output("uint8")]
    loader = gpupipe.loader(source(seg_data), pipeline, batch_size=8, backend=backend, device=device, num_threads=1,
                            seed=5)
    samples = 0
    for _ in range(2):
        for images, masks in loader:
            samples += len(images)
            assert masks.dtype == torch.int64 and masks.shape == (len(images), 48, 48)
            assert masks.device == images.device
            images, masks = images.cpu(), masks.cpu()
            seen = class_of_pixels(images)
            inner = ~boundary(masks) & (masks != IGNORE)
            agree = (seen == masks) | (seen == -1)
            assert agree[inner].float().mean() > 0.995, f"{geometry}: classes where the image shows them"
            outside = (masks == IGNORE) & ~boundary(masks)
            assert (images.float().amax(dim=1)[outside] < 30).all(), "no image where the mask says ignore"
            if geometry in ("flip-pad", "zoom-out", "rotation"):
                assert (masks == IGNORE).any(), "padding and uncovered corners are ignore_index"
    assert samples == 2 * 16, "two epochs of every pair"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_backends_give_the_same_masks_for_the_same_seed(seg_data, backend):
    pipeline = gpupipe.presets.segmentation_train(crop=40, base=60)
    def masks(b):
        loader = gpupipe.loader(source(seg_data), pipeline, batch_size=16, backend=b, num_threads=1, seed=3)
        return next(iter(loader))[1]
    ours, theirs = masks(backend), masks("torchvision")
    assert (ours == theirs).float().mean() > 0.99, "one window, one coin, nearest-neighbour sampling"
    for cls in (0, 1, 2, IGNORE):
        share = [(m == cls).float().mean().item() for m in (ours, theirs)]
        assert abs(share[0] - share[1]) < 0.01, (cls, share)


def test_palette_masks_give_class_ids_not_colours(seg_data):
    loader = gpupipe.loader(source(seg_data), [ops.Decode(), ops.Resize((32, 32)), ops.Output("uint8")],
                            batch_size=16, backend="torchvision", num_threads=0, shuffle=False)
    _, masks = next(iter(loader))
    assert set(masks.unique().tolist()) <= {0, 1, 2}
    if pytest.importorskip("nvidia.dali"):
        dali = gpupipe.loader(source(seg_data), [ops.Decode(), ops.Resize((32, 32)), ops.Output("uint8")],
                              batch_size=16, backend="dali-cpu", num_threads=1, shuffle=False)
        assert torch.equal(next(iter(dali))[1], masks)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_masks_are_resized_by_pixel_centres_on_every_backend(tmp_path, backend):
    """Nearest-exact sampling: output column j reads input column floor((j + 0.5) * 10 / 4), whichever
    torchvision is installed (before 0.29, its Mask resize ignored the interpolation asked for)."""
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    Image.fromarray(np.full((6, 10, 3), 128, np.uint8)).save(tmp_path / "images" / "a.png")
    Image.fromarray(np.tile(np.arange(10, dtype=np.uint8), (6, 1)), "L").save(tmp_path / "masks" / "a.png")
    folder = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", classes=[str(i) for i in range(10)])
    for pipeline, size in (([ops.Decode(), ops.Resize((6, 4)), ops.Output("uint8")], (6, 4)),
                           ([ops.Decode(), ops.RandomResizedCrop(4, scale=(1.0, 1.0), ratio=(10 / 6, 10 / 6)),
                             ops.Output("uint8")], (4, 4))):
        loader = gpupipe.loader(folder, pipeline, batch_size=1, backend=backend, num_threads=1, shuffle=False)
        masks = next(iter(loader))[1]
        assert masks.shape == (1, *size) and masks[0].tolist() == [[1, 3, 6, 8]] * size[0], pipeline[1]


def test_unpaired_files_and_bad_masks_are_reported(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(5):
        make_pair(tmp_path, f"s{i}", rng)
    (tmp_path / "masks" / "s0.png").unlink()                       # an image without a mask
    (tmp_path / "images" / "s1.png").unlink()                      # a mask without an image
    Image.new("RGB", (80, 60)).save(tmp_path / "masks" / "s2.png")  # a colour mask
    Image.new("L", (10, 10)).save(tmp_path / "masks" / "s3.png")    # a mask of another size
    with pytest.raises(ValueError) as info:
        gpupipe.loader(source(tmp_path), "segmentation-val", batch_size=1, backend="torchvision")
    message = str(info.value)
    assert "2 of 3 files cannot be used, and 2 files do not pair up" in message
    assert "s0.png: no mask" in message and "s1.png: a mask without an image" in message
    assert "is not a single-channel gray (1-16 bit) or palette (1-8 bit) PNG (colour type 2" in message
    assert "s3.png is 10x10, its image 80x60" in message
    loader = gpupipe.loader(source(tmp_path), "segmentation-val", batch_size=1, backend="torchvision",
                            on_error="skip")
    assert len(loader.source) == 1 and len(loader.skipped) == 4


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_ops_that_cannot_carry_masks_are_refused_naming_op_target_and_backend(seg_data, backend):
    pytest.importorskip("nvidia.dali") if backend == "dali-cpu" else None
    with pytest.raises(ValueError, match=f"RandAugment cannot carry masks on backend '{backend}'"):
        gpupipe.loader(source(seg_data), [ops.Decode(), ops.CenterCrop(32), ops.RandAugment()], batch_size=2,
                       backend=backend)
    with pytest.raises(ValueError, match="MixUp cannot carry masks"):
        gpupipe.loader(source(seg_data), [ops.Decode(), ops.CenterCrop(32), ops.Normalize(), ops.MixUp()],
                       batch_size=2, backend=backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_packed_shards_carry_masks(seg_data, tmp_path, backend):
    dst = tmp_path / "packed"
    pack(source(seg_data), dst, PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    assert verify(dst) == []
    shards = gpupipe.Shards(dst)
    assert shards.kind is gpupipe.TargetKind.MASK and shards.classes == ["background", "red", "green"]
    pipeline = [ops.Decode(), ops.RandomResizedCrop(40), ops.HorizontalFlip(), ops.Output("uint8")]
    loader = gpupipe.loader(dst, pipeline, batch_size=16, backend=backend, num_threads=1, seed=2)
    images, masks = next(iter(loader))
    seen = class_of_pixels(images)
    inner = ~boundary(masks)
    assert ((seen == masks) | (seen == -1))[inner].float().mean() > 0.99, "masks packed as exact PNGs"


def test_shrunk_masks_stay_class_ids(seg_data, tmp_path):
    from gpupipe.pack import ConvertSettings

    dst = tmp_path / "small"
    pack(source(seg_data), dst, PackSettings(convert=ConvertSettings(max_size=30)), workers=1, progress=False)
    shards = gpupipe.Shards(dst)
    mask = np.asarray(Image.open(__import__("io").BytesIO(shards.read_mask(0).tobytes())))
    assert mask.ndim == 2 and min(mask.shape) == 30 and set(np.unique(mask)) <= {0, 1, 2}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_resume_with_masks_continues_exactly(seg_data, backend):
    pipeline = gpupipe.presets.segmentation_train(crop=32, base=50)
    make = lambda: gpupipe.loader(source(seg_data), pipeline, batch_size=4, backend=backend,  # noqa: E731
                                  num_threads=1, seed=8)
    rest, again = rest_and_resumed(make(), make())
    rest, again = [m for _, m in rest], [m for _, m in again]
    assert len(rest) == len(again) == 16 // 4 - 1, "the epoch's batches after the first"
    assert all(torch.equal(a, b) for a, b in zip(rest, again))


@pytest.mark.slow
def test_ranks_split_a_segmentation_folder(seg_data, tmp_path):
    """Every CPU backend in turn, in one torchrun launch."""
    ranks = two_ranks(tmp_path, f"""
src = gpupipe.SegmentationFolder({str(seg_data / 'images')!r}, {str(seg_data / 'masks')!r})
result = {{}}
for backend in {CPU_BACKEND_NAMES!r}:
    loader = gpupipe.loader(src, [gpupipe.Decode(), gpupipe.Resize((16, 16)), gpupipe.Output("uint8")],
                            batch_size=3, backend=backend, num_threads=1, seed=1)
    seen = [int(m.sum()) for _, masks in loader for m in masks]
    result[backend] = {{"len": len(loader), "sums": seen,
                        "names": [src.names[i] for i in loader.rank_share(0).indices]}}
""")
    assert all(list(r) == CPU_BACKEND_NAMES for r in ranks)
    for backend in CPU_BACKEND_NAMES:
        rank0, rank1 = (r[backend] for r in ranks)
        assert rank0["len"] == rank1["len"] == 3, backend
        assert sorted(rank0["names"] + rank1["names"]) == sorted(source(seg_data).names), backend
        assert len(rank0["sums"]) == len(rank1["sums"]) == 8, backend


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_swapped_segmentation_loader_trains(seg_data, backend):
    example = load_example("train_segmentation")
    loader = example.gpupipe_version(str(seg_data / "images"), str(seg_data / "masks"), crop=32, batch_size=4,
                                     backend=backend)
    losses = example.train(loader, num_classes=3, epochs=6)
    assert losses[-1] < 0.6 * losses[0], losses


def test_the_original_segmentation_dataloader_still_runs(seg_data):
    example = load_example("train_segmentation")
    loader = example.dataloader_version(str(seg_data / "images"), str(seg_data / "masks"), crop=32, batch_size=4)
    losses = example.train(loader, num_classes=3, epochs=6)
    assert losses[-1] < 0.6 * losses[0], losses
