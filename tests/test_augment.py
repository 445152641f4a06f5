"""Augmentations: same meaning on DALI and torchvision.

Random ops are compared by a simple statistic over 240 samples per backend
(fixed seeds, so the tests are deterministic); tolerances are about four
standard errors of the statistic, wide enough for two independent random
streams, tight enough to catch a wrong range, probability or direction.
Deterministic settings (p=0 / p=1, a fixed factor or angle) are compared
pixel by pixel.
"""

import math

import pytest
import torch

import gpupipe
from helpers import DALI_BACKEND_DEVICES, make_image_folder
from gpupipe import presets
from gpupipe.loading.mixing import BatchMixer
from gpupipe.ops import (
    CenterCrop,
    ColorJitter,
    CutMix,
    Decode,
    GaussianBlur,
    HorizontalFlip,
    MixUp,
    Normalize,
    Output,
    RandAugment,
    RandomErasing,
    RandomGrayscale,
    RandomRotation,
    Resize,
    TrivialAugment,
)

SIZE = 48
BASE = [Decode(), Resize(size=(SIZE, SIZE))]
SAMPLES = 240
FILL = tuple(round(255 * m) for m in Normalize().mean)
CPU_DALI = [p for p in DALI_BACKEND_DEVICES if p.values[1] == "cpu"]
ALL_DALI = DALI_BACKEND_DEVICES


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("aug") / "data"
    make_image_folder(root, {"a": 12, "b": 12}, sizes=(60, 100), seed=9)
    return root


def run(folder, ops, backend, device="cpu", samples=SAMPLES, dtype="uint8"):
    """``samples`` outputs (several epochs of the folder), float32 CPU ``(N, 3, H, W)`` in uint8 units."""
    loader = gpupipe.loader(folder, BASE + ops + [Output(dtype=dtype)], batch_size=24, backend=backend,
                            device=device, shuffle=False, seed=3, num_threads=1)
    out = []
    while sum(len(x) for x in out) < samples:
        out.extend(images.float().cpu() for images, _ in loader)
    return torch.cat(out)[:samples]


def identity(folder, backend="torchvision"):
    return run(folder, [], backend)


@pytest.mark.parametrize("backend, device", CPU_DALI)
def test_horizontal_flip_fraction(folder, backend, device):
    plain = identity(folder)
    for b in (backend, "torchvision"):
        flipped = run(folder, [HorizontalFlip(p=0.3)], b, device)
        fraction = (flipped - plain.flip(-1)).abs().mean(dim=(1, 2, 3)).lt(0.5).float().mean()
        assert abs(fraction - 0.3) < 0.12, (b, fraction)


@pytest.mark.parametrize("backend, device", ALL_DALI)
def test_random_grayscale_fraction_and_luma(folder, backend, device):
    results = {}
    for b, d in ((backend, device), ("torchvision", "cpu")):
        images = run(folder, [RandomGrayscale(p=0.3)], b, d)
        gray = (images.max(dim=1).values - images.min(dim=1).values).amax(dim=(1, 2)) <= 2
        results[b] = gray.float().mean().item()
        assert abs(results[b] - 0.3) < 0.12, (b, results[b])
    always = [run(folder, [RandomGrayscale(p=1.0)], b, d, samples=24) for b, d in ((backend, device), ("torchvision", "cpu"))]
    assert (always[0] - always[1]).abs().mean() < 1.5, "same luma weights (ITU-R 601)"


@pytest.mark.parametrize("backend, device", ALL_DALI)
def test_color_jitter_brightness_distribution(folder, backend, device):
    plain = identity(folder).mean(dim=(1, 2, 3))
    ratios = {}
    for b, d in ((backend, device), ("torchvision", "cpu")):
        images = run(folder, [ColorJitter(brightness=0.5)], b, d)
        ratios[b] = images.mean(dim=(1, 2, 3)) / plain
    # factor ~ U[0.5, 1.5] (clipping at 255 pulls the top down a little): mean ~1, std ~0.29
    for b, r in ratios.items():
        assert abs(r.mean() - 1.0) < 0.07 and abs(r.std() - 0.289) < 0.05, (b, r.mean(), r.std())


@pytest.mark.parametrize("backend, device", ALL_DALI)
def test_color_jitter_fixed_factors_match_pixels(folder, backend, device):
    ops = [ColorJitter(brightness=(1.3, 1.3), contrast=(0.6, 0.6), saturation=(0.5, 0.5))]
    dali = run(folder, ops, backend, device, samples=24)
    tv = run(folder, ops, "torchvision", samples=24)
    # torchvision truncates to uint8 after each of the three steps (~-1 level each), DALI rounds once,
    # and DALI's saturation works in YIQ: ~4 levels apart; a wrong factor or order gives 20 and more.
    assert (dali - tv).abs().mean() < 5.0


@pytest.mark.parametrize("backend, device", ALL_DALI)
@pytest.mark.parametrize("hue", [0.2, -0.45, 0.02])
def test_color_jitter_fixed_hue_matches_torchvisions_pixels(folder, backend, device, hue):
    """DALI's ``hsv`` turned hue in YIQ: 27.5 levels from torchvision's HSV shift on average at 0.2, 124 at most.
    The HSV shift in DALI's arithmetic leaves what the two backends' resize already differs by, made a little
    larger where the hue moves (HSV is not linear)."""
    dali = run(folder, [ColorJitter(hue=(hue, hue))], backend, device, samples=24)
    tv = run(folder, [ColorJitter(hue=(hue, hue))], "torchvision", samples=24)
    diff = (dali - tv).abs()
    assert diff.mean() < 0.6 and diff.max() <= 6, (diff.mean().item(), diff.max().item())
    assert (tv - run(folder, [], "torchvision", samples=24)).abs().mean() > 2  # the hue did move


@pytest.mark.parametrize("backend, device", ALL_DALI)
def test_random_erasing_area(folder, backend, device):
    shares = {}
    for b, d in ((backend, device), ("torchvision", "cpu")):
        # With Normalize in the pipeline the fill is its mean (0 once normalised); uint8 output shows it raw.
        images = run(folder, [RandomErasing(p=0.5), Normalize()], b, d)
        fill = torch.tensor(FILL, dtype=torch.float32).view(1, 3, 1, 1)
        erased = (images - fill).abs().sum(dim=1).eq(0).float().mean(dim=(1, 2))
        shares[b] = erased
        assert abs(erased.gt(0).float().mean() - 0.5) < 0.12, (b, "fraction erased")
    # mean erased share ~ 0.5 * E[U(0.02, 0.33)] = 0.0875 (DALI clips rectangles torchvision re-draws)
    for b, share in shares.items():
        assert abs(share.mean() - 0.0875) < 0.03, (b, share.mean())
    none = [run(folder, [RandomErasing(p=0.0), Normalize()], b, d, samples=24)
            for b, d in ((backend, device), ("torchvision", "cpu"))]
    assert torch.equal(none[1], run(folder, [], "torchvision", samples=24))
    assert (none[0] - none[1]).abs().mean() < (0.5 if device == "cpu" else 6.0)


@pytest.mark.parametrize("backend, device", ALL_DALI)
def test_rotation_direction_and_corners(folder, backend, device):
    fixed = [RandomRotation(degrees=(25.0, 25.0))]
    dali = run(folder, fixed, backend, device, samples=24)
    tv = run(folder, fixed, "torchvision", samples=24)
    assert (dali - tv).abs().mean() < 6.0, "same angle, same direction (counter-clockwise)"
    wrong_way = run(folder, [RandomRotation(degrees=(-25.0, -25.0))], "torchvision", samples=24)
    assert (dali - wrong_way).abs().mean() > 2 * (dali - tv).abs().mean()
    black = {}
    for b, d in ((backend, device), ("torchvision", "cpu")):
        images = run(folder, [RandomRotation(degrees=30)], b, d)
        black[b] = images.sum(dim=1).eq(0).float().mean().item()
    assert abs(black[backend] - black["torchvision"]) < 0.03, black


@pytest.mark.parametrize("backend, device", ALL_DALI)
def test_gaussian_blur_sharpness(folder, backend, device):
    def sharpness(images):
        return (images[..., 1:] - images[..., :-1]).abs().mean(dim=(1, 2, 3))

    plain = sharpness(identity(folder))
    kept = {}
    for b, d in ((backend, device), ("torchvision", "cpu")):
        kept[b] = (sharpness(run(folder, [GaussianBlur(kernel=9, sigma=(0.1, 3.0))], b, d)) / plain).mean().item()
    assert abs(kept[backend] - kept["torchvision"]) < 0.08, kept
    fixed = [GaussianBlur(kernel=5, sigma=(1.0, 1.0))]
    inner = (slice(None), slice(None), slice(3, -3), slice(3, -3))  # borders are padded differently
    dali = run(folder, fixed, backend, device, samples=24)[inner]
    tv = run(folder, fixed, "torchvision", samples=24)[inner]
    assert (dali - tv).abs().mean() < 1.5


@pytest.mark.parametrize("backend, device", ALL_DALI)
@pytest.mark.parametrize("op", [RandAugment(num_ops=2, magnitude=9), TrivialAugment()], ids=["randaugment", "trivial"])
def test_auto_augment_changes_images_alike(folder, backend, device, op):
    plain = identity(folder)
    changed = {}
    for b, d in ((backend, device), ("torchvision", "cpu")):
        images = run(folder, [op], b, d)
        changed[b] = (images - plain).abs().mean(dim=(1, 2, 3)).gt(1.0).float().mean().item()
    # Identity is one of the 14 ops: most images change on both backends, in similar shares.
    assert 0.6 < changed["torchvision"] <= 1.0 and 0.6 < changed[backend] <= 1.0, changed
    assert abs(changed[backend] - changed["torchvision"]) < 0.15, changed


@pytest.mark.parametrize("backend, device", CPU_DALI)
def test_randaugment_without_ops_is_identity(folder, backend, device):
    images = run(folder, [RandAugment(num_ops=0, magnitude=9)], backend, device, samples=24)
    assert torch.equal(images, run(folder, [], backend, device, samples=24))


def test_mixup_and_cutmix_soft_targets():
    images = torch.arange(4 * 3 * 8 * 8, dtype=torch.float32).view(4, 3, 8, 8)
    labels = torch.tensor([0, 1, 2, 1])
    for op in (MixUp(alpha=0.4), CutMix(alpha=1.0)):
        mixer = BatchMixer([op], num_classes=3)
        mixed, targets = mixer(images, labels, key=7)
        again, targets_again = mixer(images, labels, key=7)
        assert torch.equal(mixed, again) and torch.equal(targets, targets_again), "reproducible from the key"
        assert targets.shape == (4, 3) and torch.allclose(targets.sum(1), torch.ones(4))
        lam = targets[0, 0].item()  # sample 0 (class 0) mixed with sample 3 (class 1)
        assert 0.0 <= lam <= 1.0 and targets[0, 1].item() == pytest.approx(1 - lam, abs=1e-6)
        if isinstance(op, MixUp):
            assert torch.allclose(mixed[0], lam * images[0] + (1 - lam) * images[3], atol=1e-3)
        else:
            pasted = (mixed[0] != images[0]).float().mean().item()
            assert pasted == pytest.approx(1 - lam, abs=1e-6), "CutMix targets follow the pasted area"


@pytest.mark.parametrize("backend", [p.values[0] for p in CPU_DALI] + ["torchvision"])
def test_heavy_preset_gives_soft_targets(folder, backend):
    ops = presets.train(32, auto_augment="rand-m9-n2", random_erasing=0.25, mixup=0.8, cutmix=1.0)
    loader = gpupipe.loader(folder, ops, batch_size=8, backend=backend, device="cpu", num_threads=1)
    images, targets = next(iter(loader))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
    assert targets.shape == (8, 2) and torch.allclose(targets.sum(1), torch.ones(8))
    loss = torch.nn.functional.cross_entropy(torch.zeros(8, 2), targets)
    assert math.isclose(loss.item(), math.log(2), rel_tol=1e-5)


def test_preset_options():
    ops = presets.train(auto_augment="rand-m7-n3", color_jitter=(0.4, 0.3, 0.2, 0.1), random_erasing=0.25,
                        mixup=0.2, cutmix=1.0)
    assert RandAugment(num_ops=3, magnitude=7) in ops
    assert ColorJitter(brightness=0.4, contrast=0.3, saturation=0.2, hue=0.1) in ops
    assert RandomErasing(p=0.25) in ops and ops[-2:] == [MixUp(alpha=0.2), CutMix(alpha=1.0)]
    assert TrivialAugment() in presets.train(auto_augment="trivial")
    with pytest.raises(ValueError, match="auto_augment must be 'rand-m<M>-n<N>'"):
        presets.train(auto_augment="v0")


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: ColorJitter(hue=0.7), "ColorJitter: hue must be in [0, 0.5], got 0.7"),
        (lambda: ColorJitter(brightness=-1), "brightness must be >= 0"),
        (lambda: GaussianBlur(kernel=4), "GaussianBlur: kernel must be an odd int >= 1, got 4"),
        (lambda: RandAugment(magnitude=31), "magnitude must be < num_magnitude_bins (31)"),
        (lambda: RandomErasing(scale=(0.5, 0.1)), "RandomErasing: scale must satisfy"),
        (lambda: MixUp(alpha=0), "MixUp: alpha must be > 0, got 0"),
    ],
)
def test_augmentation_arguments_are_checked(make, fragment):
    with pytest.raises(ValueError) as info:
        make()
    assert fragment in str(info.value)


def test_pipeline_checks_for_augmentations():
    from gpupipe.plan.spec import build_spec

    with pytest.raises(ValueError, match="RandAugment needs images of one size"):
        build_spec([Decode(), RandAugment(), CenterCrop(size=8)])
    with pytest.raises(ValueError, match="MixUp works on whole batches and must come last"):
        build_spec([Decode(), MixUp(), CenterCrop(size=8)])
    with pytest.raises(ValueError, match="cannot give uint8 batches"):
        build_spec([Decode(), CenterCrop(size=8), MixUp()], Output(dtype="uint8"))


def test_mixing_in_place_gives_what_mixing_a_copy_gives():
    """The loader mixes its own batch in place (one fused pass for MixUp, only the box for CutMix)."""
    images = torch.rand(5, 3, 16, 16)
    labels = torch.tensor([0, 1, 2, 1, 0])
    for op in (MixUp(alpha=0.4), CutMix(alpha=1.0)):
        mixer = BatchMixer([op], num_classes=3)
        for key in range(4):
            want, want_targets = mixer(images, labels, key=key)
            batch = images.clone()
            got, targets = mixer(batch, labels, key=key, inplace=True)
            assert got.data_ptr() == batch.data_ptr(), "no new batch"
            assert torch.allclose(got, want, atol=1e-6) and torch.equal(targets, want_targets)
