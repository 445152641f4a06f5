"""Pipeline checks that run when the loader is built, not when the first batch fails."""

import pytest

from gpupipe.ops import CenterCrop, Decode, HorizontalFlip, Normalize, Output, RandomResizedCrop, Resize
from gpupipe.plan.spec import build_spec


def test_spec_splits_ops_normalize_and_output():
    spec = build_spec([Decode(), Resize(size=64), CenterCrop(size=(48, 56)), Normalize(), Output(dtype="float16")])
    assert spec.ops == (Decode(), Resize(size=64), CenterCrop(size=(48, 56)))
    assert spec.normalize == Normalize()
    assert spec.output == Output(dtype="float16")
    assert spec.size == (48, 56)


def test_without_normalize_values_are_scaled_to_unit_range():
    spec = build_spec([Decode(), Resize(size=(8, 8))])
    assert spec.mean == (0.0, 0.0, 0.0) and spec.std == (1.0, 1.0, 1.0)
    assert spec.output == Output()


@pytest.mark.parametrize(
    "ops, fragment",
    [
        ([], "must start with Decode()"),
        ([Resize(size=(8, 8))], "must start with Decode()"),
        ([Decode(), Decode(), Resize(size=(8, 8))], "Decode() may appear only first"),
        ([Decode(), Resize(size=64)], "varying size"),
        ([Decode(), HorizontalFlip()], "varying size"),
        ([Decode(), RandomResizedCrop(size=32), Normalize(), HorizontalFlip()], "Normalize must be last"),
        ([Decode(), Output(), RandomResizedCrop(size=32)], "Output() must be the last op"),
        ([Decode(), "flip"], "pipeline[1] is not a gpupipe op"),
    ],
)
def test_structural_errors(ops, fragment):
    with pytest.raises(ValueError) as info:
        build_spec(ops)
    assert fragment in str(info.value)


def test_output_conflict_is_an_error():
    with pytest.raises(ValueError, match="conflicts"):
        build_spec([Decode(), RandomResizedCrop(size=8), Output(dtype="uint8")], Output(dtype="float32"))


def test_a_center_crop_larger_than_the_size_before_it_pads_to_its_size():
    """As torchvision's ``CenterCrop``: the image is padded, centred (it was refused when the size was known)."""
    spec = build_spec([Decode(), Resize(size=(10, 10)), CenterCrop(size=(12, 13))])
    assert spec.size == (12, 13) and spec.sizes[-1] == (12, 13)
    assert CenterCrop(size=(12, 13)).anchor(10, 10) == (-1, -1)
