"""Op-by-op parity sweep: DALI's lowerings against torchvision's own functional ops, at fixed parameters.

Each test pins one difference the sweep found (docs/pipelines.md's table states the inherent ones with
their measured size); tiny generated images, uint8 output, CPU.
"""

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

import gpupipe
from gpupipe import ops as O
from helpers import make_detection_set, needs_dali, textured_image

pytestmark = needs_dali

#: The policies and the torchvision transform whose magnitudes each follows.
POLICIES = [(O.RandAugment(), v2.RandAugment), (O.TrivialAugment(), v2.TrivialAugmentWide),
            (O.TrivialAugment(num_magnitude_bins=21), v2.TrivialAugmentWide), (O.AutoAugment(), v2.AutoAugment)]


@pytest.mark.parametrize("op, transform", POLICIES, ids=["rand", "trivial", "trivial-21", "auto"])
@pytest.mark.parametrize("size", [(40, 56), (224, 224), (331, 97)])
def test_policy_translations_shift_by_torchvisions_whole_pixels(op, transform, size):
    """torchvision shifts by ``int(magnitude)`` of its float32 ``torch.linspace`` bins: TrivialAugment Wide's
    bin 15 of 31 is 15.999999, so 15 px. The DALI suite's shift is the same at every bin and sign (it took
    numpy's linspace, 16.0, and shifted by 16 px: 9 levels of 255 on average over the image)."""
    from gpupipe.backends.dali.augment_suite import suite

    h, w = size
    space = (transform() if transform is v2.AutoAugment else transform(num_magnitude_bins=op.num_magnitude_bins))
    space = space._AUGMENTATION_SPACE
    names = O.AUGMENT_OPS if not isinstance(op, O.AutoAugment) else gpupipe.ops.pixel.AUTO_AUGMENT_OPS
    for name, aug in zip(names, suite(op, names, size), strict=True):
        if not name.startswith("Translate"):
            continue
        axis = 0 if name == "TranslateX" else 1
        lo, hi = aug.mag_range
        dali = np.linspace(lo, hi, op.num_magnitude_bins, dtype=np.float32)  # as nvidia.dali.auto_aug bins them
        torchvision = space[name][0](op.num_magnitude_bins, h, w)
        for k in range(op.num_magnitude_bins):
            for sign in (1, -1):
                want = int(sign * float(torchvision[k]))
                got = float(np.asarray(aug.mag_to_param(np.float32(sign * dali[k])))[axis])
                assert got == want, (name, k, sign)


def _folder(tmp_path, size, count=2):
    from PIL import Image

    rng = np.random.default_rng(5)
    folder = tmp_path / f"{size[0]}x{size[1]}" / "a"
    folder.mkdir(parents=True)
    for i in range(count):
        Image.fromarray(textured_image(rng, *size)).save(folder / f"{i}.png")
    return folder.parent


def _both(folder, ops):
    out = []
    for backend in ("dali-cpu", "torchvision"):
        loader = gpupipe.loader(folder, [O.Decode(), *ops, O.Output("uint8")], batch_size=2, backend=backend,
                                device="cpu", shuffle=False, num_threads=1, seed=3)
        out.append(next(iter(loader))[0].float())
    return out


def test_sweep_exact_ops_are_pixel_exact(tmp_path):
    """Window, pad, flip and nearest affine (rotation, shear, shift, centre): pixel exact on the CPU, on an
    odd, non-square size (conventions: rotation direction and centre, shear sign, shift direction); the blur
    (both reflect at the borders) within one level, from rounding."""
    folder = _folder(tmp_path, (37, 53))
    keep = O.CenterCrop((37, 53))
    for ops in ([O.CenterCrop((25, 33))], [O.PadTo((60, 70), fill=(10, 200, 30))], [O.VerticalFlip(1.0), keep],
                [O.RandomAffine((17, 17), translate=(0.2, 0.2), shear=(10, 10, -15, -15)), keep],
                [O.RandomAffine((30, 30), center=(5, 7)), keep], [O.RandomRotation((90, 90)), keep]):
        dali, tv = _both(folder, ops)
        assert torch.equal(dali, tv), ops
    for blur in (O.GaussianBlur(5, 1.0), O.GaussianBlur(9, 2.5), O.GaussianBlur(3, 0.3)):
        dali, tv = _both(folder, [blur, keep])
        assert (dali - tv).abs().max() <= 1 and (dali - tv).abs().mean() < 0.01, blur


@pytest.mark.parametrize("op, transform", POLICIES, ids=["rand", "trivial", "trivial-21", "auto"])
def test_policy_solarize_inverts_torchvisions_pixels(op, transform):
    """At every bin, DALI's ``solarize`` (``x < threshold`` kept) inverts exactly the pixel values torchvision's
    does. torchvision's threshold is ``255 * float32 bin``: bin 16 of 31 is 119.000008, so 119 stays; with
    numpy's bin (119.0) DALI inverted 119 too (up to 153 levels on those pixels)."""
    from gpupipe.backends.dali.augment_suite import suite

    policy = transform() if transform is v2.AutoAugment else transform(num_magnitude_bins=op.num_magnitude_bins)
    names = O.AUGMENT_OPS if not isinstance(op, O.AutoAugment) else gpupipe.ops.pixel.AUTO_AUGMENT_OPS
    aug = suite(op, names, (16, 16))[names.index("Solarize")]
    lo, hi = aug.mag_range
    ramp = torch.arange(256, dtype=torch.uint8).view(1, 16, 16).expand(3, 16, 16).contiguous()
    magnitudes = policy._AUGMENTATION_SPACE["Solarize"][0](op.num_magnitude_bins, 16, 16)
    for k, m in enumerate(np.linspace(lo, hi, op.num_magnitude_bins, dtype=np.float32)):
        solarized = policy._apply_image_or_video_transform(ramp, "Solarize", float(magnitudes[k]),
                                                           interpolation=policy.interpolation, fill=policy._fill)
        threshold = np.float32(np.asarray(aug.mag_to_param(m)))
        dali_inverted = ~(np.arange(256, dtype=np.float32) < threshold)
        assert np.array_equal(dali_inverted, (solarized != ramp)[0].flatten().numpy()), k  # 255 - x != x


@pytest.mark.parametrize("ops", [
    [O.RandomRotation((17, 17))],
    [O.RandomRotation((-40, -40))],
    [O.RandomAffine((17, 17), interpolation="bilinear")],
    [O.RandomAffine((10, 10), translate=(0.1, 0.1), scale=(1.2, 1.2), shear=(5, 5), interpolation="bilinear", fill=100)],
], ids=["rotate-17", "rotate--40", "affine-bilinear", "affine-bilinear-fill"])
def test_bilinear_warps_blend_the_edge_as_torchvision(tmp_path, ops):
    """torchvision's bilinear warp with a fill weighs an edge pixel's image part by its in-image fraction
    twice (``mask * (sampled - fill) + fill``, ``sampled`` already zero-padded); DALI blended it once: up to 64
    levels on the rotated image's edge, 0.7 on average. Now within a level or two, everywhere."""
    folder = _folder(tmp_path, (37, 53))
    dali, tv = _both(folder, [*ops, O.CenterCrop((37, 53))])
    diff = (dali - tv).abs()
    assert diff.mean() < 0.1 and diff.max() <= 2, (diff.mean(), diff.max())


#: Ops whose DALI lowering rounds otherwise than torchvision, with the bounds docs/pipelines.md states for them
#: (mean and largest difference, levels of 255, over a batch of 37x53 images).
STATED = {
    "resize": ([O.Resize((30, 41))], 0.3, 2),
    "resize-up": ([O.Resize((100, 90))], 0.3, 2),
    "brightness": ([O.ColorJitter(brightness=(1.3, 1.3))], 0.6, 1),
    "contrast": ([O.ColorJitter(contrast=(0.5, 0.5))], 1.0, 1),
    "saturation": ([O.ColorJitter(saturation=(0.3, 0.3))], 1.0, 2),
    "hue": ([O.ColorJitter(hue=(-0.3, -0.3))], 0.1, 1),
    "jitter": ([O.ColorJitter(brightness=(1.2, 1.2), contrast=(0.8, 0.8), saturation=(1.3, 1.3), hue=(0.05, 0.05))],
               1.5, 7),
    "grayscale": ([O.RandomGrayscale(1.0)], 0.8, 2),
}


@pytest.mark.parametrize("name", list(STATED))
def test_rounding_differences_stay_within_what_the_docs_state(tmp_path, name):
    ops, mean, largest = STATED[name]
    folder = _folder(tmp_path, (37, 53))
    dali, tv = _both(folder, [*ops] if isinstance(ops[0], O.Resize) else [*ops, O.CenterCrop((37, 53))])
    diff = (dali - tv).abs()
    assert diff.mean() < mean and diff.max() <= largest, (diff.mean(), diff.max())


def test_iou_crop_and_zoom_out_are_pixel_exact_with_their_boxes(tmp_path):
    """The SSD steps: the planned window (IoU crop) and canvas (zoom-out, filled) on both backends, boxes alike."""
    data = make_detection_set(tmp_path, 12)
    for ops in ([O.RandomIoUCrop(), O.CenterCrop((40, 40))],
                [O.RandomZoomOut(50, side_range=(1.5, 2.5), p=1.0), O.CenterCrop((150, 150))]):
        out = []
        for backend in ("dali-cpu", "torchvision"):
            loader = gpupipe.loader(gpupipe.CocoDetection(*data), [O.Decode(), *ops, O.Output("uint8")], batch_size=12,
                                    backend=backend, device="cpu", shuffle=False, num_threads=1, seed=2)
            out.append(next(iter(loader)))
        (dali, dali_t), (tv, tv_t) = out
        assert torch.equal(dali, tv), ops
        assert torch.allclose(dali_t["boxes"], tv_t["boxes"], atol=1e-4) and torch.equal(dali_t["labels"], tv_t["labels"])
