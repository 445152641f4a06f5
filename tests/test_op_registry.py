"""The op registry (#32): an op is declared once. Its class registers itself, its planner and each
backend's lowering register next to their code, a second registration is an error naming both, the
export lists are derived, and a user adds an op from a module of their own."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, HAS_DALI, TOY_OP, make_image_folder

import gpupipe
from gpupipe import ops
from gpupipe.ops import Op, registry
from gpupipe.ops.registry import RegistryError

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture
def toy(tmp_path):
    """The user's module, written to ``tmp_path`` and imported; its ops unregistered afterwards."""
    path = tmp_path / "toy_ops.py"
    path.write_text(TOY_OP)
    spec = importlib.util.spec_from_file_location("toy_ops", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_ops"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("toy_ops", None)
    registry.unregister(module.ToyInvert)
    registry.unregister(module.ToyTorchvisionOnly)


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "images"
    make_image_folder(root, {"a": 4, "b": 4}, sizes=(40, 60), seed=2)
    return root


def batch(folder, pipeline, backend):
    loader = gpupipe.loader(folder, pipeline, batch_size=8, backend=backend, device="cpu", shuffle=False,
                            num_threads=1, dtype="uint8", seed=3)
    images, labels = next(iter(loader))
    return images.cpu().to(torch.int16), labels


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_users_op_runs_on_each_backend_it_has_a_lowering_for(toy, folder, backend):
    base = [ops.Decode(), ops.CenterCrop(32)]
    plain, labels = batch(folder, base, backend)
    inverted, labels_inverted = batch(folder, base + [toy.ToyInvert(p=0.5)], backend)
    assert torch.equal(labels, labels_inverted)
    flipped = [bool(torch.equal(b, 255 - a)) for a, b in zip(plain, inverted)]
    kept = [bool(torch.equal(b, a)) for a, b in zip(plain, inverted)]
    assert all(f != k for f, k in zip(flipped, kept)), "each image is inverted or left alone"
    assert 0 < sum(flipped) < 8, flipped
    # the coin is the plan's: the same samples are inverted on every backend
    keys = gpupipe.plan.Planner(gpupipe.plan.spec.build_spec(base + [toy.ToyInvert(p=0.5)]), seed=3)
    planned = keys.plan(0, np.arange(8), np.full((8, 2), 40)).steps[2]["invert"]
    assert flipped == [bool(v) for v in planned]


@pytest.mark.skipif(not HAS_DALI, reason="needs DALI")
def test_a_users_op_without_a_lowering_on_the_backend_is_refused_by_name(toy, folder):
    pipeline = [ops.Decode(), ops.CenterCrop(32), toy.ToyTorchvisionOnly()]
    with pytest.raises(ValueError, match=r"ToyTorchvisionOnly has no lowering on backend 'dali-cpu' "
                                         r"\(it has a lowering on: torchvision\)"):
        gpupipe.loader(folder, pipeline, batch_size=2, backend="dali-cpu", device="cpu")
    assert len(batch(folder, pipeline, "torchvision")[0]) == 8


@pytest.mark.skipif(not HAS_DALI, reason="needs DALI")
def test_auto_takes_the_backend_that_lowers_a_users_op_with_a_warning_naming_it(toy, folder):
    pipeline = [ops.Decode(), ops.CenterCrop(32), toy.ToyTorchvisionOnly()]
    with pytest.warns(UserWarning, match=r"backend='auto' chose 'torchvision'.*not 'dali-cpu': ToyTorchvisionOnly "
                                         r"has no lowering on backend 'dali-cpu'"):
        loader = gpupipe.loader(folder, pipeline, batch_size=8, device="cpu")
    assert loader.backend == "torchvision" and "ToyTorchvisionOnly" in loader.backend_reason
    assert next(iter(loader))[0].shape == (8, 3, 32, 32)


@pytest.mark.skipif(not HAS_DALI, reason="needs DALI")
def test_a_lowering_that_refuses_an_ops_parameters_is_checked_when_the_loader_is_built(folder):
    """``refuses=``: a lowering that keeps only some parameters says which; asked for by name, the backend refuses
    the pipeline when it is built; ``auto`` takes a backend that keeps them."""

    @dataclass(frozen=True)
    class ToyPicky(Op):
        strength: int = 1

    try:
        ops.register(ToyPicky, lowerings={"torchvision": lambda item, params, op, spec: None,
                                          "dali": lambda g, j, op: None},
                     refuses={"dali": lambda op: f"strength={op.strength} is not kept" if op.strength > 1 else ""})
        pipeline = [ops.Decode(), ops.CenterCrop(32), ToyPicky(strength=2)]
        with pytest.raises(ValueError, match=r"ToyPicky on backend 'dali-cpu': strength=2 is not kept"):
            gpupipe.loader(folder, pipeline, batch_size=2, backend="dali-cpu", device="cpu")
        with pytest.warns(UserWarning, match=r"chose 'torchvision'.*strength=2 is not kept"):
            assert gpupipe.loader(folder, pipeline, batch_size=2, device="cpu").backend == "torchvision"
        kept = gpupipe.loader(folder, pipeline[:2] + [ToyPicky(strength=1)], batch_size=2, device="cpu")
        assert kept.backend == "dali-cpu"
    finally:
        registry.unregister(ToyPicky)


def test_an_op_class_registers_itself_and_a_second_of_its_name_is_refused_naming_both():
    @dataclass(frozen=True)
    class ToyOnce(Op):
        pass

    try:
        assert registry.OPS["ToyOnce"] is ToyOnce
        with pytest.raises(RegistryError, match=r"op 'ToyOnce' registered twice: by .*test_op_registry.*ToyOnce and by"):
            type("ToyOnce", (Op,), {})
        with pytest.raises(RegistryError, match=r"op 'Resize' registered twice: by gpupipe\.ops\.geometry\.Resize"):
            type("Resize", (Op,), {})
    finally:
        registry.unregister(ToyOnce)
    assert ops.Resize in ops.OP_TYPES


def test_a_planner_or_lowering_registered_twice_is_refused_naming_both(toy):
    with pytest.raises(RegistryError, match=r"ToyInvert: planner registered twice: toy_ops\.plan and .*other_plan"):
        @registry.planner(toy.ToyInvert)
        def other_plan(op, step):
            return {}

    with pytest.raises(RegistryError, match=r"ToyInvert: torchvision lowering registered twice: "
                                            r"toy_ops\.on_torchvision and .*other_lowering"):
        @registry.lowering_table("torchvision").register(toy.ToyInvert)
        def other_lowering(item, params, op, spec):
            pass

    with pytest.raises(RegistryError, match=r"HorizontalFlip: planner registered twice: gpupipe\.plan\.draws"):
        registry.add_planner(ops.HorizontalFlip, lambda op, step: {})
    with pytest.raises(RegistryError, match="no backend lowering table named \\['jax'\\]"):
        registry.register(toy.ToyInvert, lowerings={"jax": toy.on_torchvision})


def test_a_lowering_for_a_class_that_is_no_op_is_refused():
    class NotAnOp:
        pass

    with pytest.raises(RegistryError, match="not a registered op"):
        registry.lowering_table("torchvision").add(NotAnOp, lambda *a: None)


def test_op_types_and_export_lists_are_read_from_the_registry():
    shipped = [cls for cls in registry.op_types() if cls.__module__.startswith("gpupipe.ops.")]
    assert set(ops.OP_TYPES) == set(shipped) and len(ops.OP_TYPES) >= 22
    assert ops.OP_NAMES == tuple(cls.__name__ for cls in ops.OP_TYPES)
    for name in ops.OP_NAMES:
        assert name in ops.__all__ and name in gpupipe.__all__
        assert getattr(gpupipe, name) is getattr(ops, name) is registry.OPS[name]
    assert "AutoAugmentOp" not in registry.OPS and "BatchOp" not in registry.OPS, "abstract bases stay out"


def spelled_out(path: Path) -> set:
    """The names an ``__init__.py`` imports from its op modules as ``X as X`` (the static re-exports)."""
    tree = ast.parse(path.read_text())
    return {alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.asname == alias.name}


@pytest.mark.parametrize("init", ["gpupipe/__init__.py", "gpupipe/ops/__init__.py"])
def test_the_imports_type_checkers_read_are_the_registered_ops(init):
    assert spelled_out(ROOT / init) == set(ops.OP_NAMES), f"{init}: import each op of OP_NAMES as `X as X`"


def test_every_shipped_op_is_lowered_through_the_tables_the_backends_read():
    from gpupipe.backends.torchvision.lowering import LOWERINGS

    assert LOWERINGS is registry.lowering_table("torchvision")
    per_image = [cls for cls in ops.OP_TYPES if cls.effect.value in ("decode", "geometric", "pixel")]
    assert all(cls in LOWERINGS and cls in registry.PLANNERS for cls in per_image)
    if HAS_DALI:
        from gpupipe.backends.dali.lowering import LOWERINGS as DALI

        assert DALI is registry.lowering_table("dali") and all(cls in DALI for cls in per_image)
