"""The auto-augment policies on the GPU without conditionals: every op of a level applied to every
sample, with neutral parameters where the sample drew another op.

``nvidia.dali.auto_aug``'s ``select`` splits the batch into one sub-batch per op (up to 15) at each
level and merges them again: on a GPU that is dozens of small launches and copies per level, and
on the first H200 run RandAugment (n=2) cost 21 ms per batch of 256 where the whole standard
preset cost 12 (benchmarks/NOTES.md). Here each level is a fixed chain of batched operators:

1. one ``warp_affine`` (the shears, translations and rotation; the identity matrix elsewhere);
2. ``saturation`` (Color; 1 elsewhere) and a 3x3 ``filter`` (Sharpness; the identity kernel elsewhere);
3. one per-channel affine map ``x * A + B`` covering Brightness, Contrast and AutoContrast
   (``A = 1, B = 0`` elsewhere; the image statistics come from the same image);
4. posterize and solarize (Invert is solarize at 0) as bit operations (mask 255, threshold 256 elsewhere);
5. Equalize, picked by a 0/1 flag.

A sample draws one op per level, and the others leave it exactly as it is, so a level gives what
that one op gives; the parameters are those of ``augment_suite.suite`` (torchvision's magnitudes), worked
out per sample on the planning thread (``host_params``). The two forms agree pixel for pixel up to
float rounding (``tests/test_dali_forms.py``). It is the ``"gpu"`` form (``forms``): ``dali``
uses it, ``dali-cpu`` the ``select`` one (on a CPU every extra pass costs its full price).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ... import ops as O
from ...ops.pixel import AUTO_AUGMENT_OPS
from .augment_suite import equalizes, keep_border, suite

#: The channel weights of the grey level Contrast blends towards (PIL's, as ``nvidia.dali.auto_aug``'s).
_RGB_WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)
_IDENTITY_KERNEL = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32)
POLICIES = (O.RandAugment, O.TrivialAugment, O.AutoAugment)
#: Each value of the chain where a sample drew an op that does not set it (the identity).
NEUTRAL: dict[str, Any] = {
    "matrix": np.eye(2, 3),
    "kernel": _IDENTITY_KERNEL,
    "saturation": 1.0,
    "brightness": 1.0,
    "contrast": 1.0,
    "autocontrast": 0.0,
    "threshold": 256.0,  # solarize nothing
    "posterize": 255,  # keep every bit
    "equalize": 0,
}
#: The ops whose parameter (``augment_suite.suite``'s) is a value of the chain as it is.
PARAMETER_OF = {
    "Color": "saturation",
    "Sharpness": "kernel",
    "Brightness": "brightness",
    "Contrast": "contrast",
    "Posterize": "posterize",
    "Solarize": "threshold",
}
#: The ops without a magnitude: the value they set (Invert is solarize at 0).
FIXED_OF = {"AutoContrast": ("autocontrast", 1.0), "Equalize": ("equalize", 1), "Invert": ("threshold", 0.0)}


def names_of(op: Any) -> tuple[str, ...]:
    """The policy's op names, torchvision's, in the order its plan numbers them."""
    return AUTO_AUGMENT_OPS if isinstance(op, O.AutoAugment) else O.AUGMENT_OPS


def levels_of(op: Any) -> int:
    """How many ops each sample draws in turn."""
    if isinstance(op, O.RandAugment):
        return op.num_ops
    if isinstance(op, O.TrivialAugment):
        return 1
    return len(op.sub_policies[0])


@functools.lru_cache(maxsize=32)
def _param_tables(op: Any, size: tuple[int, int]) -> dict[str, np.ndarray]:
    """Per op name with a magnitude: ``(bins, 2, *shape)`` its parameter for each bin and sign (sign 1:
    negated), as ``nvidia.dali.auto_aug`` computes them for ``augment_suite.suite``."""
    names = names_of(op)
    tables = {}
    for name, aug in zip(names, suite(op, names, size), strict=True):
        if aug.mag_range is None:
            continue
        lo, hi = aug.mag_range
        magnitudes = np.linspace(lo, hi, op.num_magnitude_bins, dtype=np.float32)
        signed = [(m, -m if aug.randomly_negate else m) for m in magnitudes]
        tables[name] = np.array([[np.array(aug.mag_to_param(v)) for v in pair] for pair in signed])
    return tables


def _rotation(angles: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(n, 2, 3)`` the maps of DALI's ``rotate`` (``keep_size``) by ``angles`` degrees about the centre."""
    h, w = size
    a = np.deg2rad(-angles.astype(np.float64))
    cos, sin = np.cos(a), np.sin(a)
    cx, cy = w / 2.0, h / 2.0
    m = np.zeros((len(angles), 2, 3))
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = cos, -sin, sin, cos
    m[:, 0, 2] = cx - cos * cx + sin * cy
    m[:, 1, 2] = cy - sin * cx - cos * cy
    return m


def host_params(op: Any, step: dict[str, np.ndarray], size: tuple[int, int]) -> dict[str, np.ndarray]:
    """Per level ``l``, every sample's parameters of the fused chain (neutral where it drew another op).

    Args:
        op: a ``RandAugment``, ``TrivialAugment`` or ``AutoAugment``.
        step: its plan: ``ops`` and ``signs`` ``(B, L)``, and ``bins`` (``(B,)`` TrivialAugment,
            ``(B, L)`` AutoAugment).
        size: ``(h, w)`` of the images it receives.

    Returns:
        ``matrix{l}`` ``(B, 2, 3)``, ``kernel{l}`` ``(B, 3, 3)``, ``saturation{l}``, ``scale{l}``
        (brightness times contrast), ``contrast{l}``, ``autocontrast{l}``, ``threshold{l}`` float32
        ``(B,)``; ``posterize{l}`` (a bit mask), ``equalize{l}`` int32 ``(B,)``.
    """
    names = names_of(op)
    tables = _param_tables(op, size)
    ops, signs = np.asarray(step["ops"]), np.asarray(step["signs"])
    n = len(ops)
    bins: np.ndarray
    if isinstance(op, O.RandAugment):
        bins = np.full(ops.shape, op.magnitude)
    elif isinstance(op, O.TrivialAugment):
        bins = np.asarray(step["bins"]).reshape(n, 1)
    else:
        bins = np.asarray(step["bins"])
    out: dict[str, np.ndarray] = {}
    for level in range(ops.shape[1]):
        values = {key: np.tile(neutral, (n,) + (1,) * np.ndim(neutral)) for key, neutral in NEUTRAL.items()}
        for k, name in enumerate(names):
            drew = ops[:, level] == k
            if not drew.any() or name == "Identity":
                continue
            if name in tables:
                param = tables[name][bins[drew, level], signs[drew, level]]
            if name in ("ShearX", "ShearY"):  # DALI's shear matrix: [[1, sx, 0], [sy, 1, 0]]
                values["matrix"][drew, 0, 1], values["matrix"][drew, 1, 0] = param[:, 0], param[:, 1]
            elif name in ("TranslateX", "TranslateY"):
                values["matrix"][drew, 0, 2], values["matrix"][drew, 1, 2] = param[:, 0], param[:, 1]
            elif name == "Rotate":
                values["matrix"][drew] = _rotation(param, size)
            elif name in PARAMETER_OF:  # the op's parameter is the chain's value
                values[PARAMETER_OF[name]][drew] = param
            elif name != "Equalize" or equalizes(size):  # AutoContrast, Equalize and Invert take no magnitude
                key, value = FIXED_OF[name]
                values[key][drew] = value
        scale = values["brightness"] * values["contrast"]
        for key in ("matrix", "kernel", "saturation", "contrast", "autocontrast", "threshold"):
            out[f"{key}{level}"] = values[key].astype(np.float32)
        out[f"scale{level}"] = scale.astype(np.float32)
        out[f"posterize{level}"] = values["posterize"].astype(np.int32)
        out[f"equalize{level}"] = values["equalize"].astype(np.int32)
    return out


def lower_fused(g, j: int, op: Any, fill: float, interp) -> None:
    """The levels of policy ``j`` on ``g.images`` (``uint8`` HWC, one size) as the fixed chain above."""
    from nvidia.dali import fn, types

    def p(key: str, level: int):
        return g.p(j, f"{key}{level}")

    x, size = g.images, g.spec.size_before(j)
    for level in range(levels_of(op)):
        x = fn.warp_affine(x, matrix=p("matrix", level), fill_value=fill, interp_type=interp, inverse_map=False)
        x = fn.saturation(x, saturation=p("saturation", level))
        x = keep_border(fn.filter(x, g.on_device(p("kernel", level))), x, size)
        x = _brightness_contrast_autocontrast(x, p("scale", level), p("contrast", level), p("autocontrast", level))
        x = x & fn.cast(p("posterize", level), dtype=types.UINT8)
        x = x ^ ((x >= p("threshold", level)) * types.Constant(255, dtype=types.UINT8))
        equalize = fn.cast(p("equalize", level), dtype=types.UINT8)
        x = x * (types.Constant(1, dtype=types.UINT8) - equalize) + fn.equalize(x) * equalize
    g.images = x


def _brightness_contrast_autocontrast(x, scale, contrast, autocontrast):
    """``x * A + B`` per channel: ``A = scale, B = centre * (1 - contrast)`` (Brightness, Contrast: PIL's
    centre, the weighted mean grey level), or AutoContrast's stretch of each channel's range to [0, 255]
    where ``autocontrast`` is 1 (``nvidia.dali.auto_aug``'s formulas)."""
    from nvidia.dali import fn, types

    mean = fn.reductions.mean(x, axis_names="HW", keep_dims=True)
    centre = fn.reductions.sum(mean * types.Constant(_RGB_WEIGHTS), axis_names="C", keep_dims=True)
    lo = fn.reductions.min(x, axis_names="HW", keep_dims=True)
    hi = fn.reductions.max(x, axis_names="HW", keep_dims=True)
    spread = hi - lo
    stretches = spread > 0
    stretch = 255 / (spread * stretches + types.Constant(255, dtype=types.UINT8) * (stretches ^ True))
    keep = 1.0 - autocontrast
    a = scale * keep + stretch * autocontrast
    b = centre * (1.0 - contrast) - lo * stretches * stretch * autocontrast
    return fn.cast_like(x * a + b, x)


__all__ = ["POLICIES", "host_params", "levels_of", "lower_fused", "names_of"]
