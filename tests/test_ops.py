"""Ops and presets: validation at construction, frozen keyword-only data, size rules."""

import dataclasses

import pytest
import torch

import gpupipe as gp
from gpupipe import presets
from gpupipe.ops import (
    CenterCrop,
    Decode,
    HorizontalFlip,
    Normalize,
    Output,
    RandomResizedCrop,
    Resize,
)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: RandomResizedCrop(size=0), "RandomResizedCrop: size must be positive"),
        (lambda: RandomResizedCrop(size=(224, "a")), "RandomResizedCrop: size must be"),
        (lambda: RandomResizedCrop(size=224, scale=(0.9, 0.1)), "scale must satisfy"),
        (lambda: RandomResizedCrop(size=224, scale=(0.1, 1.5)), "(0.1, 1.5)"),
        (lambda: RandomResizedCrop(size=224, ratio=(2.0,)), "ratio must be a (min, max) pair"),
        (lambda: Resize(size=-3), "Resize: size must be positive, got -3"),
        (lambda: Resize(size=(10, 0)), "Resize: size must be positive integers"),
        (lambda: CenterCrop(size=True), "CenterCrop: size must be an int or (h, w), got True"),
        (lambda: HorizontalFlip(p=1.5), "HorizontalFlip: p must be a probability in [0, 1], got 1.5"),
        (lambda: Normalize(std=(0.2, 0.0, 0.2)), "Normalize: std must be positive"),
        (lambda: Normalize(mean=(0.5, 0.5)), "Normalize: mean must be 3 finite numbers"),
        (lambda: Output(dtype="int32"), "Output(dtype=...) must be one of"),
        (lambda: Output(channels_last="yes"), "Output(channels_last=...) must be a bool, got 'yes'"),
    ],
)
def test_bad_arguments_name_the_op_and_value(make, fragment):
    with pytest.raises(ValueError) as info:
        make()
    assert fragment in str(info.value)


def test_ops_are_frozen_with_torchvision_positional_arguments():
    crop = RandomResizedCrop(size=224)
    with pytest.raises(dataclasses.FrozenInstanceError):
        crop.size = (1, 1)
    assert crop == RandomResizedCrop(224) == RandomResizedCrop(size=(224, 224))
    assert hash(crop) == hash(RandomResizedCrop(size=(224, 224)))
    with pytest.raises(TypeError):
        RandomResizedCrop(224, (0.5, 1.0))  # scale is keyword-only, as the README says


@pytest.mark.parametrize(
    "positional, keywords",
    [
        (lambda: gp.RandomResizedCrop(224, scale=(0.2, 1.0)), lambda: gp.RandomResizedCrop(size=224, scale=(0.2, 1.0))),
        (lambda: gp.Resize(256), lambda: gp.Resize(size=256)),
        (lambda: gp.CenterCrop(224), lambda: gp.CenterCrop(size=224)),
        (lambda: gp.HorizontalFlip(0.3), lambda: gp.HorizontalFlip(p=0.3)),
        (lambda: gp.Normalize((0.5,) * 3, (0.2,) * 3), lambda: gp.Normalize(mean=(0.5,) * 3, std=(0.2,) * 3)),
        (lambda: gp.GaussianBlur(5, (0.1, 2.0)), lambda: gp.GaussianBlur(kernel=5, sigma=(0.1, 2.0))),
        (lambda: gp.ColorJitter(0.4, 0.3, 0.2, 0.1),
         lambda: gp.ColorJitter(brightness=0.4, contrast=0.3, saturation=0.2, hue=0.1)),
        (lambda: gp.RandomGrayscale(0.2), lambda: gp.RandomGrayscale(p=0.2)),
        (lambda: gp.RandomRotation(15), lambda: gp.RandomRotation(degrees=15)),
        (lambda: gp.RandAugment(2, 9), lambda: gp.RandAugment(num_ops=2, magnitude=9)),
        (lambda: gp.RandomErasing(0.25), lambda: gp.RandomErasing(p=0.25)),
        (lambda: gp.MixUp(0.2), lambda: gp.MixUp(alpha=0.2)),
        (lambda: gp.CutMix(1.0), lambda: gp.CutMix(alpha=1.0)),
        (lambda: gp.RandomCrop(128), lambda: gp.RandomCrop(size=128)),
        (lambda: gp.RandomResize(100, 200), lambda: gp.RandomResize(min_size=100, max_size=200)),
        (lambda: gp.Output("uint8", channels_last=True), lambda: gp.Output(dtype="uint8", channels_last=True)),
    ],
)
def test_readme_notation_builds_the_same_op(positional, keywords):
    assert positional() == keywords()


def test_sizes_are_normalised_to_pairs():
    assert RandomResizedCrop(size=160).size == (160, 160)
    assert CenterCrop(size=[100, 120]).size == (100, 120)
    assert Resize(size=256).size == 256
    assert Resize(size=[64, 32]).size == (64, 32)


@pytest.mark.parametrize(
    "hw, expected",
    [((23, 37), (16, 25)), ((31, 50), (16, 25)), ((41, 29), (22, 16)), ((16, 16), (16, 16)), ((300, 400), (16, 21))],
)
def test_resize_shorter_side_truncates_the_longer_as_torchvision(hw, expected):
    assert Resize(size=16).resized(*hw) == expected
    assert Resize(size=(5, 7)).resized(*hw) == (5, 7)


def test_resize_and_center_crop_put_pixels_where_torchvision_puts_them():
    from torchvision.transforms.v2.functional._geometry import (
        _center_crop_compute_crop_anchor,
        _center_crop_compute_padding,
        _compute_resized_output_size,
    )

    def torchvision_size(hw, size, max_size=None):  # torchvision gives 0 for a side gpupipe keeps at 1 pixel
        return [max(1, side) for side in _compute_resized_output_size(hw, size, max_size)]

    for h in range(1, 90, 7):
        for w in range(1, 90, 5):
            assert list(Resize(16).resized(h, w)) == torchvision_size((h, w), 16), (h, w)
            assert list(Resize(16, max_size=40).resized(h, w)) == torchvision_size((h, w), 16, 40)
            assert list(Resize(None, max_size=40).resized(h, w)) == torchvision_size((h, w), None, 40)
            left, top, _, _ = _center_crop_compute_padding(24, 24, h, w)
            padded_h, padded_w = max(h, 24), max(w, 24)
            anchor_top, anchor_left = _center_crop_compute_crop_anchor(24, 24, padded_h, padded_w)
            assert CenterCrop(24).anchor(h, w) == (anchor_top - top, anchor_left - left), (h, w)


def test_resize_max_size_caps_the_longer_side_as_torchvision():
    assert Resize(100, max_size=150).resized(100, 400) == (37, 150)
    assert Resize(100, max_size=150).resized(120, 100) == (120, 100)
    assert Resize(None, max_size=320).resized(480, 640) == (240, 320)
    with pytest.raises(ValueError, match="size=None needs max_size"):
        Resize(None)


def test_center_crop_anchor_rounds_halves_to_even_as_torchvision():
    crop = CenterCrop(size=40)
    assert crop.anchor(53, 73) == (6, 16)  # 6.5 -> 6, 16.5 -> 16
    assert crop.anchor(55, 40) == (8, 0)  # 7.5 -> 8
    assert crop.anchor(29, 40) == (-5, 0)  # 11 rows short: 5 padded above, 6 below


def test_output_accepts_torch_dtypes():
    assert Output(dtype=torch.bfloat16).dtype == "bfloat16"
    assert Output(dtype="float16").torch_dtype is torch.float16


def test_presets_are_the_imagenet_recipes():
    assert presets.train() == [Decode(), RandomResizedCrop(size=224), HorizontalFlip(p=0.5), Normalize()]
    assert presets.val() == [Decode(), Resize(size=256), CenterCrop(size=224), Normalize()]
    assert presets.train(size=160)[1].size == (160, 160)
    assert presets.val(size=128, resize=146)[1:3] == [Resize(size=146), CenterCrop(size=128)]
    assert Normalize().mean == (0.485, 0.456, 0.406)


def test_preset_errors():
    with pytest.raises(ValueError, match="unknown preset 'tran'"):
        presets.get("tran")
    with pytest.raises(ValueError, match="resize must be an int >= the crop size"):
        presets.val(size=224, resize=200)
