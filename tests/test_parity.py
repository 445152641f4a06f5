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

import pytest
import torch

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
