"""The DALI target lowering: how each kind of target that moves with the pixels rides the DALI graph.

One class per kind, registered in ``TARGETS`` with ``@dali_target(kind)``. A lowering
feeds the target through ``external_source`` (``feed``: per output, per sample, arrays),
starts its state in the graph (``start``: from what was fed, or what the reader read with
the image), moves it with each geometric op (``move``: the op's pixel ``kernel`` and its
planned parameters as nodes), gives the graph outputs that carry it (``outputs``) and
turns those into the batch's targets (``collect``). Image-level kinds need none: the
backend looks their batches up on the host (``Target.batch``). A kind that moves with the
pixels and has no lowering here is refused by name (``NoTargetLowering``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from nvidia.dali import fn, types
from nvidia.dali import math as dmath

from ...fileio import UnreadableFile
from ...targets import TargetKind
from ...targets.base import Indices, Kernel, Params
from ...targets.boxes import BOX_PADDING, PADDING_LABEL, BoxState, compact, crop_window, visible_share
from ...targets.maskfiles import decode_mask, mask_for_dali, mask_hw, packed_problem, size_problem
from ...targets.masks import in_pack, mask_reason
from ..common import TargetLowerings

if TYPE_CHECKING:
    from ...plan.spec import PipelineSpec
    from ...sources import Source


class DaliTarget(Protocol):
    """A kind's DALI lowering.

    Attributes:
        feeds: the number of ``external_source`` outputs ``feed`` gives (0: nothing fed).
    """

    feeds: int

    def feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        """Per ``feeds`` output, per sample, the arrays ``external_source`` gives.

        ``strict``: an unreadable file raises (the probe names it) instead of feeding nothing.
        """
        ...

    def start(self, inputs: list[Any], *, gpu: bool) -> Any:
        """The graph's state of the target from its inputs (fed, or read by the reader)."""
        ...

    def move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        """``state`` after op ``op``; ``params[name]`` are the op's planned parameters as nodes."""
        ...

    def outputs(self, state: Any, spec: PipelineSpec) -> list[Any]:
        """The graph outputs that carry the target (after the images)."""
        ...

    def collect(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> Any:
        """The batch's targets from the outputs of ``outputs`` (``count`` real samples)."""
        ...


class ImageLevel:
    """Image-level kinds: nothing in the graph (the backend looks the batch up on the host)."""

    feeds = 0

    def feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        return []

    def start(self, inputs: list[Any], *, gpu: bool) -> None:
        return None

    def move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        return state

    def outputs(self, state: Any, spec: PipelineSpec) -> list[Any]:
        return []

    def collect(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> Any:
        raise NotImplementedError("image-level targets are batched on the host")


#: target kind -> its DALI lowering (one table for ``dali`` and ``dali-cpu``).
TARGETS: TargetLowerings[DaliTarget] = TargetLowerings("dali", ImageLevel())
dali_target = TARGETS.register


@dali_target(TargetKind.MASK)
class DaliMasks:
    """Masks: fed as 8-bit gray PNGs of their class ids (or read by the reader), decoded in the graph,
    moved by each op's own kernel sampled nearest-neighbour, ``ignore_index`` where nothing maps."""

    feeds = 1

    def feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        """The encoded masks (``maskfiles.mask_for_dali``: DALI would give a palette's colours and
        scale low bit depths). A file that cannot be read or whose values cannot be kept gives no
        bytes (the decoder fails and the probe names the file and the reason) unless ``strict``."""
        return [[_encoded_mask(source, int(i), strict) for i in indices]]

    def start(self, inputs: list[Any], *, gpu: bool) -> Any:
        mask = fn.decoders.image(inputs[0], device="cpu", output_type=types.ANY_DATA)
        return mask.gpu() if gpu else mask

    def move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        return kernel(state, fill=spec.ignore_index, nearest=True)

    def outputs(self, state: Any, spec: PipelineSpec) -> list[Any]:
        return [state]

    def collect(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> torch.Tensor:
        return outputs[0][:count, :, :, 0].long()


def _encoded_mask(source: Source, index: int, strict: bool) -> np.ndarray:
    """Sample ``index``'s mask as DALI decodes it (empty: unreadable, not of its image's size, or a pack's
    member that is not an 8-bit gray PNG, unless ``strict``; DALI's graph would stretch it over the image,
    or read colours or scaled values). ``strict`` (the probe, after DALI's decoder failed): the mask is
    decoded here too, so that a mask DALI cannot decode is named as the mask, not as its image."""
    try:
        stored = source.read_mask(index).tobytes()
        problem = packed_problem(stored) if in_pack(source) else ""
        if problem:
            raise UnreadableFile(f"mask {problem}")
        data = mask_for_dali(stored)
        if strict:
            decode_mask(stored)
        hw = mask_hw(lambda offset, count: data[offset : offset + count], len(data))
        problem = size_problem(hw, source.sizes()[index]) if hw is not None else ""
        if problem:
            raise UnreadableFile(problem)
    except UnreadableFile as err:
        if strict:
            reason = err.reason if err.reason.startswith("mask") else mask_reason(source, index, err)
            raise UnreadableFile(reason) from None
        return np.zeros(0, np.uint8)
    except (OSError, ValueError, SyntaxError) as err:
        if strict:
            raise UnreadableFile(mask_reason(source, index, err)) from None
        return np.zeros(0, np.uint8)
    return np.frombuffer(data, np.uint8)


@dali_target(TargetKind.BOXES)
class DaliBoxes:
    """Boxes: fed with their labels, moved by each op's affine map as DALI operators (the same
    arithmetic as the torchvision backend's), padded per batch; boxes that do not survive get
    ``PADDING_LABEL`` and zero coordinates."""

    feeds = 2

    def feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        read = [source.target.read(source, int(i)) for i in indices]
        return [[boxes for boxes, _ in read], [labels.astype(np.int32) for _, labels in read]]

    def start(self, inputs: list[Any], *, gpu: bool) -> BoxState:
        return inputs[0], inputs[0], inputs[1]  # boxes stay on the CPU (a few numbers per image)

    def move(self, state: BoxState, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> BoxState:
        boxes, raw, labels = state
        if op.drops_boxes_by_centre:
            left, top, right, bottom = (fn.cast(v, dtype=types.FLOAT) for v in crop_window(params))
            cx = (boxes[:, 0] + boxes[:, 2]) * 0.5
            cy = (boxes[:, 1] + boxes[:, 3]) * 0.5
            inside = fn.cast((cx > left) & (cx < right) & (cy > top) & (cy < bottom), dtype=types.FLOAT)
            keep = fn.stack(inside, inside, inside, inside, axis=1)
            boxes, raw = boxes * keep, raw * keep
        h, w = params["size"][0], params["size"][1]
        limit = fn.cast(fn.stack(w, h, w, h), dtype=types.FLOAT)
        moved = _affine(boxes, params["affine"])
        return dmath.min(dmath.max(moved, 0.0), limit), _affine(raw, params["affine"]), labels

    def outputs(self, state: BoxState, spec: PipelineSpec) -> list[Any]:
        """Padded boxes and labels; boxes that do not survive get label -1 and zero coordinates."""
        boxes, raw, labels = state
        rule = spec.sanitize
        w = boxes[:, 2] - boxes[:, 0]
        h = boxes[:, 3] - boxes[:, 1]
        keep = (w >= max(rule.min_size, 1e-6)) & (h >= max(rule.min_size, 1e-6))
        if rule.min_visible > 0:
            raw_area = (raw[:, 2] - raw[:, 0]) * (raw[:, 3] - raw[:, 1])
            keep = keep & (w * h >= dmath.max(raw_area, 1e-12) * visible_share(rule.min_visible))
        kept = fn.cast(keep, dtype=types.INT32)
        labels = labels * kept + (kept - 1)  # PADDING_LABEL where dropped
        boxes = boxes * fn.cast(fn.stack(kept, kept, kept, kept, axis=1), dtype=types.FLOAT)
        return [fn.pad(boxes, axes=[0], fill_value=BOX_PADDING), fn.pad(labels, axes=[0], fill_value=PADDING_LABEL)]

    def collect(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> dict[str, torch.Tensor]:
        boxes, labels = compact(outputs[0][:count], outputs[1][:count].long())
        return {"boxes": boxes, "labels": labels, "image_sizes": torch.from_numpy(content_sizes[:count])}


def _affine(boxes, affine):
    """DALI nodes: the boxes enclosing each box's corners moved by ``affine`` (``(2, 3)`` per sample)."""
    x0, y0, x1, y1 = (boxes[:, k] for k in range(4))
    corners = fn.stack(
        fn.stack(x0, y0, axis=1), fn.stack(x1, y0, axis=1), fn.stack(x0, y1, axis=1), fn.stack(x1, y1, axis=1), axis=1
    )
    moved = fn.reshape(fn.coord_transform(fn.reshape(corners, shape=[-1, 2]), MT=affine), shape=[-1, 4, 2])
    # (N, 4) even where every sample of the batch has N = 0 (the reductions then lose the box axis's width)
    return fn.reshape(fn.cat(fn.reductions.min(moved, axes=1), fn.reductions.max(moved, axes=1), axis=1), shape=[-1, 4])


__all__ = ["TARGETS", "DaliTarget", "ImageLevel", "dali_target"]
