"""The planner: every random parameter of a batch, drawn once on the host, applied by every backend.

A backend never draws random numbers of its own. For each batch the
planner draws each op's parameters from the samples' keys (a function of
the loader's seed, the epoch and the sample's slot, ``gpupipe.plan.seeding``)
and their image sizes (known from the scan or the manifest), then the
backend applies them to the image and to every target alike: one crop
window for the image's ROI decode, the mask's slice and the boxes, one coin
for the flip, one angle for the rotation. So the same seed gives the same
augmentations on DALI and torchvision, a resumed epoch repeats them
exactly, and a pipeline read by one or many DALI pipelines is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..ops import Effect, PadTo, RandomIoUCrop
from ..targets import boxmath as bx
from . import policies  # noqa: F401 -- registers the auto-augment planners
from .draws import PLANNERS, Params, Step
from .seeding import sample_keys
from .spec import PipelineSpec

#: Random streams reserved per op (op ``j`` uses streams ``(j + 1) << STREAM_BITS`` onwards).
STREAM_BITS = 12


@dataclass
class BatchPlan:
    """The parameters of one batch.

    Attributes:
        keys: ``(B,)`` uint64 sample keys.
        sizes: ``(B, 2)`` ``(h, w)`` of the decoded images.
        steps: per op of ``spec.ops``, its parameters (arrays with a leading ``B`` axis).
    """

    keys: np.ndarray
    sizes: np.ndarray
    steps: list[Params]

    def __len__(self) -> int:
        return len(self.keys)

    def sample(self, i: int) -> list[dict[str, np.ndarray]]:
        """Sample ``i``'s parameters, per op (for backends that work one sample at a time)."""
        return [{name: values[i] for name, values in step.items()} for step in self.steps]


class Planner:
    """Draws the parameters of a spec's ops for batches of samples.

    Args:
        spec: the checked pipeline.
        seed: the loader's seed.

    Raises:
        ValueError: an op without a planner (an internal error: every op type has one).
    """

    def __init__(self, spec: PipelineSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        missing = [op.name for op in spec.ops if type(op) not in PLANNERS]
        if missing:
            raise ValueError(f"no planner for {missing}")
        iou_crops = [i for i, op in enumerate(spec.ops) if isinstance(op, RandomIoUCrop)]
        self._track_boxes_until = iou_crops[-1] if iou_crops else -1

    @property
    def needs_boxes(self) -> bool:
        """Whether planning needs the samples' boxes (an IoU crop draws its window from them)."""
        return self._track_boxes_until >= 0

    def plan(
        self,
        epoch: int | np.ndarray,
        positions: np.ndarray,
        sizes: np.ndarray,
        boxes: Sequence[np.ndarray] | None = None,
    ) -> BatchPlan:
        """Draws every op's parameters for one batch.

        Args:
            epoch: the epoch read, or ``(B,)`` each sample's epoch (a run spanning epochs, planned at once).
            positions: ``(B,)`` the samples' slots in the epoch's global order.
            sizes: ``(B, 2)`` ``(h, w)`` of the decoded images.
            boxes: per sample ``(N, 4)`` xyxy boxes in image pixels (needed when ``needs_boxes``).
        """
        keys = sample_keys(self.seed, epoch, positions)
        current = np.asarray(sizes, np.int64).reshape(-1, 2)
        tracked = [np.asarray(b, np.float32) for b in boxes] if self.needs_boxes and boxes is not None else None
        steps: list[Params] = []
        for j, op in enumerate(self.spec.ops):
            step = Step(keys=keys, sizes=current, stream=(j + 1) << STREAM_BITS, boxes=tracked)
            params = PLANNERS[type(op)](op, step)
            steps.append(params)
            if op.effect is Effect.GEOMETRIC:
                if tracked is not None and j < self._track_boxes_until:
                    if isinstance(op, RandomIoUCrop):
                        tracked = [bx.keep_centered(b, p) for b, p in zip(tracked, _windows(params))]
                    tracked = [
                        bx.clip(bx.apply(a.astype(np.float64), b), h, w)
                        for a, b, (h, w) in zip(params["affine"], tracked, params["size"])
                    ]
                current = params["size"]
        return BatchPlan(keys=keys, sizes=np.asarray(sizes, np.int64).reshape(-1, 2), steps=steps)

    def content_sizes(self, plan: BatchPlan) -> np.ndarray:
        """``(B, 2)`` the ``(h, w)`` of each output image's content, without the padding ``PadTo`` added."""
        content = plan.sizes
        for op, step in zip(self.spec.ops, plan.steps):
            if op.effect is Effect.GEOMETRIC:
                content = np.minimum(content, step["size"]) if isinstance(op, PadTo) else step["size"]
        return np.asarray(content, np.int64)


def _windows(params: Params) -> np.ndarray:
    """``(B, 4)`` xyxy crop windows of a crop op's parameters."""
    left, top = params["left"], params["top"]
    return np.stack([left, top, left + params["width"], top + params["height"]], axis=1).astype(np.float64)


__all__ = ["Planner", "BatchPlan", "Params", "Step", "PLANNERS"]
