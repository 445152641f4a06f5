"""Detection boxes: ``(N, 4)`` xyxy boxes and ``(N,)`` labels per image; a batch pads them.

A batch is ``{"boxes": (B, N, 4) float32, "labels": (B, N) int64, "image_sizes": (B, 2) int64}``:
row ``b`` holds its boxes first, then padding rows (box ``BOX_PADDING``, label
``PADDING_LABEL``) up to the batch's largest count.

Boxes move by each geometric op's planned ``affine`` map (the enclosing box of
the four moved corners), are clipped to the new image after every op, and
survive the pipeline by [`SanitizeBoxes`][gpupipe.ops.SanitizeBoxes]: wide and tall
enough, and visible enough (moved but never clipped, ``raw``, gives the share
in view). An op that drops boxes by their centre (``RandomIoUCrop``) empties
those first. The same arithmetic runs in numpy (torchvision backend) and as
DALI operators.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from . import boxmath as bx
from .base import Indices, Kernel, Params, Target, check_label_rows, is_int, json_member_problem
from .kinds import TargetKind

if TYPE_CHECKING:
    from ..plan.spec import PipelineSpec
    from ..sources import Source

#: The box value of padding rows in a detection batch.
BOX_PADDING = 0.0
#: The label of padding rows (and of boxes that did not survive).
PADDING_LABEL = -1

#: One sample's boxes on their way through the ops: ``(boxes, raw, labels)``.
BoxState = tuple[Any, Any, Any]


def pad(boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-sample boxes and labels, padded to the batch's largest count.

    Returns:
        ``{"boxes": (B, N, 4) float32, "labels": (B, N) int64}``.
    """
    count = max((len(b) for b in boxes), default=0)
    out_boxes = torch.full((len(boxes), count, 4), BOX_PADDING, dtype=torch.float32)
    out_labels = torch.full((len(boxes), count), PADDING_LABEL, dtype=torch.int64)
    for row, (b, lbl) in enumerate(zip(boxes, labels)):
        out_boxes[row, : len(b)] = b
        out_labels[row, : len(lbl)] = lbl
    return {"boxes": out_boxes, "labels": out_labels}


def unpad(batch: dict[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each row's real ``(boxes (n, 4), labels (n,))``, padding removed."""
    keep = batch["labels"] != PADDING_LABEL
    return [(batch["boxes"][row][keep[row]], batch["labels"][row][keep[row]]) for row in range(len(keep))]


def compact(boxes: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Puts each row's surviving boxes first and drops trailing all-padding columns."""
    valid = labels != PADDING_LABEL
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    labels = torch.gather(labels, 1, order)
    boxes = torch.gather(boxes, 1, order[..., None].expand(-1, -1, 4))
    count = int(valid.sum(dim=1).max()) if labels.numel() else 0
    return boxes[:, :count].contiguous(), labels[:, :count].contiguous()


def sanitize(clipped: np.ndarray, raw: np.ndarray, spec: PipelineSpec) -> np.ndarray:
    """``(N,)`` the boxes that survive: wide and tall enough, and visible enough."""
    rule = spec.sanitize
    w = clipped[:, 2] - clipped[:, 0]
    h = clipped[:, 3] - clipped[:, 1]
    keep = (w >= rule.min_size) & (h >= rule.min_size) & (w > 0) & (h > 0)
    if rule.min_visible > 0:
        keep &= bx.area(clipped) >= rule.min_visible * np.maximum(bx.area(raw), 1e-12)
    return keep


def _window(params: Params) -> tuple[Any, Any, Any, Any]:
    """``(left, top, right, bottom)`` of a crop op's window."""
    top, left = params["top"], params["left"]
    return left, top, left + params["width"], top + params["height"]


class Boxes(Target):
    """Boxes and their labels, from the source's ``boxes_of()``."""

    kind = TargetKind.BOXES
    moves_with_pixels = True
    member = "json"
    manifest_fields = ("boxes", "box_labels")
    dali_feeds = 2
    sources = "a detection source: CocoDetection, or a pack of one"

    def read(self, source: Source, index: int) -> tuple[np.ndarray, np.ndarray]:
        boxes, labels = source.boxes_of(index)
        return np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64)

    def check(self, source: Source, what: str) -> None:
        rows = [self.read(source, i)[1] for i in range(len(source))]
        check_label_rows(rows, len(source.classes), what, source.names)

    def planning_boxes(self, source: Source, indices: Indices) -> list[np.ndarray]:
        return [self.read(source, int(i))[0] for i in indices]

    # -- torchvision (numpy) ------------------------------------------------------------------

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> BoxState:
        boxes, labels = self.read(source, index)
        return boxes.copy(), boxes.copy(), labels

    def move(self, state: BoxState, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> BoxState:
        boxes, raw, labels = state
        if op.drops_boxes_by_centre:
            outside = ~bx.centered_in(boxes, np.array(_window(params), np.float64))
            boxes, raw = np.where(outside[:, None], 0.0, boxes), np.where(outside[:, None], 0.0, raw)
        affine = np.asarray(params["affine"], np.float64)
        h, w = (float(v) for v in params["size"])
        return bx.clip(bx.apply(affine, boxes), h, w), bx.apply(affine, raw), labels

    def finish(self, state: BoxState, spec: PipelineSpec) -> tuple[torch.Tensor, torch.Tensor]:
        boxes, raw, labels = state
        keep = sanitize(boxes, raw, spec)
        return torch.from_numpy(boxes[keep].astype(np.float32)), torch.from_numpy(labels[keep])

    def stack(self, parts: Sequence[tuple[torch.Tensor, torch.Tensor] | None], spec) -> dict[str, torch.Tensor]:
        empty = (torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64))
        rows = [p if p is not None else empty for p in parts]
        return pad([b for b, _ in rows], [lbl for _, lbl in rows])

    def replace(self, part: dict[str, torch.Tensor], row: int, value) -> dict[str, torch.Tensor]:
        rows = unpad(part)
        rows[row] = value
        return pad([b for b, _ in rows], [lbl for _, lbl in rows])

    def complete(
        self, part: dict[str, torch.Tensor], source: Source, indices: Indices, content_sizes: np.ndarray
    ) -> dict[str, torch.Tensor]:
        return {**part, "image_sizes": torch.from_numpy(np.asarray(content_sizes, np.int64))}

    # -- DALI ---------------------------------------------------------------------------------

    def dali_feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        read = [self.read(source, int(i)) for i in indices]
        return [[boxes for boxes, _ in read], [labels.astype(np.int32) for _, labels in read]]

    def dali_start(self, inputs: list[Any], *, gpu: bool) -> BoxState:
        return inputs[0], inputs[0], inputs[1]  # boxes stay on the CPU (a few numbers per image)

    def dali_move(self, state: BoxState, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> BoxState:
        from nvidia.dali import fn, types
        from nvidia.dali import math as dmath

        boxes, raw, labels = state
        if op.drops_boxes_by_centre:
            left, top, right, bottom = (fn.cast(v, dtype=types.FLOAT) for v in _window(params))
            cx = (boxes[:, 0] + boxes[:, 2]) * 0.5
            cy = (boxes[:, 1] + boxes[:, 3]) * 0.5
            inside = fn.cast((cx > left) & (cx < right) & (cy > top) & (cy < bottom), dtype=types.FLOAT)
            keep = fn.stack(inside, inside, inside, inside, axis=1)
            boxes, raw = boxes * keep, raw * keep
        h, w = params["size"][0], params["size"][1]
        limit = fn.cast(fn.stack(w, h, w, h), dtype=types.FLOAT)
        moved = _dali_affine(boxes, params["affine"])
        return dmath.min(dmath.max(moved, 0.0), limit), _dali_affine(raw, params["affine"]), labels

    def dali_outputs(self, state: BoxState, spec: PipelineSpec) -> list[Any]:
        """Padded boxes and labels; boxes that do not survive get label -1 and zero coordinates."""
        from nvidia.dali import fn, types
        from nvidia.dali import math as dmath

        boxes, raw, labels = state
        rule = spec.sanitize
        w = boxes[:, 2] - boxes[:, 0]
        h = boxes[:, 3] - boxes[:, 1]
        keep = (w >= max(rule.min_size, 1e-6)) & (h >= max(rule.min_size, 1e-6))
        if rule.min_visible > 0:
            raw_area = (raw[:, 2] - raw[:, 0]) * (raw[:, 3] - raw[:, 1])
            keep = keep & (w * h >= dmath.max(raw_area, 1e-12) * rule.min_visible)
        kept = fn.cast(keep, dtype=types.INT32)
        labels = labels * kept + (kept - 1)  # PADDING_LABEL where dropped
        boxes = boxes * fn.cast(fn.stack(kept, kept, kept, kept, axis=1), dtype=types.FLOAT)
        return [fn.pad(boxes, axes=[0], fill_value=BOX_PADDING), fn.pad(labels, axes=[0], fill_value=PADDING_LABEL)]

    def from_dali(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> dict[str, torch.Tensor]:
        boxes, labels = compact(outputs[0][:count], outputs[1][:count].long())
        return {"boxes": boxes, "labels": labels, "image_sizes": torch.from_numpy(content_sizes[:count])}

    # -- packing ------------------------------------------------------------------------------

    def pack(self, value: Any, before: tuple[int, int], after: tuple[int, int], settings: Any):
        """The boxes scaled from the image as read to the image as packed (``(w, h)`` each)."""
        boxes, labels = value
        scale = np.array([after[0] / before[0], after[1] / before[1]] * 2, np.float64)
        scaled = (np.asarray(boxes, np.float64).reshape(-1, 4) * scale).round(3).tolist()
        labels = [int(v) for v in labels]
        return json.dumps({"boxes": scaled, "labels": labels}).encode(), (scaled, labels)

    def describe(self, value: Any) -> str:
        return f"{len(value[1])} boxes"

    def manifest_rows(self, values: Sequence[Any]) -> dict[str, list]:
        return {"boxes": [v[0] for v in values], "box_labels": [v[1] for v in values]}

    def rows_problem(self, shard: dict, count: int) -> tuple[str, Any, str] | None:
        rows, labels = shard.get("boxes"), shard.get("box_labels")
        if not (isinstance(rows, list) and len(rows) == count and isinstance(labels, list) and len(labels) == count):
            return "boxes", rows, f"{count} box lists with {count} label lists"
        for r, lbl in zip(rows, labels):
            if not (
                isinstance(r, list)
                and isinstance(lbl, list)
                and len(r) == len(lbl)
                and all(
                    isinstance(b, list)
                    and len(b) == 4
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in b)
                    for b in r
                )
                and all(is_int(v) for v in lbl)
            ):
                return "boxes", r, "[x0, y0, x1, y1] boxes, one int label each"
        return None

    def member_problem(self, read: Callable[[], bytes], shard: dict, number: int) -> str:
        return json_member_problem(read(), {"boxes": shard["boxes"][number], "labels": shard["box_labels"][number]})

    def unpack(self, shard: dict, count: int) -> dict[str, list]:
        return {
            "boxes": [np.asarray(b, np.float32).reshape(-1, 4) for b in shard["boxes"]],
            "box_labels": [np.asarray(lbl, np.int64) for lbl in shard["box_labels"]],
        }


def _dali_affine(boxes, affine):
    """DALI nodes: the boxes enclosing each box's corners moved by ``affine`` (``(2, 3)`` per sample)."""
    from nvidia.dali import fn

    x0, y0, x1, y1 = (boxes[:, k] for k in range(4))
    corners = fn.stack(
        fn.stack(x0, y0, axis=1), fn.stack(x1, y0, axis=1), fn.stack(x0, y1, axis=1), fn.stack(x1, y1, axis=1), axis=1
    )
    moved = fn.reshape(fn.coord_transform(fn.reshape(corners, shape=[-1, 2]), MT=affine), shape=[-1, 4, 2])
    # (N, 4) even where every sample of the batch has N = 0 (the reductions then lose the box axis's width)
    return fn.reshape(fn.cat(fn.reductions.min(moved, axes=1), fn.reductions.max(moved, axes=1), axis=1), shape=[-1, 4])
