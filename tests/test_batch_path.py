"""One batch-level path (#32): every op that works on whole batches (``MixUp``, ``CutMix``, ``Output``,
``SanitizeBoxes``, a user's own) has one entry in ``gpupipe.loading.batchsteps``, saying what applies it
and where it runs; the loader applies the after-transfer steps at one point for every backend."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import CPU_BACKENDS, HAS_DALI, flat_folder

import gpupipe
from gpupipe.loading import batchsteps
from gpupipe.loading.batchsteps import BatchSteps, Place, batch_step, finisher, step_of
from gpupipe.loading.mixing import BatchMixer
from gpupipe.loading.transfer import normalize_uint8
from gpupipe.ops import BatchOp, CenterCrop, CutMix, Decode, MixUp, Normalize, Output, SanitizeBoxes
from gpupipe.ops import registry as op_registry
from gpupipe.ops.registry import RegistryError
from gpupipe.plan.seeding import batch_key
from gpupipe.plan.spec import build_spec

PACKAGE = Path(gpupipe.__file__).resolve().parent
SHIFT = 1000.0


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("batch_path"), 12, classes=3, size=(20, 24))


@pytest.fixture
def toy():
    """A user's batch op and its step, registered for one test: adds ``SHIFT`` to the images, records
    each key it is given."""

    @dataclass(frozen=True)
    class ToyShift(BatchOp):
        amount: float = SHIFT

    keys: list[int] = []

    @batch_step(ToyShift)
    def shift(ops, spec, num_classes):
        def apply(images, targets, key):
            keys.append(key)
            return images + sum(op.amount for op in ops), targets

        return apply

    yield ToyShift, keys
    batchsteps.remove_batch_step(ToyShift)
    op_registry.unregister(ToyShift)


def _batches(folder, ops, backend, **kw):
    loader = gpupipe.loader(folder, ops, batch_size=4, backend=backend, device="cpu", num_threads=1, **kw)
    with loader:
        return [(images.clone(), targets.clone()) for images, targets in loader]


BASE = [Decode(), CenterCrop(size=16), Normalize()]


def test_each_builtin_op_has_one_step_and_its_place():
    assert step_of(Output).place is Place.FINISH and step_of(Output).apply is normalize_uint8
    assert step_of(MixUp).place is Place.LOADER and step_of(CutMix).apply is step_of(MixUp).apply
    assert step_of(SanitizeBoxes).place is Place.SAMPLE
    spec = build_spec([*BASE, MixUp(), CutMix()])
    steps = BatchSteps(spec, num_classes=3)
    assert len(steps.after_transfer) == 1, "MixUp and CutMix share one mixer (one of them per batch)"
    images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    assert torch.equal(steps.finish(images), normalize_uint8(images, spec))
    assert torch.equal(finisher(spec)(images), normalize_uint8(images, spec))


def test_a_second_step_for_an_op_is_refused(toy):
    ToyShift, _ = toy
    with pytest.raises(RegistryError, match="ToyShift: batch step registered twice: .*shift.* and .*other"):

        @batch_step(ToyShift)
        def other(ops, spec, num_classes):
            raise AssertionError("never built")

    with pytest.raises(RegistryError, match="MixUp: batch step registered twice"):
        batch_step(MixUp)(lambda ops, spec, num_classes: None)
    with pytest.raises(RegistryError, match="not a registered op"):
        batch_step(int)(lambda ops, spec, num_classes: None)


def test_a_batch_op_without_a_step_is_refused_by_name(folder):
    @dataclass(frozen=True)
    class NoStep(BatchOp):
        pass

    try:
        with pytest.raises(RegistryError, match="NoStep works on whole batches but has no batch step"):
            gpupipe.loader(folder, [*BASE, NoStep()], batch_size=4, backend="torchvision", device="cpu")
        with pytest.raises(RegistryError, match="NoStep works on whole batches but has no batch step"):
            BatchSteps(build_spec([*BASE, NoStep()]), num_classes=3)
    finally:
        op_registry.unregister(NoStep)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_toy_batch_op_runs_at_the_one_point(folder, toy, backend):
    ToyShift, keys = toy
    plain = _batches(folder, BASE, backend, seed=5)
    shifted = _batches(folder, [*BASE, ToyShift()], backend, seed=5)
    assert len(shifted) == len(plain) == 3
    for (images, labels), (want, want_labels) in zip(shifted, plain):
        assert torch.equal(images, want + SHIFT) and torch.equal(labels, want_labels)
    assert keys == [batch_key(5, 0, 0, b) for b in range(3)], "one call per batch, keyed as MixUp is"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_steps_run_in_pipeline_order_after_mixing(folder, toy, backend):
    """``[..., MixUp(), ToyShift()]``: the toy sees the mixed batch, bit for bit what ``BatchMixer`` gives."""
    ToyShift, _ = toy
    plain = _batches(folder, BASE, backend, seed=3)
    got = _batches(folder, [*BASE, MixUp(alpha=0.4), ToyShift()], backend, seed=3)
    mixer = BatchMixer([MixUp(alpha=0.4)], num_classes=3)
    for b, ((images, targets), (raw, labels)) in enumerate(zip(got, plain)):
        mixed, soft = mixer(raw.clone(), labels, key=batch_key(3, 0, 0, b), inplace=True)
        assert torch.equal(images, mixed + SHIFT) and torch.equal(targets, soft)


@pytest.mark.skipif(not HAS_DALI, reason="needs DALI")
def test_toy_values_agree_across_cpu_backends(folder, toy):
    """The same step at the same point: dali-cpu and torchvision give the same shifted batches."""
    ToyShift, keys = toy
    runs = {b: _batches(folder, [*BASE, ToyShift()], b, seed=1) for b in ("dali-cpu", "torchvision")}
    for (a, la), (t, lt) in zip(runs["dali-cpu"], runs["torchvision"]):
        assert torch.equal(la, lt) and torch.allclose(a, t, atol=1e-4), "lossless PNGs: the same pixels"
        assert a.min().item() > SHIFT - 10, "shifted on both"
    assert keys[:3] == keys[3:], "the same keys on both backends"


def test_backends_ask_the_table_for_batch_work():
    """No backend imports the batch steps' code directly: they ask ``gpupipe.loading.batchsteps``."""
    direct = {"normalize_uint8", "BatchMixer", "sanitize"}
    found = []
    for path in sorted((PACKAGE / "backends").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name in direct]
    assert found == []


def test_only_mixing_ops_refuse_uint8_batches(toy, folder):
    """MixUp / CutMix blend float images, so a uint8 output is refused naming them; a user's batch op that
    does not mix runs on the uint8 batch as given."""
    with pytest.raises(ValueError, match="MixUp mixes float images; it cannot give uint8 batches"):
        build_spec([*BASE[:2], MixUp(), Output(dtype="uint8")])
    toy_op, _ = toy
    spec = build_spec([*BASE[:2], toy_op(amount=1.0), Output(dtype="uint8")])
    assert spec.output.dtype == "uint8" and [type(op) for op in spec.batch_ops] == [toy_op]
