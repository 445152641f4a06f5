"""Ops that change pixel values only (colour, blur, erasing, auto-augment policies, normalisation).

They leave masks and boxes as they are; ``RandAugment`` and
``TrivialAugment`` also shear, translate and rotate: the backends refuse
them with masks and boxes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

from ..checks import number_range, positive_int, probability
from .base import Effect, Op, fill_value
from .base import interpolation as interpolation_mode

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

JitterArg = None | float | tuple[float, float]


def _jitter(arg: str, value, center: float, low: float, high: float) -> tuple[float, float] | None:
    """torchvision's ColorJitter argument: ``x`` -> ``(max(low, center - x), center + x)``, or a range."""
    if value is None or value == 0:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"ColorJitter: {arg} must be >= 0 and finite, got {value!r}")
        return max(low, center - float(value)), min(high, center + float(value))
    return number_range("ColorJitter", arg, value, low, high)


@dataclass(frozen=True)
class ColorJitter(Op):
    """Random brightness, contrast, saturation and hue, as ``torchvision.transforms.v2.ColorJitter``.

    Each of ``brightness``, ``contrast``, ``saturation`` is a number ``x``
    (factor drawn from ``[max(0, 1 - x), 1 + x]``) or a ``(min, max)``
    range; ``hue`` is ``x`` in ``[0, 0.5]`` (shift drawn from ``[-x, x]`` of
    the colour circle) or a range in ``[-0.5, 0.5]``. 0 leaves that part out.
    """

    brightness: JitterArg = None
    contrast: JitterArg = None
    saturation: JitterArg = None
    hue: JitterArg = None

    def __post_init__(self) -> None:
        for arg in ("brightness", "contrast", "saturation"):
            object.__setattr__(self, arg, _jitter(arg, getattr(self, arg), 1.0, 0.0, 1e6))
        if isinstance(self.hue, (int, float)) and not isinstance(self.hue, bool) and not 0 <= self.hue <= 0.5:
            what = "in [0, 0.5]" if math.isfinite(self.hue) else "in [0, 0.5] and finite"
            raise ValueError(f"ColorJitter: hue must be {what}, got {self.hue!r}")
        object.__setattr__(self, "hue", _jitter("hue", self.hue, 0.0, -0.5, 0.5))


@dataclass(frozen=True)
class RandomGrayscale(Op):
    """Turns the image gray (ITU-R 601 luma in all three channels) with probability ``p``."""

    p: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", probability("RandomGrayscale", self.p))


@dataclass(frozen=True, init=False)
class GaussianBlur(Op):
    """Gaussian blur with a ``kernel`` x ``kernel`` window and sigma drawn from ``sigma``."""

    kernel: int
    sigma: tuple[float, float] = (0.1, 2.0)  # stored as a (min, max) range; __init__ also takes one number

    def __init__(self, kernel: int, sigma: float | tuple[float, float] = (0.1, 2.0)) -> None:
        object.__setattr__(self, "kernel", kernel)
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"GaussianBlur: kernel must be an odd int >= 1, got {kernel!r}")
        pair = sigma if isinstance(sigma, (tuple, list)) else (sigma, sigma)
        object.__setattr__(self, "sigma", number_range("GaussianBlur", "sigma", pair, 1e-6, 1e3))


#: The 14 operations of RandAugment and TrivialAugment Wide, by torchvision's names.
AUGMENT_OPS = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)


class AutoAugmentOp(Op, abstract=True):
    """RandAugment and TrivialAugment: policies of the 14 ops of ``AUGMENT_OPS`` on fixed-size images.

    Their shears, translations and rotations resample with ``interpolation``
    (``"nearest"``, torchvision's default, or ``"bilinear"``) and give
    ``fill`` (one number or three, in ``[0, 255]``; the DALI backends take
    one value and refuse three that differ) where no pixel maps, on every
    backend. They would have to move masks and boxes too; no backend
    does that today, and each backend's lowering table refuses those targets
    by name (see ``gpupipe.backends.check_lowerings``).
    """

    num_magnitude_bins: int
    interpolation: str
    fill: tuple[float, float, float]
    needs_fixed_size: ClassVar = True

    def __post_init__(self) -> None:
        positive_int(f"{self.name}: num_magnitude_bins", self.num_magnitude_bins, 2)
        object.__setattr__(self, "interpolation", interpolation_mode(self.name, self.interpolation))
        object.__setattr__(self, "fill", fill_value(self.name, self.fill))


@dataclass(frozen=True)
class RandAugment(AutoAugmentOp):
    """RandAugment (Cubuk et al.): ``num_ops`` ops drawn per image at ``magnitude`` of ``num_magnitude_bins``.

    The op choices and signs are drawn once and applied by every backend
    (DALI: the ``nvidia.dali.auto_aug`` suite; torchvision: ``transforms.v2``
    kernels), so each sample gets the same ops everywhere. ``interpolation`` and ``fill`` are
    torchvision's (``"nearest"`` and black by default), on every backend.
    """

    num_ops: int = 2
    magnitude: int = 9
    _: KW_ONLY
    num_magnitude_bins: int = 31
    interpolation: str = "nearest"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_int("RandAugment: num_ops", self.num_ops, 0)
        positive_int("RandAugment: magnitude", self.magnitude, 0)
        if self.magnitude >= self.num_magnitude_bins:
            raise ValueError(
                f"RandAugment: magnitude must be < num_magnitude_bins ({self.num_magnitude_bins}), "
                f"got {self.magnitude!r}"
            )


@dataclass(frozen=True)
class TrivialAugment(AutoAugmentOp):
    """TrivialAugment Wide: one op per image at a random magnitude.

    DALI: ``nvidia.dali.auto_aug`` suite; torchvision: ``transforms.v2`` kernels. ``interpolation`` and
    ``fill`` as RandAugment's.
    """

    _: KW_ONLY
    num_magnitude_bins: int = 31
    interpolation: str = "nearest"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)


#: AutoAugment's ops: those of ``AUGMENT_OPS`` and ``Invert`` (``Identity``: a sub-policy step not applied).
AUTO_AUGMENT_OPS = AUGMENT_OPS + ("Invert",)

#: torchvision's ``AutoAugmentPolicy.IMAGENET``: 25 sub-policies of two ``(op, probability, magnitude bin)``
#: steps (``None``: an op without a magnitude), from the AutoAugment paper.
IMAGENET_POLICY: tuple[tuple[tuple[str, float, int | None], ...], ...] = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)
AUTO_AUGMENT_POLICIES = {"imagenet": IMAGENET_POLICY}


@dataclass(frozen=True, init=False)
class AutoAugment(Op):
    """AutoAugment (Cubuk et al.) with torchvision's ImageNet policy: per image one of 25 sub-policies,
    each two ops applied with their probabilities at fixed magnitude bins (of 10).

    The sub-policy, the coins and the signs are drawn once and applied by every backend (DALI: the
    ``nvidia.dali.auto_aug`` ops; torchvision: ``v2.AutoAugment``'s kernels), as for RandAugment.

    Args:
        policy: ``"imagenet"`` (an ``AutoAugmentPolicy.IMAGENET`` is accepted too).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: the colour where no pixel maps, in ``[0, 255]``.
    """

    policy: str = "imagenet"
    _: KW_ONLY
    interpolation: str = "nearest"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    needs_fixed_size: ClassVar = True

    def __init__(
        self, policy: Any = "imagenet", *, interpolation: Any = "nearest", fill: float | Sequence[float] = 0
    ) -> None:
        name = getattr(policy, "value", policy)
        if name not in AUTO_AUGMENT_POLICIES:
            raise ValueError(f"AutoAugment: policy must be one of {sorted(AUTO_AUGMENT_POLICIES)}, got {policy!r}")
        object.__setattr__(self, "policy", name)
        object.__setattr__(self, "interpolation", interpolation_mode("AutoAugment", interpolation))
        object.__setattr__(self, "fill", fill_value("AutoAugment", fill))

    @property
    def num_magnitude_bins(self) -> int:
        """The magnitude bins of the policy's steps (10, as in the paper and torchvision)."""
        return 10

    @property
    def sub_policies(self) -> tuple[tuple[tuple[str, float, int | None], ...], ...]:
        return AUTO_AUGMENT_POLICIES[self.policy]


@dataclass(frozen=True)
class RandomErasing(Op):
    """Erases a random rectangle with probability ``p``, as ``v2.RandomErasing``.

    The area is drawn from ``scale`` (fraction of the image), the aspect
    ratio (height / width) log-uniformly from ``ratio``. Erased pixels take
    the normalisation mean, i.e. 0 after ``Normalize``: torchvision's
    default ``value=0`` placed after ``Normalize``. Masks and boxes are left alone.
    """

    p: float = 0.5
    _: KW_ONLY
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    needs_fixed_size: ClassVar = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", probability("RandomErasing", self.p))
        object.__setattr__(self, "scale", number_range("RandomErasing", "scale", self.scale, 0.0, 1.0))
        object.__setattr__(self, "ratio", number_range("RandomErasing", "ratio", self.ratio, 1e-6, 1e6))


@dataclass(frozen=True)
class Normalize(Op):
    """Subtracts ``mean`` and divides by ``std`` per channel, in ``[0, 1]`` units."""

    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    effect: ClassVar = Effect.NORMALIZE

    def __post_init__(self) -> None:
        import math

        for arg in ("mean", "std"):
            value = getattr(self, arg)
            try:
                triple = tuple(float(v) for v in value)
            except (TypeError, ValueError):
                raise ValueError(f"Normalize: {arg} must be 3 numbers, got {value!r}") from None
            if len(triple) != 3 or any(math.isnan(v) or math.isinf(v) for v in triple):
                raise ValueError(f"Normalize: {arg} must be 3 finite numbers, got {value!r}")
            object.__setattr__(self, arg, triple)
        if any(s <= 0 for s in self.std):
            raise ValueError(f"Normalize: std must be positive, got {self.std!r}")
