"""The auto-augment policies' ops as ``nvidia.dali.auto_aug`` augmentations with torchvision's magnitudes:
what both DALI forms of the policies apply (``augment``: ``select`` per op; ``augment_fused``: their
parameters worked out per sample)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import ops as O


def _leaning(param):
    """DALI's shears lean the other way than torchvision's: the shear parameter negated (every policy)."""
    return lambda magnitude: -np.asarray(param(magnitude), dtype=np.float32)


def _torchvision_magnitudes(op: Any, name: str, size: tuple[int, int]) -> np.ndarray:
    """The magnitudes of torchvision's policy for op ``name``, one per bin (its ``_AUGMENTATION_SPACE``)."""
    from torchvision.transforms import v2

    policy = {O.RandAugment: v2.RandAugment, O.TrivialAugment: v2.TrivialAugmentWide, O.AutoAugment: v2.AutoAugment}
    space = policy[type(op)]._AUGMENTATION_SPACE[name][0]
    return space(op.num_magnitude_bins, *size).double().numpy()


def _as_torchvision(lo: float, hi: float, table: np.ndarray):
    """DALI's bin magnitude (numpy's float32 ``linspace(lo, hi, bins)``, sign kept) mapped to torchvision's
    value of that bin, ``table[bin]``. The float32 ``torch.linspace`` rounds the last bit otherwise, which
    moves a whole pixel or a solarize threshold where one side falls on an integer: TrivialAugment Wide's
    shift at bin 15 of 31 is 16.0 in numpy, 15.999999 in torch (so 15 px)."""
    bins = len(table)

    def to_torchvision(magnitude) -> np.ndarray:
        m = np.asarray(magnitude, dtype=np.float64)
        k = np.clip(np.rint((np.abs(m) - lo) / (hi - lo) * (bins - 1)), 0, bins - 1).astype(np.int64)
        return np.where(m < 0, -table[k], table[k])

    return to_torchvision


def _whole_pixels(param, top: float, table: np.ndarray):
    """torchvision translates by ``int(magnitude)`` pixels: its bin's magnitude truncated towards 0."""
    to_torchvision = _as_torchvision(0.0, top, table)
    return lambda magnitude: np.asarray(param(np.trunc(to_torchvision(magnitude))), dtype=np.float32)


def _threshold(table: np.ndarray):
    """torchvision solarizes pixels ``>= 255 * magnitude`` (its magnitudes run from 1 to 0; older releases
    gave 255 to 0 directly): the threshold of each bin as it computes it."""
    scaled = table * 255.0 if table.max() <= 1.0 else table
    to_torchvision = _as_torchvision(255.0, 0.0, scaled)
    return lambda magnitude: np.asarray(to_torchvision(magnitude), dtype=np.float32)


def keep_border(filtered, data, size: tuple[int, int]):
    """``filtered`` (``(H, W, C)`` nodes, ``data`` through a 3x3 filter) with ``data``'s one-pixel border, as
    torchvision's ``adjust_sharpness`` (and PIL) give it: blurred only where the kernel lies inside the image,
    the border left as it is, and the whole image where a side of ``size`` is 2 pixels or fewer. DALI's
    ``filter`` reflects past the edge and changed the border too (2/3 of a 3x9 image, 87 levels of 255)."""
    from nvidia.dali import fn

    if min(size) <= 2:
        return data
    middle = fn.cat(data[1:-1, 0:1], filtered[1:-1, 1:-1], data[1:-1, -1:], axis=1)
    return fn.cat(data[0:1], middle, data[-1:], axis=0)


#: torchvision's ``equalize`` leaves a channel as it is where fewer than 255 of its pixels lie below its
#: brightest level (PIL's ``step == 0``): always, on images of fewer than this many pixels.
EQUALIZE_MIN_PIXELS = 256


def equalizes(size: tuple[int, int]) -> bool:
    """Whether ``Equalize`` may change images of ``size`` ``(h, w)`` (DALI's, OpenCV's formula, always would)."""
    return size[0] * size[1] >= EQUALIZE_MIN_PIXELS


def _kept():
    """``Equalize`` on images too small for torchvision's to change them (``equalizes``): the image as it is."""
    from nvidia.dali.auto_aug.core import augmentation

    @augmentation
    def equalize(data, _):
        return data

    return equalize


def _sharpness(size: tuple[int, int]):
    """DALI's ``sharpness`` augmentation (its kernel and magnitudes) with the border kept (``keep_border``)."""
    from nvidia.dali import fn
    from nvidia.dali.auto_aug.core import augmentation

    @augmentation(param_device="auto")
    def sharpness(data, kernel):
        return keep_border(fn.filter(data, kernel), data, size)

    return sharpness


def suite(op: Any, names: tuple[str, ...], size: tuple[int, int]) -> list:
    """DALI augmentations for ``names`` with the magnitudes of torchvision's policy for ``op``.

    The ranges are those of torchvision's ``_AUGMENTATION_SPACE`` (RandAugment and AutoAugment: shear 0.3,
    rotation 30 degrees, translation 150/331 of the side, enhancements 0.9, posterize to 4 bits;
    TrivialAugment Wide: 0.99, 135 degrees, 32 pixels, 0.99, 2 bits; solarize thresholds 255 to 0), with
    torchvision's shear direction and whole-pixel translations, and its own bins (``torch.linspace``) for the
    translations and solarize thresholds.

    Args:
        op: a ``RandAugment``, ``TrivialAugment`` or ``AutoAugment``.
        names: the op names, torchvision's (``AUGMENT_OPS`` or ``AUTO_AUGMENT_OPS``).
        size: ``(h, w)`` of the images (the policies need one size).
    """
    from nvidia.dali.auto_aug import augmentations as a

    wide = isinstance(op, O.TrivialAugment)
    h, w = size
    shear, rotate, enhance, bits = (0.99, 135.0, 0.99, 2) if wide else (0.3, 30.0, 0.9, 4)
    tx, ty = (32.0, 32.0) if wide else (150.0 / 331.0 * w, 150.0 / 331.0 * h)
    tv = {name: _torchvision_magnitudes(op, name, size) for name in ("TranslateX", "TranslateY", "Solarize")}
    shift_x = _whole_pixels(a.warp_x_param, tx, tv["TranslateX"])
    shift_y = _whole_pixels(a.warp_y_param, ty, tv["TranslateY"])
    table = {
        "Identity": a.identity,
        "ShearX": a.shear_x.augmentation((0, shear), True, _leaning(a.warp_x_param)),
        "ShearY": a.shear_y.augmentation((0, shear), True, _leaning(a.warp_y_param)),
        "TranslateX": a.translate_x_no_shape.augmentation((0, tx), True, shift_x),
        "TranslateY": a.translate_y_no_shape.augmentation((0, ty), True, shift_y),
        "Rotate": a.rotate.augmentation((0, rotate), True),
        "Brightness": a.brightness.augmentation((0, enhance), True, a.shift_enhance_range),
        "Color": a.color.augmentation((0, enhance), True, a.shift_enhance_range),
        "Contrast": a.contrast.augmentation((0, enhance), True, a.shift_enhance_range),
        "Sharpness": _sharpness(size).augmentation((0, enhance), True, a.sharpness_kernel),
        "Posterize": a.posterize.augmentation((8, bits), False, a.poster_mask_uint8),
        "Solarize": a.solarize.augmentation((255, 0), False, _threshold(tv["Solarize"])),
        "AutoContrast": a.auto_contrast,
        "Equalize": a.equalize if equalizes(size) else _kept(),
        "Invert": a.invert,
    }
    return [table[name] for name in names]


__all__ = ["EQUALIZE_MIN_PIXELS", "equalizes", "keep_border", "suite"]
