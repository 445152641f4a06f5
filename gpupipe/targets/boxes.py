"""Detection boxes: ``(N, 4)`` xyxy boxes and ``(N,)`` labels per image; a batch pads them.

A batch is ``{"boxes": (B, N, 4) float32, "labels": (B, N) int64, "image_sizes": (B, 2) int64}``:
row ``b`` holds its boxes first, then padding rows (box ``BOX_PADDING``, label
``PADDING_LABEL``) up to the batch's largest count.

Boxes move by each geometric op's planned ``affine`` map (the enclosing box of
the four moved corners), are clipped to the new image after every op, and
survive the pipeline by [`SanitizeBoxes`][gpupipe.ops.SanitizeBoxes]: wide and tall
enough, and visible enough (moved but never clipped, ``raw``, gives the share
in view). An op that drops boxes by their centre (``RandomIoUCrop``) empties
those first. The same arithmetic runs in numpy (the torchvision backend's
``backends/torchvision/targets.py``) and as DALI operators (``backends/dali/targets.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import is_int
from . import boxmath as bx
from .base import Indices, Params, SampleSource, Target, check_label_rows, json_member_problem
from .kinds import TargetKind

if TYPE_CHECKING:
    import torch

#: The box value of padding rows in a detection batch.
BOX_PADDING = 0.0
#: The label of padding rows (and of boxes that did not survive).
PADDING_LABEL = -1

#: The relative slack of ``min_visible``: a box exactly that share in view (6 of 10 px at 0.6, whose
#: product ``0.6 * 10`` is ``6.000000000000001`` in floats) is kept, on every backend.
VISIBLE_SLACK = 1e-6

#: One sample's boxes on their way through the ops: ``(boxes, raw, labels)``.
BoxState = tuple[Any, Any, Any]


def pad(boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-sample boxes and labels, padded to the batch's largest count.

    Returns:
        ``{"boxes": (B, N, 4) float32, "labels": (B, N) int64}``.
    """
    import torch

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
    import torch

    valid = labels != PADDING_LABEL
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    labels = torch.gather(labels, 1, order)
    boxes = torch.gather(boxes, 1, order[..., None].expand(-1, -1, 4))
    count = int(valid.sum(dim=1).max()) if labels.numel() else 0
    return boxes[:, :count].contiguous(), labels[:, :count].contiguous()


def sanitize(clipped: np.ndarray, raw: np.ndarray, min_size: float, min_visible: float) -> np.ndarray:
    """``(N,)`` the boxes that survive: at least ``min_size`` wide and tall, and at least ``min_visible``
    of their moved area (``raw``, never clipped) in view (``SanitizeBoxes``' rule)."""
    w = clipped[:, 2] - clipped[:, 0]
    h = clipped[:, 3] - clipped[:, 1]
    keep = (w >= min_size) & (h >= min_size) & (w > 0) & (h > 0)
    if min_visible > 0:
        keep &= bx.area(clipped) >= visible_share(min_visible) * np.maximum(bx.area(raw), 1e-12)
    return keep


def visible_share(min_visible: float) -> float:
    """The share of a box's moved area that must stay in view: ``min_visible`` less ``VISIBLE_SLACK`` of it."""
    return min_visible * (1.0 - VISIBLE_SLACK)


def crop_window(params: Params) -> tuple[Any, Any, Any, Any]:
    """``(left, top, right, bottom)`` of a crop op's window (numbers, or a backend's graph nodes)."""
    top, left = params["top"], params["left"]
    return left, top, left + params["width"], top + params["height"]


class Boxes(Target):
    """Boxes and their labels, from the source's ``boxes_of()``."""

    kind = TargetKind.BOXES
    moves_with_pixels = True
    member = "json"
    manifest_fields = ("boxes", "box_labels")
    sources = "a detection source: CocoDetection, or a pack of one"

    def read(self, source: SampleSource, index: int) -> tuple[np.ndarray, np.ndarray]:
        boxes, labels = source.boxes_of(index)
        return np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64)

    def check(self, source: SampleSource, what: str) -> None:
        rows = [self.read(source, i)[1] for i in range(len(source))]
        check_label_rows(rows, len(source.classes), what, source.names)

    def planning_boxes(self, source: SampleSource, indices: Indices) -> list[np.ndarray]:
        return [self.read(source, int(i))[0] for i in indices]

    # -- loader.dataset ---------------------------------------------------------------------------

    def listed(self, source: SampleSource, indices: Indices) -> list[Any]:
        """Each sample's ``{"boxes": (n, 4) float32 xyxy, "labels": (n,) int64}`` (``loader.dataset.targets``)."""
        return [self.item(source, int(i)) for i in indices]

    def item(self, source: SampleSource, index: int) -> dict[str, Any]:
        """The sample's target as ``loader.dataset[index]`` gives it: ``{"boxes": (n, 4) float32 xyxy in the
        image's pixels, "labels": (n,) int64}``, as torchvision's detection models take a target, and
        ``"image_id"`` (the COCO image id) where the source has ``image_ids`` (``CocoDetection``), as
        torchvision's ``wrap_dataset_for_transforms_v2(CocoDetection(...))`` gives it."""
        import torch

        boxes, labels = self.read(source, index)
        out: dict[str, Any] = {"boxes": torch.from_numpy(boxes.copy()), "labels": torch.from_numpy(labels.copy())}
        image_ids = getattr(source, "image_ids", None)
        if image_ids is not None:
            out["image_id"] = image_ids[index]
        return out

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
