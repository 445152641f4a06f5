"""The DALI lowerings of the auto-augment policies (RandAugment, TrivialAugment Wide, AutoAugment):
the plan's op choices applied per sample with DALI's ``nvidia.dali.auto_aug`` augmentations.

Imported by ``lowering``; they join its table (``table``).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any

from ... import ops as O
from ...ops.pixel import AUTO_AUGMENT_OPS
from ...targets import IMAGE_LEVEL
from .table import Graph, lowering

_IMAGE_ONLY = "DALI's auto_aug applies its geometric ops to one input, not to the targets"
#: torchvision's op names -> DALI's auto_aug names.
_AUTO_AUG_NAMES = {
    "Identity": "identity",
    "ShearX": "shear_x",
    "ShearY": "shear_y",
    "TranslateX": "translate_x",
    "TranslateY": "translate_y",
    "Rotate": "rotate",
    "Brightness": "brightness",
    "Color": "color",
    "Contrast": "contrast",
    "Sharpness": "sharpness",
    "Posterize": "posterize",
    "Solarize": "solarize",
    "AutoContrast": "auto_contrast",
    "Equalize": "equalize",
    "Invert": "invert",
}


@lowering(O.RandAugment, O.TrivialAugment, O.AutoAugment, targets=IMAGE_LEVEL, why=_IMAGE_ONLY)
def _auto_augment(g: Graph, j: int, op) -> None:
    """The planned ops of RandAugment / TrivialAugment Wide / AutoAugment with DALI's auto_aug ops
    (timm's magnitudes; AutoAugment: translations up to 150/331 of the side, as torchvision's)."""
    from nvidia.dali import fn, types
    from nvidia.dali.auto_aug import augmentations, rand_augment, trivial_augment
    from nvidia.dali.auto_aug.core import select, signed_bin

    names: tuple[str, ...] = O.AUGMENT_OPS
    options: dict[str, Any] = {"fill_value": 0}
    if isinstance(op, O.RandAugment):
        suite, bins = rand_augment.get_rand_augment_suite(use_shape=True), [op.magnitude] * op.num_ops
    elif isinstance(op, O.TrivialAugment):
        suite, bins = trivial_augment.get_trivial_augment_wide_suite(use_shape=True), [g.p(j, "bins")]
    else:
        names = AUTO_AUGMENT_OPS
        suite = rand_augment.get_rand_augment_suite(use_shape=True, max_translate_rel=150 / 331)
        suite = [*suite, augmentations.invert]
        bins = [g.p(j, "bins")[level] for level in range(len(op.sub_policies[0]))]
        fill = op.fill[0] if len(set(op.fill)) == 1 else list(op.fill)
        interp = types.INTERP_NN if op.interpolation == "nearest" else types.INTERP_LINEAR
        options = {"fill_value": fill, "interp_type": interp}
    by_name = {aug.name: aug for aug in suite}
    ordered = [by_name[_AUTO_AUG_NAMES[name]] for name in names]
    size = g.spec.size_before(j)
    assert size is not None  # the op needs images of one size: build_spec refuses it where sizes vary
    shape = list(size)  # (h, w)
    ops, signs = g.p(j, "ops"), g.p(j, "signs")
    for level, magnitude_bin in enumerate(bins):
        sign = signs[level]
        if names is AUTO_AUGMENT_OPS:  # DALI's shears lean the other way than torchvision's: flip their signs
            shear = (ops[level] == names.index("ShearX")) | (ops[level] == names.index("ShearY"))
            sign = sign ^ fn.cast(shear, dtype=types.INT32)
        magnitude = signed_bin(magnitude_bin, random_sign=sign)
        g.images = select(
            ordered,
            ops[level],
            data=g.images,
            magnitude_bin=magnitude,
            num_magnitude_bins=op.num_magnitude_bins,
            shape=shape,
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
