"""Hue (and brightness, contrast, saturation and grayscale) as torchvision computes them, in DALI's
arithmetic operators.

Brightness, contrast and saturation blend in float and truncate to uint8 after each step, as
``adjust_brightness`` / ``adjust_contrast`` / ``adjust_saturation`` do for a uint8 tensor (gray: ITU-R 601
luma ``0.2989 r + 0.587 g + 0.114 b``, floored); DALI's ``hsv`` (YIQ) and ``color_space_conversion`` (rounded)
and a rounding cast gave up to 2 levels of 255 apart, every pixel 1 level apart at contrast 0.

DALI's ``hsv`` operator turns hue in YIQ space: a rotation of the chroma plane, which departs from
torchvision's ``adjust_hue`` (a shift of the HSV hue) as the angle grows: on ``dali-cpu`` a fixed hue of 0.2
gave 27.5 levels of 255 from torchvision on average, 124 at most. Here each pixel goes to HSV, its hue moves
by the sample's factor and it comes back, with ``adjust_hue_image``'s formulas for a uint8 tensor (float in
``[0, 1]``, truncated to uint8 by ``x * 255.999`` at the end), so the two backends agree to float rounding.
"""

from __future__ import annotations

from nvidia.dali import fn, types
from nvidia.dali import math as dmath


def _float(mask):
    return fn.cast(mask, dtype=types.FLOAT)


def _luma(x):
    """``(H, W, 1)`` float gray of float ``x`` ``(H, W, 3)``, floored (torchvision's uint8 gray)."""
    return dmath.floor(x[:, :, 0:1] * 0.2989 + x[:, :, 1:2] * 0.587 + x[:, :, 2:3] * 0.114)


def _truncated(x):
    return fn.cast(dmath.floor(dmath.clamp(x, 0.0, 255.0)), dtype=types.UINT8)


def scale_brightness(images, factor):
    """``adjust_brightness``: ``images`` uint8 times ``factor`` (per sample, on the images' device), truncated."""
    return _truncated(_float(images) * factor)


def blend_contrast(images, factor):
    """``adjust_contrast``: blended with the image's mean floored gray level, truncated."""
    x = _float(images)
    return _truncated(x * factor + fn.reductions.mean(_luma(x)) * (1.0 - factor))


def blend_saturation(images, factor):
    """``adjust_saturation``: blended with each pixel's floored gray level, truncated."""
    x = _float(images)
    return _truncated(x * factor + _luma(x) * (1.0 - factor))


def to_gray(images, on):
    """``rgb_to_grayscale(num_output_channels=3)`` where ``on`` (per sample, 0 or 1, on the images' device)."""
    x = _float(images)
    return fn.cast(x + (_luma(x) - x) * on, dtype=types.UINT8)


def shift_hue(images, hue):
    """``images`` uint8 ``(H, W, 3)`` per sample with their hue shifted by ``hue`` (a fraction of the circle,
    per sample, on the images' device), as ``torchvision.transforms.v2.functional.adjust_hue``."""
    x = fn.cast(images, dtype=types.FLOAT) * (1.0 / 255.0)
    r, g, b = x[:, :, 0], x[:, :, 1], x[:, :, 2]
    maxc = dmath.max(dmath.max(r, g), b)
    minc = dmath.min(dmath.min(r, g), b)
    flat = _float(maxc == minc)  # no hue: torchvision divides by 1 there
    spread = maxc - minc
    s = spread / (maxc + flat * (1.0 - maxc))
    rc, gc, bc = ((maxc - c) / (spread + flat) for c in (r, g, b))
    not_r = _float(maxc != r)
    is_g = _float(maxc == g)
    h = (bc - gc) * (1.0 - not_r) + (rc + 2.0 - bc) * is_g * not_r + (gc + 4.0 - rc) * not_r * (1.0 - is_g)
    h = h * (1.0 / 6.0) + 1.0  # in (0, 2): fmod by 1 and torch's remainder by 1 are both x - floor(x)
    h = h - dmath.floor(h) + hue
    h = h - dmath.floor(h)
    h6 = h * 6.0
    sector = dmath.floor(h6)
    f = h6 - sector
    sector = sector - 6.0 * dmath.floor(sector * (1.0 / 6.0))
    v = maxc
    p = dmath.clamp((1.0 - s) * v, 0.0, 1.0)
    q = dmath.clamp((1.0 - s * f) * v, 0.0, 1.0)
    t = dmath.clamp((s * f + (1.0 - s)) * v, 0.0, 1.0)
    m = [_float(sector == k) for k in range(6)]
    red = v * (m[0] + m[5]) + q * m[1] + p * (m[2] + m[3]) + t * m[4]
    green = t * m[0] + v * (m[1] + m[2]) + q * m[3] + p * (m[4] + m[5])
    blue = p * (m[0] + m[1]) + t * m[2] + v * (m[3] + m[4]) + q * m[5]
    out = fn.stack(red, green, blue, axis=2, axis_name="C") * (255.0 + 1.0 - 1e-3)  # "HWC": later ops need it
    return fn.cast(dmath.floor(out), dtype=types.UINT8)


__all__ = ["blend_contrast", "blend_saturation", "scale_brightness", "shift_hue", "to_gray"]
