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


def _whole_pixels(param):
    """torchvision translates by ``int(magnitude)`` pixels: the offset truncated towards 0."""
    return lambda magnitude: np.asarray(param(np.trunc(magnitude)), dtype=np.float32)


def suite(op: Any, names: tuple[str, ...], size: tuple[int, int]) -> list:
    """DALI augmentations for ``names`` with the magnitudes of torchvision's policy for ``op``.

    The ranges are those of torchvision's ``_AUGMENTATION_SPACE`` (RandAugment and AutoAugment: shear 0.3,
    rotation 30 degrees, translation 150/331 of the side, enhancements 0.9, posterize to 4 bits;
    TrivialAugment Wide: 0.99, 135 degrees, 32 pixels, 0.99, 2 bits; solarize thresholds 255 to 0), with
    torchvision's shear direction and whole-pixel translations.

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
    table = {
        "Identity": a.identity,
        "ShearX": a.shear_x.augmentation((0, shear), True, _leaning(a.warp_x_param)),
        "ShearY": a.shear_y.augmentation((0, shear), True, _leaning(a.warp_y_param)),
        "TranslateX": a.translate_x_no_shape.augmentation((0, tx), True, _whole_pixels(a.warp_x_param)),
        "TranslateY": a.translate_y_no_shape.augmentation((0, ty), True, _whole_pixels(a.warp_y_param)),
        "Rotate": a.rotate.augmentation((0, rotate), True),
        "Brightness": a.brightness.augmentation((0, enhance), True, a.shift_enhance_range),
        "Color": a.color.augmentation((0, enhance), True, a.shift_enhance_range),
        "Contrast": a.contrast.augmentation((0, enhance), True, a.shift_enhance_range),
        "Sharpness": a.sharpness.augmentation((0, enhance), True, a.sharpness_kernel),
        "Posterize": a.posterize.augmentation((8, bits), False, a.poster_mask_uint8),
        "Solarize": a.solarize.augmentation((255, 0), False),
        "AutoContrast": a.auto_contrast,
        "Equalize": a.equalize,
        "Invert": a.invert,
    }
    return [table[name] for name in names]


__all__ = ["suite"]
