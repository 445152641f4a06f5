"""Parity: the same pipeline on DALI and torchvision gives the same batches.

Tolerance, and why: both backends decode JPEG with libjpeg-turbo and
fancy upsampling, and crop and flip at the same pixel offsets (checked
exactly below), so decoded pixels agree bit for bit. What remains is the
antialiased resize: DALI's triangle filter and torchvision's bilinear-AA
kernel weigh pixels slightly differently and round to uint8 separately:
about 1/255 on average, up to ~2/255 for a strong (3x) downscale. In
normalised units (divided by std ~0.225) that is 0.005 to 0.03, so we hold
the mean absolute difference to 0.02 per batch and 0.05 per image: well
under the 0.1 that would be visible, and far below what a wrong crop
offset, a colour swap or a missing normalisation would give (0.3 and more).
"""

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from helpers import DALI_BACKEND_DEVICES, make_image_folder
from gpupipe.ops import CenterCrop, Decode, HorizontalFlip

MEAN_TOLERANCE = 0.02
PER_IMAGE_TOLERANCE = 0.05


@pytest.fixture
def parity_folder(tmp_path):
    root = tmp_path / "parity"
    make_image_folder(root, {"a": 6, "b": 6}, sizes=(60, 330), seed=4)
    return root


def first_batch(folder, pipeline, backend, device, **kwargs):
    loader = gpupipe.loader(folder, pipeline, batch_size=12, backend=backend, device=device, shuffle=False,
                            num_threads=1, **kwargs)
    images, labels = next(iter(loader))
    return images.float().cpu(), labels.cpu()


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("size, resize", [(224, 256), (96, 110)])
def test_val_preset_matches_torchvision(parity_folder, backend, device, size, resize):
    pipeline = gpupipe.presets.val(size=size, resize=resize)
    dali_images, dali_labels = first_batch(parity_folder, pipeline, backend, device)
    tv_images, tv_labels = first_batch(parity_folder, pipeline, "torchvision", "cpu")
    assert dali_images.shape == tv_images.shape == (12, 3, size, size)
    assert torch.equal(dali_labels, tv_labels)
    diff = (dali_images - tv_images).abs()
    assert diff.mean() < MEAN_TOLERANCE
    assert diff.mean(dim=(1, 2, 3)).max() < PER_IMAGE_TOLERANCE


@pytest.mark.parametrize("backend, device", [p for p in DALI_BACKEND_DEVICES if p.values[1] == "cpu"])
@pytest.mark.parametrize(
    "pipeline",
    [
        [Decode(), CenterCrop(size=(57, 61))],
        [Decode(), CenterCrop(size=(57, 61)), HorizontalFlip(p=1.0)],
        [Decode(), HorizontalFlip(p=1.0), CenterCrop(size=(57, 61))],
        [Decode(), CenterCrop(size=400)],  # larger than every image: zero padding
    ],
    ids=["crop", "crop-flip", "flip-crop", "pad"],
)
def test_crops_and_flips_are_pixel_exact_on_cpu(parity_folder, backend, device, pipeline):
    dali_images, _ = first_batch(parity_folder, pipeline, backend, device, dtype="uint8")
    tv_images, _ = first_batch(parity_folder, pipeline, "torchvision", "cpu", dtype="uint8")
    assert torch.equal(dali_images, tv_images)


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
def test_train_preset_statistics_match(parity_folder, backend, device):
    """Random crops differ per sample, but shapes, ranges and channel means agree."""
    pipeline = gpupipe.presets.train(size=64)
    dali_images, dali_labels = first_batch(parity_folder, pipeline, backend, device)
    tv_images, tv_labels = first_batch(parity_folder, pipeline, "torchvision", "cpu")
    assert dali_images.shape == tv_images.shape == (12, 3, 64, 64)
    assert torch.equal(dali_labels, tv_labels)
    channel_gap = (dali_images.mean(dim=(0, 2, 3)) - tv_images.mean(dim=(0, 2, 3))).abs()
    assert channel_gap.max() < 0.25


@pytest.fixture(scope="module")
def large_photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("large") / "data"
    make_image_folder(root, {"a": 4, "b": 4}, sizes=(1200, 1800), seed=8)
    return root


#: Reduced (DCT-scaled) decoding against a full decode, uint8 levels. With the window on the reduced
#: grid the two differ by ~0.4 levels (the decode's 8x8 box filter before the resize); in general the
#: window's corners snap to the reduced grid (<= 4 px at 1/8 scale, a quarter of an output pixel
#: here), which on these strongly textured test images moves every edge: measured 3.3 (1/4 scale) to
#: 6.0 (1/8) levels, held to 8. A wrong window or a missed rotation gives 20 and more.
REDUCED_DECODE_TOLERANCE = 8.0


def test_reduced_decoding_of_large_jpegs_stays_close_to_a_full_decode(large_photos):
    from gpupipe.backends.torchvision.dataset import decode_reduced, reduction

    assert reduction((1200, 1700), (64, 64)) == 8 and reduction((300, 300), (224, 224)) == 1
    pipeline = [Decode(), gpupipe.RandomResizedCrop(64, scale=(0.6, 1.0)), HorizontalFlip(0.5),
                gpupipe.Output("uint8")]
    reduced, _ = first_batch(large_photos, pipeline, "torchvision", "cpu", seed=3)
    full, _ = first_batch(large_photos, pipeline, "torchvision", "cpu", seed=3, reduced_decode=False)
    diff = (reduced - full).abs()
    assert 0 < diff.mean() < REDUCED_DECODE_TOLERANCE, "different pixels, same picture"
    assert diff.mean(dim=(1, 2, 3)).max() < 2 * REDUCED_DECODE_TOLERANCE
    data = np.fromfile(next(large_photos.glob("a/*.jpg")), np.uint8)
    params = {"top": np.int64(100), "left": np.int64(40), "height": np.int64(900), "width": np.int64(1000)}
    image, moved = decode_reduced(data, "x.jpg", params, (64, 64))
    assert image is not None and image.shape[1] < 250, "decoded at 1/8 scale"
    assert int(moved["height"]) == round(900 * image.shape[1] / Image.open(next(large_photos.glob("a/*.jpg"))).height)
