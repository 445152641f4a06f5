"""The DALI lowerings of the auto-augment policies (RandAugment, TrivialAugment Wide, AutoAugment):
the plan's op choices applied per sample with DALI's ``nvidia.dali.auto_aug`` augmentations.

Imported by ``lowering``; they join its table (``table``).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any

import numpy as np

from ... import ops as O
from ...ops.pixel import AUTO_AUGMENT_OPS
from ...targets import IMAGE_LEVEL
from .table import Graph, lowering

_IMAGE_ONLY = "DALI's auto_aug applies its geometric ops to one input, not to the targets"


def _leaning(param):
    """DALI's shears lean the other way than torchvision's: the shear parameter negated (every policy)."""
    return lambda magnitude: -np.asarray(param(magnitude), dtype=np.float32)


def _whole_pixels(param):
    """torchvision translates by ``int(magnitude)`` pixels: the offset truncated towards 0."""
    return lambda magnitude: np.asarray(param(np.trunc(magnitude)), dtype=np.float32)


def one_fill(op: Any) -> float:
    """``op.fill`` as the one value DALI's ``warp_affine`` and ``rotate`` fill with.

    Raises:
        ValueError: a fill that differs per channel (refused, not approximated).
    """
    if len(set(op.fill)) > 1:
        raise ValueError(
            f"{op.name}: fill={op.fill} differs per channel, and the DALI backends' warp_affine and rotate "
            "fill with one value: give one value, or use backend='torchvision'"
        )
    return op.fill[0]


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


@lowering(O.RandAugment, O.TrivialAugment, O.AutoAugment, targets=IMAGE_LEVEL, why=_IMAGE_ONLY)
def _auto_augment(g: Graph, j: int, op) -> None:
    """The planned ops of RandAugment / TrivialAugment Wide / AutoAugment with DALI's auto_aug ops, at
    torchvision's magnitudes (``suite``), resampled with the op's interpolation, ``fill`` where no pixel maps."""
    from nvidia.dali import types
    from nvidia.dali.auto_aug.core import select, signed_bin

    names = AUTO_AUGMENT_OPS if isinstance(op, O.AutoAugment) else O.AUGMENT_OPS
    size = g.spec.size_before(j)
    assert size is not None  # the op needs images of one size: build_spec refuses it where sizes vary
    ordered = suite(op, names, size)
    ops, signs = g.p(j, "ops"), g.p(j, "signs")
    if isinstance(op, O.RandAugment):
        bins = [op.magnitude] * op.num_ops
    elif isinstance(op, O.TrivialAugment):
        bins = [g.p(j, "bins")]
    else:
        bins = [g.p(j, "bins")[level] for level in range(len(op.sub_policies[0]))]
    options = {
        "fill_value": one_fill(op),
        "interp_type": types.INTERP_NN if op.interpolation == "nearest" else types.INTERP_LINEAR,
    }
    for level, magnitude_bin in enumerate(bins):
        g.images = select(
            ordered,
            ops[level],
            data=g.images,
            magnitude_bin=signed_bin(magnitude_bin, random_sign=signs[level]),
            num_magnitude_bins=op.num_magnitude_bins,
            **options,
        )


@contextlib.contextmanager
def quiet_auto_aug():
    """Silences exactly the deprecation notices DALI's own auto_aug module prints about the
    experimental aliases it calls (``fn.experimental.filter`` / ``equalize``).

    DALI forces them through its own ``catch_warnings()`` + ``simplefilter("default")``, so a filter
    cannot stop them; ``warnings.showwarning`` is wrapped instead. Pipelines are traced in the loader's
    thread while runs build in the background, so the wrapper is counted: installed by the first
    thread in, restored by the last one out (a swap restored by one thread would unmute the other).
    """
    with _QUIET["lock"]:
        if _QUIET["depth"] == 0:
            _QUIET["shown"] = shown = warnings.showwarning

            def show(message, category, *args, **kwargs):
                if category is DeprecationWarning and "nvidia.dali.fn.experimental" in str(message):
                    return
                shown(message, category, *args, **kwargs)

            _QUIET["show"] = warnings.showwarning = show
        _QUIET["depth"] += 1
    try:
        yield
    finally:
        with _QUIET["lock"]:
            _QUIET["depth"] -= 1
            if _QUIET["depth"] == 0 and warnings.showwarning is _QUIET["show"]:
                warnings.showwarning = _QUIET["shown"]


_QUIET: dict = {"lock": threading.Lock(), "depth": 0, "shown": None, "show": None}
