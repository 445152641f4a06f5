"""The structure's promises: every op has a planner and a lowering on every backend (or is refused
there by name), the backend checks run before any work, and random draws are one function of the key."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpupipe
from gpupipe import backends, ops
from gpupipe.backends.torchvision.lowering import LOWERINGS as TORCHVISION
from gpupipe.ops import Effect
from gpupipe.plan import PLANNERS, Planner
from gpupipe.plan.seeding import sample_keys, uniforms
from gpupipe.plan.spec import build_spec
from gpupipe.targets import TargetKind
from helpers import HAS_DALI

PER_IMAGE = [cls for cls in ops.OP_TYPES if cls.effect in (Effect.DECODE, Effect.GEOMETRIC, Effect.PIXEL)]


def tables():
    out = {"torchvision": TORCHVISION}
    if HAS_DALI:
        from gpupipe.backends.dali.lowering import LOWERINGS as DALI

        out["dali"] = DALI
    return out


@pytest.mark.parametrize("op", PER_IMAGE, ids=lambda c: c.__name__)
def test_every_per_image_op_has_a_planner_and_a_lowering_on_every_backend(op):
    assert op in PLANNERS
    for name, table in tables().items():
        assert op in table, f"{op.__name__} has no lowering on {name}"
        lowering = table[op]
        if lowering.targets != frozenset(TargetKind):
            assert lowering.why, f"{op.__name__} on {name}: a refused target needs a reason"


def test_the_other_ops_are_handled_by_the_spec():
    others = set(ops.OP_TYPES) - set(PER_IMAGE)
    assert {cls.effect for cls in others} <= {Effect.NORMALIZE, Effect.BATCH, Effect.TARGET, Effect.OUTPUT}


def test_a_missing_lowering_is_a_clear_error(monkeypatch, image_folder):
    monkeypatch.delitem(TORCHVISION, ops.HorizontalFlip)
    with pytest.raises(ValueError, match="HorizontalFlip has no lowering on backend 'torchvision'"):
        gpupipe.loader(image_folder, "train", batch_size=2, backend="torchvision")


@pytest.mark.parametrize("backend", ["torchvision"] + (["dali-cpu"] if HAS_DALI else []))
def test_an_op_that_cannot_carry_the_target_on_a_backend_is_named(backend):
    spec = dataclasses.replace(build_spec([ops.Decode(), ops.CenterCrop(8), ops.RandAugment()]), target=TargetKind.MASK)
    with pytest.raises(ValueError) as info:
        backends.check_lowerings(backend, spec)
    message = str(info.value)
    assert message.startswith(f"RandAugment cannot carry masks on backend {backend!r}: ")


def test_cheap_checks_come_before_listing_the_files(tmp_path):
    missing = tmp_path / "nothing-here"
    with pytest.raises(ValueError, match="num_threads=0 .* is for the torchvision backend"):
        gpupipe.loader(missing, batch_size=2, backend="dali-cpu", num_threads=0)
    with pytest.raises(ValueError, match="must start with Decode"):
        gpupipe.loader(missing, [ops.Resize(8)], batch_size=2, backend="torchvision")


def test_draws_are_one_function_of_the_key():
    keys = sample_keys(3, 1, np.arange(10))
    batch = uniforms(keys, 5, 4)
    single = np.concatenate([uniforms(keys[i:i + 1], 5, 4) for i in range(10)])
    assert np.array_equal(batch, single)
    assert not np.array_equal(uniforms(keys, 5, 4), uniforms(keys, 6, 4)), "streams differ"
    assert not np.array_equal(keys, sample_keys(3, 2, np.arange(10))), "epochs differ"
    assert 0.0 <= batch.min() and batch.max() < 1.0


def test_a_sample_gets_the_same_parameters_in_any_batch():
    spec = build_spec(gpupipe.presets.train(32) + [])
    planner = Planner(spec, seed=4)
    sizes = np.array([[60, 80], [100, 50], [40, 40]])
    together = planner.plan(2, np.array([7, 8, 9]), sizes)
    alone = planner.plan(2, np.array([8]), sizes[1:2])
    assert len(together.steps) == len(alone.steps) == len(spec.ops)
    assert sum(len(step) for step in together.steps) >= 2, "the crop and the flip draw parameters"
    for step_all, step_one in zip(together.steps, alone.steps):
        for name in step_all:
            assert np.array_equal(step_all[name][1], step_one[name][0]), name
