"""Backend-neutral image ops: what happens to each image, as plain data.

Ops import neither DALI nor torchvision. A pipeline is a list of ops that
starts with :class:`Decode`; each backend compiles the list with its own
lowering table. Every op is a frozen, keyword-only dataclass whose arguments
are validated at construction, so a bad value fails where it was written.

Sizes follow torchvision: an ``int`` or an ``(h, w)`` pair. Colour values of
:class:`Normalize` are in the ``[0, 1]`` scale, as in torchvision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:  # annotations only: ops import no heavy library
    import torch

SizeArg = Union[int, Sequence[int]]

#: Output dtypes a loader can deliver, by name (torch dtypes are mapped by name).
OUTPUT_DTYPES = ("float32", "float16", "bfloat16", "uint8")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _hw(name: str, size: SizeArg) -> Tuple[int, int]:
    """Validates a size argument and returns it as ``(h, w)``."""
    if isinstance(size, bool):
        raise ValueError(f"{name}: size must be an int or (h, w), got {size!r}")
    if isinstance(size, int):
        size = (size, size)
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: size must be an int or (h, w), got {size!r}") from None
    if h < 1 or w < 1 or tuple(size) != (h, w):
        raise ValueError(f"{name}: size must be positive integers, got {size!r}")
    return h, w


def _range(name: str, arg: str, value: Sequence[float], lo: float, hi: float) -> Tuple[float, float]:
    """Validates a ``(min, max)`` pair within ``[lo, hi]``."""
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {arg} must be a (min, max) pair, got {value!r}") from None
    if not (lo <= a <= b <= hi) or math.isnan(a) or math.isnan(b):
        raise ValueError(f"{name}: {arg} must satisfy {lo} <= min <= max <= {hi}, got {value!r}")
    return a, b


def _round_half_away(x: float) -> int:
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _probability(name: str, p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


class Op:
    """Base class of all ops (a marker; ops hold data only)."""


@dataclass(frozen=True, kw_only=True)
class Decode(Op):
    """Decodes encoded bytes to an 8-bit RGB image, EXIF orientation applied.

    Output: ``(H, W, 3)`` uint8 (layout is the backend's business).
    """


@dataclass(frozen=True, kw_only=True)
class RandomResizedCrop(Op):
    """Crops a random area and aspect ratio, then resizes to ``size``.

    Args:
        size: output ``(h, w)`` or an int for a square.
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height).
    """

    size: SizeArg
    scale: Tuple[float, float] = (0.08, 1.0)
    ratio: Tuple[float, float] = (3 / 4, 4 / 3)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _hw("RandomResizedCrop", self.size))
        object.__setattr__(self, "scale", _range("RandomResizedCrop", "scale", self.scale, 1e-6, 1.0))
        object.__setattr__(self, "ratio", _range("RandomResizedCrop", "ratio", self.ratio, 1e-6, 1e6))


@dataclass(frozen=True, kw_only=True)
class Resize(Op):
    """Resizes with antialiasing (bilinear / triangle filter).

    Args:
        size: an int resizes the shorter side to ``size`` keeping the aspect
            ratio (the longer side rounded to the nearest pixel); ``(h, w)``
            resizes to exactly that.
    """

    size: SizeArg

    def __post_init__(self) -> None:
        if isinstance(self.size, int) and not isinstance(self.size, bool):
            if self.size < 1:
                raise ValueError(f"Resize: size must be positive, got {self.size!r}")
        else:
            object.__setattr__(self, "size", _hw("Resize", self.size))

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """Returns the ``(h, w)`` this op gives for an input of ``height x width``."""
        if isinstance(self.size, tuple):
            return self.size
        short, long_ = (height, width) if height <= width else (width, height)
        new_long = max(1, math.floor(self.size * long_ / short + 0.5))
        return (self.size, new_long) if height <= width else (new_long, self.size)


@dataclass(frozen=True, kw_only=True)
class CenterCrop(Op):
    """Crops the centre ``size`` region; smaller images are padded with zeros.

    The top-left corner is ``((H - h) / 2, (W - w) / 2)`` with halves rounded
    away from zero, as in DALI (torchvision rounds halves to even); a negative
    corner means zero padding.
    """

    size: SizeArg

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _hw("CenterCrop", self.size))

    def anchor(self, height: int, width: int) -> Tuple[int, int]:
        """Returns the crop's ``(top, left)`` in a ``height x width`` image."""
        h, w = self.size
        return _round_half_away((height - h) / 2), _round_half_away((width - w) / 2)


@dataclass(frozen=True, kw_only=True)
class HorizontalFlip(Op):
    """Mirrors the image left-right with probability ``p``."""

    p: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _probability("HorizontalFlip", self.p))


def _jitter(name: str, arg: str, value, center: float, low: float, high: float) -> Optional[Tuple[float, float]]:
    """torchvision's ColorJitter argument: ``x`` -> ``(max(low, center - x), center + x)``, or a range."""
    if value is None or value == 0:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name}: {arg} must be >= 0, got {value!r}")
        return max(low, center - float(value)), min(high, center + float(value))
    return _range(name, arg, value, low, high)


@dataclass(frozen=True, kw_only=True)
class ColorJitter(Op):
    """Random brightness, contrast, saturation and hue, as ``torchvision.transforms.v2.ColorJitter``.

    Each of ``brightness``, ``contrast``, ``saturation`` is a number ``x``
    (factor drawn from ``[max(0, 1 - x), 1 + x]``) or a ``(min, max)``
    range; ``hue`` is ``x`` in ``[0, 0.5]`` (shift drawn from ``[-x, x]`` of
    the colour circle) or a range in ``[-0.5, 0.5]``. 0 leaves that part out.
    """

    brightness: Optional[Union[float, Tuple[float, float]]] = None
    contrast: Optional[Union[float, Tuple[float, float]]] = None
    saturation: Optional[Union[float, Tuple[float, float]]] = None
    hue: Optional[Union[float, Tuple[float, float]]] = None

    def __post_init__(self) -> None:
        for arg in ("brightness", "contrast", "saturation"):
            object.__setattr__(self, arg, _jitter("ColorJitter", arg, getattr(self, arg), 1.0, 0.0, 1e6))
        if isinstance(self.hue, (int, float)) and not isinstance(self.hue, bool) and self.hue > 0.5:
            raise ValueError(f"ColorJitter: hue must be in [0, 0.5], got {self.hue!r}")
        object.__setattr__(self, "hue", _jitter("ColorJitter", "hue", self.hue, 0.0, -0.5, 0.5))


@dataclass(frozen=True, kw_only=True)
class RandomGrayscale(Op):
    """Turns the image gray (ITU-R 601 luma in all three channels) with probability ``p``."""

    p: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _probability("RandomGrayscale", self.p))


@dataclass(frozen=True, kw_only=True)
class GaussianBlur(Op):
    """Gaussian blur with a ``kernel`` x ``kernel`` window and sigma drawn from ``sigma``."""

    kernel: int
    sigma: Tuple[float, float] = (0.1, 2.0)

    def __post_init__(self) -> None:
        if isinstance(self.kernel, bool) or not isinstance(self.kernel, int) or self.kernel < 1 or self.kernel % 2 == 0:
            raise ValueError(f"GaussianBlur: kernel must be an odd int >= 1, got {self.kernel!r}")
        sigma = self.sigma if isinstance(self.sigma, (tuple, list)) else (self.sigma, self.sigma)
        object.__setattr__(self, "sigma", _range("GaussianBlur", "sigma", sigma, 1e-6, 1e3))


@dataclass(frozen=True, kw_only=True)
class RandomRotation(Op):
    """Rotates by an angle drawn from ``degrees`` (``d`` means ``[-d, d]``), counter-clockwise,
    keeping the size; uncovered corners are black. Bilinear on every backend."""

    degrees: Union[float, Tuple[float, float]]

    def __post_init__(self) -> None:
        degrees = self.degrees
        if isinstance(degrees, (int, float)) and not isinstance(degrees, bool):
            if degrees < 0:
                raise ValueError(f"RandomRotation: degrees must be >= 0, got {degrees!r}")
            degrees = (-float(degrees), float(degrees))
        object.__setattr__(self, "degrees", _range("RandomRotation", "degrees", degrees, -360.0, 360.0))


@dataclass(frozen=True, kw_only=True)
class RandAugment(Op):
    """RandAugment (Cubuk et al.): ``num_ops`` ops drawn per image at ``magnitude`` of ``num_magnitude_bins``.

    DALI: ``nvidia.dali.auto_aug.rand_augment``; torchvision: ``v2.RandAugment``.
    """

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31

    def __post_init__(self) -> None:
        for arg, low in (("num_ops", 0), ("magnitude", 0), ("num_magnitude_bins", 2)):
            value = getattr(self, arg)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"RandAugment: {arg} must be an int >= {low}, got {value!r}")
        if self.magnitude >= self.num_magnitude_bins:
            raise ValueError(
                f"RandAugment: magnitude must be < num_magnitude_bins ({self.num_magnitude_bins}), got {self.magnitude!r}"
            )


@dataclass(frozen=True, kw_only=True)
class TrivialAugment(Op):
    """TrivialAugment Wide: one op per image at a random magnitude.

    DALI: ``nvidia.dali.auto_aug.trivial_augment_wide``; torchvision: ``v2.TrivialAugmentWide``.
    """

    num_magnitude_bins: int = 31

    def __post_init__(self) -> None:
        if isinstance(self.num_magnitude_bins, bool) or not isinstance(self.num_magnitude_bins, int) \
                or self.num_magnitude_bins < 2:
            raise ValueError(f"TrivialAugment: num_magnitude_bins must be an int >= 2, got {self.num_magnitude_bins!r}")


@dataclass(frozen=True, kw_only=True)
class RandomErasing(Op):
    """Erases a random rectangle with probability ``p``, as ``v2.RandomErasing``.

    The area is drawn from ``scale`` (fraction of the image), the aspect
    ratio (height / width) log-uniformly from ``ratio``. Erased pixels take
    the normalisation mean, i.e. 0 after ``Normalize``: torchvision's
    default ``value=0`` placed after ``Normalize``.
    """

    p: float = 0.5
    scale: Tuple[float, float] = (0.02, 0.33)
    ratio: Tuple[float, float] = (0.3, 3.3)

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _probability("RandomErasing", self.p))
        object.__setattr__(self, "scale", _range("RandomErasing", "scale", self.scale, 0.0, 1.0))
        object.__setattr__(self, "ratio", _range("RandomErasing", "ratio", self.ratio, 1e-6, 1e6))


class BatchOp(Op):
    """An op on whole batches, applied on the device after the batch arrives; ``alpha`` > 0."""

    alpha: float

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or self.alpha <= 0:
            raise ValueError(f"{type(self).__name__}: alpha must be > 0, got {self.alpha!r}")


@dataclass(frozen=True, kw_only=True)
class MixUp(BatchOp):
    """MixUp (Zhang et al.): each batch blended with itself rolled by one, ``lam ~ Beta(alpha, alpha)``;
    labels become soft targets ``(B, num_classes)``."""

    alpha: float = 0.2


@dataclass(frozen=True, kw_only=True)
class CutMix(BatchOp):
    """CutMix (Yun et al.): a box of the batch rolled by one pasted in, its area from ``Beta(alpha, alpha)``;
    labels become soft targets ``(B, num_classes)`` weighted by the pasted area."""

    alpha: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Normalize(Op):
    """Subtracts ``mean`` and divides by ``std`` per channel, in ``[0, 1]`` units."""

    mean: Tuple[float, float, float] = IMAGENET_MEAN
    std: Tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
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


@dataclass(frozen=True, kw_only=True)
class Output(Op):
    """The batch the loader hands out: dtype and memory format.

    Args:
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` (normalised with the
            pipeline's :class:`Normalize`, or scaled to ``[0, 1]`` without one)
            or ``"uint8"`` (``[0, 255]``, unnormalised: any :class:`Normalize`
            is left for the caller, see ``Loader.mean`` / ``Loader.std``).
            A ``torch.dtype`` is accepted too.
        channels_last: give ``(B, 3, H, W)`` tensors in channels_last memory format.
    """

    dtype: Union[str, "torch.dtype"] = "float32"
    channels_last: bool = False

    def __post_init__(self) -> None:
        dtype = str(self.dtype).removeprefix("torch.")
        if dtype not in OUTPUT_DTYPES:
            raise ValueError(f"Output: dtype must be one of {sorted(OUTPUT_DTYPES)}, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype)
        if not isinstance(self.channels_last, bool):
            raise ValueError(f"Output: channels_last must be a bool, got {self.channels_last!r}")

    @property
    def torch_dtype(self):
        """The ``torch.dtype`` of the images."""
        import torch

        return getattr(torch, self.dtype)


GEOMETRY_OPS = (RandomResizedCrop, Resize, CenterCrop)
#: Ops that need fixed-size images (they run after the geometry).
FIXED_SIZE_OPS = (RandAugment, TrivialAugment, RandomErasing)

__all__ = [
    "Op",
    "Decode",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "HorizontalFlip",
    "Normalize",
    "Output",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomRotation",
    "RandAugment",
    "TrivialAugment",
    "RandomErasing",
    "BatchOp",
    "MixUp",
    "CutMix",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "OUTPUT_DTYPES",
]
