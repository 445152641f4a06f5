"""Box geometry in numpy: affine maps of pixel coordinates, clipping, IoU.

Coordinates are continuous pixel coordinates (pixel ``(i, j)`` covers
``[j, j + 1) x [i, i + 1)``), boxes are ``(N, 4)`` float32 ``xyxy``. Every
geometric op moves points by an affine map ``(2, 3)``; a box becomes the
box enclosing its four moved corners, clipped to the new image.
"""

from __future__ import annotations

import numpy as np


def translate(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """``(B, 2, 3)`` maps ``(x, y) -> (x + dx, y + dy)``."""
    out = np.zeros((len(dx), 2, 3), np.float64)
    out[:, 0, 0] = out[:, 1, 1] = 1.0
    out[:, 0, 2], out[:, 1, 2] = dx, dy
    return out


def crop_resize(top, left, height, width, out_h, out_w) -> np.ndarray:
    """The map of cropping a window ``(top, left, height, width)`` and resizing it to ``(out_h, out_w)``."""
    sx = np.asarray(out_w, np.float64) / np.asarray(width, np.float64)
    sy = np.asarray(out_h, np.float64) / np.asarray(height, np.float64)
    out = np.zeros((len(sx), 2, 3), np.float64)
    out[:, 0, 0], out[:, 1, 1] = sx, sy
    out[:, 0, 2], out[:, 1, 2] = -np.asarray(left) * sx, -np.asarray(top) * sy
    return out


def hflip(flags: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """``x -> W - x`` where ``flags``, identity elsewhere."""
    flags = np.asarray(flags, bool)
    out = translate(np.where(flags, widths, 0.0), np.zeros(len(flags)))
    out[:, 0, 0] = np.where(flags, -1.0, 1.0)
    return out


def rotation(degrees: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Counter-clockwise rotation (as shown, y pointing down) about the image centre, size kept."""
    theta = np.radians(np.asarray(degrees, np.float64))
    cos, sin = np.cos(theta), np.sin(theta)
    cx, cy = np.asarray(widths) / 2.0, np.asarray(heights) / 2.0
    out = np.zeros((len(theta), 2, 3), np.float64)
    out[:, 0, 0], out[:, 0, 1] = cos, sin
    out[:, 1, 0], out[:, 1, 1] = -sin, cos
    out[:, 0, 2] = cx - cos * cx - sin * cy
    out[:, 1, 2] = cy + sin * cx - cos * cy
    return out


def corners(boxes: np.ndarray) -> np.ndarray:
    """``(N, 4, 2)``: the four corners of each ``xyxy`` box."""
    x0, y0, x1, y1 = (boxes[:, k] for k in range(4))
    return np.stack([np.stack([x0, y0], -1), np.stack([x1, y0], -1),
                     np.stack([x0, y1], -1), np.stack([x1, y1], -1)], axis=1)


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
