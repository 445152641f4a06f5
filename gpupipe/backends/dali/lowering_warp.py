"""Nearest-neighbour warps (rotations, shears, turns) by the documented rule, in DALI's float64 arithmetic.

Output pixel ``(i, j)``'s centre ``(j + 0.5, i + 0.5)`` is moved back through the inverse of the op's map
(``v2.functional.affine``'s ``_get_inverse_affine_matrix``), and the source pixel it falls in is read; a
point on an edge, or within ``EDGE`` pixels before one, reads the pixel after it; outside the image:
``fill``. ``torchvision.lowering.warp_indices`` computes the same rule in torch's float64, so the two
backends read the same pixels (float64 rounding, ``1e-12`` px here, stays far below ``EDGE``). DALI's own
``warp_affine`` / ``rotate`` take the position in float32 and pick either side of an edge: a quarter turn
of a 12x13 mask (every pixel centre lands on an edge) read 242 of 312 pixels differently from
torchvision's ``grid_sample``.
"""

from __future__ import annotations

import math

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali import math as dmath

#: A source point this close before an edge (in pixels) counts as on it (``2 ** -20``).
EDGE = 2.0**-20
#: The longest side a mask warped or resized exactly may have: its index maps are cut from one ramp this long.
MAX_SIDE = 1 << 16

F64 = types.FLOAT64


def ramp(n):
    """``(n,)`` int32 ``0 .. n - 1`` (``n`` an int node, at most ``MAX_SIDE``), cut from one constant ramp."""
    return types.Constant(np.arange(MAX_SIDE, dtype=np.int32), device="cpu")[0:n]


def constant64(value: float):
    """``value`` as a float64 node, exactly (DALI makes float constants float32: three float32 pieces summed)."""
    total = None
    for _ in range(3):
        piece = np.float32(value)
        value -= float(piece)
        term = fn.cast(types.Constant(piece, device="cpu"), dtype=F64)
        total = term if total is None else total + term
    return total


def _radians(degrees):
    return fn.cast(degrees, dtype=F64) * constant64(math.pi / 180.0)


def inverse_coefficients(angle, shear_x=None, shear_y=None):
    """``(a, b, c, d)`` float64 nodes of torchvision's affine matrix for a clockwise ``angle`` and shears
    (float32 nodes, degrees); its inverse is ``[[d, -b], [-c, a]]`` (determinant 1)."""
    rot = _radians(angle)
    if shear_x is None:
        cos, sin = dmath.cos(rot), dmath.sin(rot)
        return cos, -sin, sin, cos
    sx, sy = _radians(shear_x), _radians(shear_y)
    a = dmath.cos(rot - sy) / dmath.cos(sy)
    b = -(a * dmath.tan(sx) + dmath.sin(rot))
    c = dmath.sin(rot - sy) / dmath.cos(sy)
    d = dmath.cos(rot) - c * dmath.tan(sx)
    return a, b, c, d


def warp_nearest(x, size, coefficients, *, fill, shift=None, scale=None, centre=None):
    """``x`` ``(H, W, C)`` (``size``: ``(h, w)`` int nodes) warped nearest-neighbour by the documented rule.

    Args:
        coefficients: ``inverse_coefficients``' ``(a, b, c, d)``.
        fill: the value where no source pixel maps.
        shift: ``(tx, ty)`` float nodes (``None``: none); scale: a float node (``None``: 1).
        centre: the ``(x, y)`` the map turns about (numbers; ``None``: the image's centre).

    Returns:
        ``(H, W, C)``, ``x``'s dtype.
    """
    h, w = size[0], size[1]
    hf, wf = fn.cast(h, dtype=F64), fn.cast(w, dtype=F64)
    cx, cy = (wf * 0.5, hf * 0.5) if centre is None else (constant64(centre[0]), constant64(centre[1]))
    dy = fn.expand_dims(fn.cast(ramp(h), dtype=F64), axes=[1]) + 0.5 - cy  # (h, 1)
    dx = fn.expand_dims(fn.cast(ramp(w), dtype=F64), axes=[0]) + 0.5 - cx  # (1, w)
    if shift is not None:
        dx, dy = dx - fn.cast(shift[0], dtype=F64), dy - fn.cast(shift[1], dtype=F64)
    a, b, c, d = coefficients
    if scale is not None:
        s = fn.cast(scale, dtype=F64)
        a, b, c, d = a / s, b / s, c / s, d / s
    # One row and one column of terms, then one subtraction per pixel (the whole map costs few passes)
    col = fn.cast(dmath.floor((d * dx + cx + EDGE) - b * dy), dtype=types.INT32)  # (h, w)
    row = fn.cast(dmath.floor((a * dy + cy + EDGE) - c * dx), dtype=types.INT32)
    inside = (row >= 0) & (row < h) & (col >= 0) & (col < w)
    flat = (row * (w + 1) + col) * inside + (h * (w + 1) + w) * (inside ^ True)  # outside: the fill's corner
    fill = list(fill) if isinstance(fill, tuple) else fill
    padded = fn.slice(
        x, fn.stack(0, 0), fn.stack(h + 1, w + 1), axis_names="HW", out_of_bounds_policy="pad", fill_values=fill
    )
    frames = fn.reshape(padded, shape=fn.stack((h + 1) * (w + 1), 1, -1), layout="FWC")
    picked = fn.sequence_rearrange(frames, new_order=fn.reshape(fn.cast(flat, dtype=types.INT32), shape=[-1]))
    return fn.reshape(picked, shape=fn.stack(h, w, -1), layout="HWC")


__all__ = ["EDGE", "MAX_SIDE", "constant64", "inverse_coefficients", "ramp", "warp_nearest"]
