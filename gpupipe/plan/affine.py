"""The affine maps geometric ops move pixel coordinates by: ``(B, 2, 3)`` per batch.

Coordinates are continuous pixel coordinates (pixel ``(i, j)`` covers
``[j, j + 1) x [i, i + 1)``). Each geometric op's planner returns its map
as the ``affine`` parameter; targets made of points (boxes) are moved by it
on every backend (``gpupipe.targets.boxes``).
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


def vflip(flags: np.ndarray, heights: np.ndarray) -> np.ndarray:
    """``y -> H - y`` where ``flags``, identity elsewhere."""
    flags = np.asarray(flags, bool)
    out = translate(np.zeros(len(flags)), np.where(flags, heights, 0.0))
    out[:, 1, 1] = np.where(flags, -1.0, 1.0)
    return out


def torchvision_affine(angle, tx, ty, scale, shear_x, shear_y, cx, cy) -> np.ndarray:
    """``(B, 2, 3)``: the forward map of ``v2.functional.affine`` (its ``_get_inverse_affine_matrix`` with
    ``inverted=False``): turn ``angle`` degrees clockwise, scale and shear (degrees) about ``(cx, cy)``,
    then shift by ``(tx, ty)``."""
    rot = np.radians(np.asarray(angle, np.float64))
    sx, sy = np.radians(np.asarray(shear_x, np.float64)), np.radians(np.asarray(shear_y, np.float64))
    a = np.cos(rot - sy) / np.cos(sy)
    b = -(a * np.tan(sx) + np.sin(rot))
    c = np.sin(rot - sy) / np.cos(sy)
    d = np.cos(rot) - c * np.tan(sx)
    scale = np.asarray(scale, np.float64)
    out = np.zeros((len(rot), 2, 3), np.float64)
    out[:, 0, 0], out[:, 0, 1], out[:, 1, 0], out[:, 1, 1] = a * scale, b * scale, c * scale, d * scale
    out[:, 0, 2] = cx + tx - out[:, 0, 0] * cx - out[:, 0, 1] * cy
    out[:, 1, 2] = cy + ty - out[:, 1, 0] * cx - out[:, 1, 1] * cy
    return out
