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
from typing import Sequence, Tuple, Union

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

__all__ = [
    "Op",
    "Decode",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "HorizontalFlip",
    "Normalize",
    "Output",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "OUTPUT_DTYPES",
]
