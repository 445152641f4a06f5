"""The torchvision target lowering: how each kind of target that moves with the pixels travels with
one sample through the ops in a worker, and how a batch of them is made.

One class per kind, registered in ``TARGETS`` with ``@torchvision_target(kind)``. A lowering
loads the sample's target next to its decoded image (``load``), moves it with each geometric
op (``move``: the op's pixel ``kernel``, ``kernel(x, fill=..., nearest=...)``, and its planned
parameters: a mask samples the kernel nearest-neighbour, boxes move by the op's ``affine`` map),
finishes it (``finish``), stacks a batch's part in the worker (``stack``), puts a replaced
sample's in (``replace``) and completes the batch in the main process (``complete``).
Image-level kinds get ``ImageLevel``: nothing moves, the batch is looked up on the host. A kind
that moves with the pixels and has no lowering here is refused by name (``NoTargetLowering``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from ...errors import DecodeError
from ...loading.batchsteps import per_sample
from ...targets import TargetKind
from ...targets import boxmath as bx
from ...targets.base import Indices, Kernel, Params
from ...targets.boxes import BoxState, crop_window, pad, unpad
from ...targets.maskfiles import decode_mask, packed_problem, size_problem
from ...targets.masks import in_pack, mask_reason
from ..common import TargetLowerings

if TYPE_CHECKING:
    from ...plan.spec import PipelineSpec
    from ...sources import Source


class TorchvisionTarget(Protocol):
    """A kind's torchvision lowering (one sample at a time in the workers, a batch in the main process)."""

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> Any:
        """The sample's target, ready to move with its decoded ``(h, w)`` image; ``None``: image-level.

        Raises:
            gpupipe.errors.DecodeError: naming ``path`` (a mask that does not fit its image).
        """
        ...

    def move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        """``state`` after geometric op ``op`` (its pixel ``kernel`` and planned ``params``)."""
        ...

    def finish(self, state: Any, spec: PipelineSpec) -> Any:
        """The moved sample's target as ``stack`` takes it."""
        ...

    def stack(self, parts: Sequence[Any], spec: PipelineSpec) -> Any:
        """The batch's part made in the workers (``None`` in ``parts``: a failed sample, replaced later)."""
        ...

    def replace(self, part: Any, row: int, value: Any) -> Any:
        """``part`` with row ``row`` made from one sample's ``finish`` (a replaced sample)."""
        ...

    def complete(self, part: Any, source: Source, indices: Indices, content_sizes: np.ndarray) -> Any:
        """The batch's targets from the workers' ``part``.

        ``content_sizes``: ``(B, 2)`` each output image's ``(h, w)`` without padding.
        """
        ...


class ImageLevel:
    """Image-level kinds: nothing travels with the sample; the batch comes from the source (``Target.batch``)."""

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> None:
        return None

    def move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        return state

    def finish(self, state: Any, spec: PipelineSpec) -> None:
        return None

    def stack(self, parts: Sequence[Any], spec: PipelineSpec) -> None:
        return None

    def replace(self, part: Any, row: int, value: Any) -> Any:
        return part

    def complete(self, part: Any, source: Source, indices: Indices, content_sizes: np.ndarray) -> torch.Tensor:
        return source.target.batch(source, indices)


#: target kind -> its torchvision lowering.
TARGETS: TargetLowerings[TorchvisionTarget] = TargetLowerings("torchvision", ImageLevel())
torchvision_target = TARGETS.register


@torchvision_target(TargetKind.MASK)
class TorchvisionMasks:
    """Masks: ``(1, H, W)`` uint8 class ids moved by each op's own kernel, sampled nearest-neighbour,
    ``ignore_index`` where nothing maps; a batch is ``(B, H, W)`` int64."""

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> torch.Tensor:
        """``(1, H, W)`` uint8 class ids, checked against the image's ``size``."""
        try:
            data = source.read_mask(index).tobytes()
            problem = packed_problem(data) if in_pack(source) else ""  # what DALI's reader could not read
            if problem:
                raise DecodeError(path, f"mask {problem}")
            mask = decode_mask(data)
        except (OSError, ValueError, SyntaxError) as err:  # UnreadableFile is a ValueError
            raise DecodeError(path, mask_reason(source, index, err)) from err
        problem = size_problem(mask.shape, size)
        if problem:
            raise DecodeError(path, problem)
        return torch.from_numpy(mask.copy())[None]

    def move(self, state: torch.Tensor, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> torch.Tensor:
        return kernel(state, fill=spec.ignore_index, nearest=True)

    def finish(self, state: torch.Tensor, spec: PipelineSpec) -> torch.Tensor:
        return state[0]

    def stack(self, parts: Sequence[torch.Tensor | None], spec: PipelineSpec) -> torch.Tensor:
        h, w = spec.size
        return torch.stack(
            [p if p is not None else torch.full((h, w), spec.ignore_index, dtype=torch.uint8) for p in parts]
        )

    def replace(self, part: torch.Tensor, row: int, value: torch.Tensor) -> torch.Tensor:
        part[row] = value
        return part

    def complete(self, part: torch.Tensor, source: Source, indices: Indices, content_sizes: np.ndarray) -> torch.Tensor:
        return part.long()


@torchvision_target(TargetKind.BOXES)
class TorchvisionBoxes:
    """Boxes: moved in numpy by each op's ``affine`` map and clipped, sanitized when finished, padded per
    batch (``{"boxes", "labels", "image_sizes"}``)."""

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> BoxState:
        boxes, labels = source.target.read(source, index)
        return boxes.copy(), boxes.copy(), labels

    def move(self, state: BoxState, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> BoxState:
        boxes, raw, labels = state
        if op.drops_boxes_by_centre:
            outside = ~bx.centered_in(boxes, np.array(crop_window(params), np.float64))
            boxes, raw = np.where(outside[:, None], 0.0, boxes), np.where(outside[:, None], 0.0, raw)
        affine = np.asarray(params["affine"], np.float64)
        h, w = (float(v) for v in params["size"])
        return bx.clip(bx.apply(affine, boxes), h, w), bx.apply(affine, raw), labels

    def finish(self, state: BoxState, spec: PipelineSpec) -> tuple[torch.Tensor, torch.Tensor]:
        boxes, raw, labels = state
        keep = per_sample(spec.sanitize, boxes, raw)  # SanitizeBoxes' step (gpupipe.loading.batchsteps)
        return torch.from_numpy(boxes[keep].astype(np.float32)), torch.from_numpy(labels[keep])

    def stack(self, parts: Sequence[tuple[torch.Tensor, torch.Tensor] | None], spec: PipelineSpec):
        empty = (torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64))
        rows = [p if p is not None else empty for p in parts]
        return pad([b for b, _ in rows], [lbl for _, lbl in rows])

    def replace(self, part: dict[str, torch.Tensor], row: int, value: Any) -> dict[str, torch.Tensor]:
        rows = unpad(part)
        rows[row] = value
        return pad([b for b, _ in rows], [lbl for _, lbl in rows])

    def complete(
        self, part: dict[str, torch.Tensor], source: Source, indices: Indices, content_sizes: np.ndarray
    ) -> dict[str, torch.Tensor]:
        return {**part, "image_sizes": torch.from_numpy(np.asarray(content_sizes, np.int64))}


__all__ = ["TARGETS", "TorchvisionTarget", "ImageLevel", "torchvision_target"]
