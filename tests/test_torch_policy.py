"""The cost model of RandAugment and random erasing as batched torch ops (``benchmarks/torch_policy.py``, timed
by ``op_costs.py --torch`` on the GPU): the passes it times must do what they stand for, or the figure would
time the wrong work. Neutral parameters leave the batch exactly as it is; each op, drawn for every sample,
does its own change; erasing sets exactly the planned rectangles."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import torch_policy as tp  # noqa: E402


def batch(low=0, high=256, n=6, size=(20, 24), seed=0):
    return torch.randint(low, high, (n, 3, *size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def only(name, n=6, magnitude=9):
    return tp.draw(n, magnitude=magnitude, op=torch.full((n,), tp.OPS.index(name)), sign=torch.ones(n))


def test_the_neutral_chain_leaves_every_sample_as_it_is():
    x = batch()
    assert torch.equal(tp.level(x, only("Identity")), x)


@pytest.mark.parametrize("name", ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
                                  "Contrast", "Sharpness"])
def test_each_op_changes_every_sample(name):
    x = batch()
    y = tp.level(x, only(name))
    assert y.shape == x.shape and y.dtype == torch.uint8
    assert ((y.int() - x.int()).abs().flatten(1).amax(1) > 0).all(), name


def test_posterize_solarize_autocontrast_and_equalize_do_what_torchvision_does():
    x = batch()
    assert torch.equal(tp.level(x, only("Posterize")), x & 254)  # m=9 of 31 bins: 7 bits kept
    threshold = 255 * (1 - 9 / 30)
    assert torch.equal(tp.level(x, only("Solarize")), torch.where(x.float() >= threshold, 255 - x, x))
    dull = batch(50, 101)
    stretched = tp.level(dull, only("AutoContrast"))
    assert (stretched.amin((2, 3)) == 0).all() and (stretched.amax((2, 3)) == 255).all()
    equalized = tp.level(dull, only("Equalize"))
    assert (equalized.amax((2, 3)) == 255).all() and (equalized.amin((2, 3)) < 20).all()
    kinds = torch.arange(len(tp.OPS))  # every op once, in one batch: each sample as when drawn alone
    mixed = tp.level(batch(n=len(tp.OPS)), tp.draw(len(tp.OPS), op=kinds, sign=torch.ones(len(kinds))))
    for k, name in enumerate(tp.OPS):
        assert torch.equal(mixed[k], tp.level(batch(n=len(tp.OPS))[k:k + 1], only(name, n=1))[0]), name


def test_erasing_sets_exactly_the_planned_rectangles():
    x = batch(n=3)
    top, left = torch.tensor([2, 0, 5]), torch.tensor([3, 1, 0])
    height, width = torch.tensor([4, 0, 15]), torch.tensor([5, 7, 24])
    y = tp.erase(x, top, left, height, width, fill=0)
    expected = x.clone()
    expected[0, :, 2:6, 3:8] = 0
    expected[2, :, 5:20, 0:24] = 0
    assert torch.equal(y, expected)


def test_the_costs_are_measured_for_both_ops():
    costs = tp.costs(torch.device("cpu"), batch=4, size=32, repeats=2)
    assert set(costs) == {"RandAugment", "RandomErasing"} and all(v > 0 for v in costs.values())
