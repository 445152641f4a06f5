"""Box geometry in numpy: boxes moved by an affine map, clipping, areas, IoU.

Coordinates are continuous pixel coordinates (pixel ``(i, j)`` covers
``[j, j + 1) x [i, i + 1)``), boxes are ``(N, 4)`` float32 ``xyxy``. Every
geometric op moves points by an affine map ``(2, 3)`` (``gpupipe.plan.affine``);
a box becomes the box enclosing its four moved corners, clipped to the new image.
"""

from __future__ import annotations

import numpy as np


def corners(boxes: np.ndarray) -> np.ndarray:
    """``(N, 4, 2)``: the four corners of each ``xyxy`` box."""
    x0, y0, x1, y1 = (boxes[:, k] for k in range(4))
    return np.stack(
        [np.stack([x0, y0], -1), np.stack([x1, y0], -1), np.stack([x0, y1], -1), np.stack([x1, y1], -1)], axis=1
    )


def apply(affine: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The boxes enclosing each box's corners moved by one ``(2, 3)`` map (not clipped)."""
    if len(boxes) == 0:
        return boxes.astype(np.float32)
    pts = corners(boxes.astype(np.float64)) @ affine[:, :2].T + affine[:, 2]
    return np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1).astype(np.float32)


def clip(boxes: np.ndarray, height: float, width: float) -> np.ndarray:
    """Boxes clipped to ``[0, width] x [0, height]``."""
    return np.clip(boxes, 0.0, [width, height, width, height]).astype(np.float32)


def area(boxes: np.ndarray) -> np.ndarray:
    return np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)


def iou(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
    """IoU of each box with one ``xyxy`` window."""
    x0 = np.maximum(boxes[:, 0], window[0])
    y0 = np.maximum(boxes[:, 1], window[1])
    x1 = np.minimum(boxes[:, 2], window[2])
    y1 = np.minimum(boxes[:, 3], window[3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    union = area(boxes) + (window[2] - window[0]) * (window[3] - window[1]) - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def centered_in(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
    """``(N,)`` whether each box's centre lies strictly inside an ``xyxy`` window (the IoU crop's rule)."""
    cx = 0.5 * (boxes[:, 0] + boxes[:, 2])
    cy = 0.5 * (boxes[:, 1] + boxes[:, 3])
    return (window[0] < cx) & (cx < window[2]) & (window[1] < cy) & (cy < window[3])


def keep_centered(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
    """The boxes, with those whose centre is outside ``window`` made empty (dropped later)."""
    return np.where(centered_in(boxes, window)[:, None], boxes, 0.0).astype(np.float32)
