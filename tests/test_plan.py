"""The planner draws parameters as torchvision does: ranges, probabilities, and geometry that holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpupipe import ops
from gpupipe.plan import Planner
from gpupipe.plan import affine as maps
from gpupipe.targets import boxmath as bx
from gpupipe.plan.spec import build_spec
from gpupipe.targets import TargetKind

N = 4000


def plan(op_list, size, seed=0):
    """The parameters of the last op of ``op_list`` for ``N`` images of ``size``."""
    tail = [] if build_spec_ok(op_list) else [ops.PadTo(8)]
    spec = build_spec([ops.Decode()] + op_list + tail)
    sizes = np.tile(np.asarray(size), (N, 1))
    return Planner(spec, seed).plan(0, np.arange(N), sizes).steps[len(op_list)]


def build_spec_ok(op_list) -> bool:
    try:
        build_spec([ops.Decode()] + op_list)
    except ValueError:
        return False
    return True


def test_random_resized_crop_windows_fit_and_follow_the_ranges():
    op = ops.RandomResizedCrop(32, scale=(0.1, 0.9), ratio=(0.5, 2.0))
    p = plan([op], [300, 400])
    assert (p["top"] >= 0).all() and (p["left"] >= 0).all()
    assert (p["top"] + p["height"] <= 300).all() and (p["left"] + p["width"] <= 400).all()
    area = p["height"] * p["width"] / (300 * 400)
    assert 0.09 <= area.min() and area.max() <= 0.91
    ratio = p["width"] / p["height"]
    assert 0.45 < ratio.min() and ratio.max() < 2.1
    # torchvision's own sampler (rejection of windows that do not fit) gives the same distribution
    import torch
    from torchvision.transforms import v2

    torch.manual_seed(0)
    image = torch.zeros(1, 300, 400)
    theirs = np.array([v2.RandomResizedCrop.get_params(image, list(op.scale), list(op.ratio)) for _ in range(N)])
    their_area = theirs[:, 2] * theirs[:, 3] / (300 * 400)
    assert abs(area.mean() - their_area.mean()) < 0.015 and abs(area.std() - their_area.std()) < 0.015
    their_ratio = np.log(theirs[:, 3] / theirs[:, 2])
    assert abs(np.log(ratio).mean() - their_ratio.mean()) < 0.04


def test_random_resized_crop_falls_back_to_a_central_window_for_odd_shapes():
    p = plan([ops.RandomResizedCrop(16, scale=(0.99, 1.0), ratio=(1.0, 1.0))], [10, 400])
    assert (p["height"] == 10).all() and (p["width"] == 10).all() and (p["left"] == 195).all()


@pytest.mark.parametrize("op, key, expected", [
    (ops.HorizontalFlip(0.3), "flip", 0.3),
    (ops.RandomGrayscale(0.2), "gray", 0.2),
])
def test_coins_land_as_often_as_asked(op, key, expected):
    p = plan([ops.CenterCrop(8), op], [20, 20])
    assert abs(p[key].mean() - expected) < 0.03


def test_random_erasing_rectangles_fit_and_match_torchvision_s_area():
    p = plan([ops.CenterCrop(64), ops.RandomErasing(1.0)], [64, 64])
    on = p["erase"] == 1
    assert on.mean() > 0.9
    assert (p["top"][on] + p["height"][on] <= 64).all() and (p["left"][on] + p["width"][on] <= 64).all()
    area = (p["height"] * p["width"])[on] / 64**2
    assert abs(area.mean() - (0.02 + 0.33) / 2) < 0.02


def test_rotation_affine_turns_counter_clockwise_about_the_centre():
    affine = maps.rotation(np.array([90.0]), np.array([10]), np.array([20]))[0]
    right_of_centre = np.array([15.0, 5.0])  # (x, y), y down
    moved = affine[:, :2] @ right_of_centre + affine[:, 2]
    assert np.allclose(moved, [10.0, 0.0]), "right of the centre goes up"


def test_zoom_out_places_the_image_inside_its_canvas():
    p = plan([ops.RandomZoomOut(fill=0, side_range=(1.5, 3.0), p=1.0)], [30, 40])
    h, w = p["size"][:, 0], p["size"][:, 1]
    assert (h >= 45).all() and (h <= 90).all()
    assert (p["top"] + 30 <= h).all() and (p["left"] + 40 <= w).all()


def test_iou_crop_windows_meet_their_minimum_iou():
    box = np.array([[40, 40, 80, 80]], np.float32)
    spec = build_spec([ops.Decode(), ops.RandomIoUCrop(), ops.Resize((32, 32))], target=TargetKind.BOXES)
    steps = Planner(spec, 1).plan(0, np.arange(300), np.full((300, 2), 120), [box] * 300).steps
    p = steps[1]
    cropped = (p["height"] < 120) | (p["width"] < 120)
    assert 0.5 < cropped.mean() < 1.0, "some images kept whole (the 'no crop' option)"
    for t, lft, h, w in zip(p["top"][cropped], p["left"][cropped], p["height"][cropped], p["width"][cropped]):
        window = np.array([lft, t, lft + w, t + h], np.float64)
        assert bx.centered_in(box, window).any(), "the box's centre lies in the window"
        assert 0.3 * 120 - 1 <= min(h, w) and max(h, w) <= 120
        assert 0.5 <= w / h <= 2.0


def test_boxes_move_with_the_affine_maps():
    box = np.array([[10, 20, 30, 50]], np.float32)
    crop = maps.crop_resize(np.array([10]), np.array([5]), np.array([40]), np.array([50]), np.array([80]), np.array([100]))
    assert np.allclose(bx.apply(crop[0], box), [[10, 20, 50, 80]])
    flip = maps.hflip(np.array([1]), np.array([100]))
    assert np.allclose(bx.apply(flip[0], box), [[70, 20, 90, 50]])
    assert math.isclose(float(bx.iou(box, np.array([10, 20, 30, 50], np.float64))[0]), 1.0)
