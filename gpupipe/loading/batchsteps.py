"""The one table of batch-level work: op type -> the step that applies it, and where that step runs.

Per-image ops have their backends' lowering tables (``gpupipe.ops.registry``); the ops that work on
a whole batch (``MixUp``, ``CutMix``, a user's own ``BatchOp``), make the batch the contract's dtype
(``Output``) or decide which boxes a batch keeps (``SanitizeBoxes``) have this table, shared by every
backend. A step's code lives in one place; where it runs is declared here, because that decides
speed. In this order:

1. ``Place.SAMPLE``: per sample, where each sample's targets are finished, before the batch is
   stacked: in the torchvision workers, in DALI's graph. ``SanitizeBoxes`` runs here: its rule
   reads each box's moved but unclipped area, which only the per-sample target state holds, and
   running it on the batch would move that work from the workers to the main process.
2. ``Place.FINISH``: where a uint8 batch becomes the contract's dtype, normalised, fused with the
   work already under way there: in the torchvision workers into shared memory (CPU batches), in
   the CUDA prefetcher's side stream after the copy (GPU batches), or lowered into DALI's graph
   (``crop_mirror_normalize``) where DALI gives the finished batch. ``Output`` runs here; the
   backends ask ``finisher(spec)`` for it.
3. ``Place.LOADER``: in the loader, on the loader's device, after the batch arrives (and after
   exact evaluation drops failed samples), one call per step in pipeline order, for every backend
   alike (``BatchSteps.__call__``). Neighbouring ops that share a step are one call: ``MixUp`` and
   ``CutMix`` make one mixer that picks one of them per batch.

A second step for an op is an error naming both; a ``BatchOp`` without a step is refused by name
when the loader is built.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from ..ops import CutMix, MixUp, Op, Output, SanitizeBoxes
from ..ops.registry import OPS, RegistryError
from ..plan.spec import PipelineSpec
from ..targets.boxes import sanitize
from .mixing import BatchMixer
from .transfer import normalize_uint8

F = TypeVar("F", bound=Callable[..., Any])
#: A ``Place.LOADER`` step, built once per loader: ``(images, targets, key) -> (images, targets)``.
LoaderStep = Callable[[torch.Tensor, Any, int], tuple[torch.Tensor, Any]]


class Place(str, enum.Enum):
    """Where a batch step runs (see the module's text for the order) and what ``apply`` is there."""

    SAMPLE = "sample"  # apply(op, *per-sample state) -> result, in the backend's target lowering
    FINISH = "finish"  # apply(images (B, 3, H, W) uint8, spec, out=None) -> the contract's images
    LOADER = "loader"  # apply(ops, spec, num_classes) -> LoaderStep, called once per batch by the loader


@dataclass(frozen=True)
class BatchStep:
    """One entry of the table: the function that applies an op and where it runs."""

    apply: Callable[..., Any]
    place: Place


#: op type -> its step; filled by ``batch_step`` (the built-in ops' entries are at the end of this file).
BATCH_STEPS: dict[type, BatchStep] = {}


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def add_batch_step(op: type, apply: Callable[..., Any], place: Place = Place.LOADER) -> None:
    """Registers ``apply`` as ``op``'s batch step, run at ``place``.

    Raises:
        RegistryError: ``op`` is not a registered op, or already has a step (both named).
    """
    if not isinstance(op, type) or OPS.get(op.__name__) is not op:
        raise RegistryError(f"a batch step for {op!r}, which is not a registered op (subclass gpupipe.ops.Op)")
    old = BATCH_STEPS.get(op)
    if old is not None and old.apply is not apply:
        raise RegistryError(f"{op.__name__}: batch step registered twice: {_where(old.apply)} and {_where(apply)}")
    BATCH_STEPS[op] = BatchStep(apply, Place(place))


def batch_step(*ops: type, place: Place = Place.LOADER) -> Callable[[F], F]:
    """Decorator: registers the function as the batch step of each of ``ops`` (see ``add_batch_step``).

    A ``Place.LOADER`` step is ``step(ops, spec, num_classes)``, called once when the loader is built
    with the pipeline's neighbouring ops that share it; it returns ``apply(images, targets, key)
    -> (images, targets)``, called for every batch with ``images`` ``(B, 3, H, W)`` on the loader's
    device and ``key`` from ``gpupipe.plan.seeding.batch_key`` (the same on every backend and resume).
    """

    def register_step(function: F) -> F:
        for op in ops:
            add_batch_step(op, function, place)
        return function

    return register_step


def remove_batch_step(op: type) -> None:
    """Removes ``op``'s step (for tests that register toy ops)."""
    BATCH_STEPS.pop(op, None)


def step_of(op: type) -> BatchStep:
    """``op``'s entry.

    Raises:
        RegistryError: it has none, naming the op.
    """
    step = BATCH_STEPS.get(op)
    if step is None:
        raise RegistryError(
            f"{op.__name__} works on whole batches but has no batch step: register one with "
            "gpupipe.loading.batchsteps.batch_step"
        )
    return step


def finisher(spec: PipelineSpec) -> Callable[..., torch.Tensor]:
    """The ``Place.FINISH`` step of ``spec.output``: ``finish(images, out=None)`` on uint8 ``(B, 3, H, W)``."""
    return functools.partial(step_of(type(spec.output)).apply, spec=spec)


def per_sample(op: Op, *state: Any) -> Any:
    """Runs ``op``'s ``Place.SAMPLE`` step on one sample's ``state`` (``SanitizeBoxes``: ``(clipped, raw)``
    ``(N, 4)`` boxes -> ``(N,)`` which survive)."""
    return step_of(type(op)).apply(op, *state)


class BatchSteps:
    """The batch-level work of one pipeline, built once from the spec when the loader is built.

    Args:
        spec: the checked pipeline (its ``batch_ops`` and ``output``).
        num_classes: the width of soft targets.

    Attributes:
        finish: the ``Place.FINISH`` step (``finisher(spec)``).
        after_transfer: the ``Place.LOADER`` steps, in pipeline order.

    Raises:
        RegistryError: a batch op has no step, or one that does not run in the loader (named).
    """

    def __init__(self, spec: PipelineSpec, num_classes: int) -> None:
        self.finish = finisher(spec)
        groups: list[tuple[Callable[..., Any], list[Op]]] = []
        for op in spec.batch_ops:
            step = step_of(type(op))
            if step.place is not Place.LOADER:
                raise RegistryError(f"{op.name}: a batch op's step must run at Place.LOADER, not {step.place.name}")
            if groups and groups[-1][0] is step.apply:
                groups[-1][1].append(op)
            else:
                groups.append((step.apply, [op]))
        self.after_transfer: tuple[LoaderStep, ...] = tuple(make(tuple(ops), spec, num_classes) for make, ops in groups)

    def __bool__(self) -> bool:
        return bool(self.after_transfer)

    def __call__(self, images: torch.Tensor, targets: Any, key: int) -> tuple[torch.Tensor, Any]:
        """Applies the ``Place.LOADER`` steps to a batch on the loader's device, in pipeline order."""
        for apply in self.after_transfer:
            images, targets = apply(images, targets, key)
        return images, targets


# -- the built-in ops' steps (their code: gpupipe.loading.mixing, .transfer, gpupipe.targets.boxes) ----------


@batch_step(MixUp, CutMix)
def mix(ops: tuple[Op, ...], spec: PipelineSpec, num_classes: int) -> LoaderStep:
    """One of ``ops`` per batch (``BatchMixer``), in place on the loader's own batch; soft targets."""
    return functools.partial(BatchMixer(ops, num_classes), inplace=True)  # type: ignore[arg-type]


add_batch_step(Output, normalize_uint8, Place.FINISH)


@batch_step(SanitizeBoxes, place=Place.SAMPLE)
def keep_boxes(rule: SanitizeBoxes, clipped: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """``(N,)`` the boxes that survive ``rule`` (``clipped``, ``raw``: ``(N, 4)``); on DALI the same rule is
    lowered into the graph (``backends/dali/targets.py``)."""
    return sanitize(clipped, raw, rule.min_size, rule.min_visible)


__all__ = [
    "BATCH_STEPS",
    "BatchStep",
    "BatchSteps",
    "Place",
    "add_batch_step",
    "batch_step",
    "finisher",
    "per_sample",
    "remove_batch_step",
    "step_of",
]
