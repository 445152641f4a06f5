"""Ops that move pixels: decoding, crops, resizes, flips, rotations, padding.

Masks follow them with nearest-neighbour sampling (uncovered pixels take
the source's ``ignore_index``), boxes are moved, clipped to the image and
dropped when too little is left (see [`SanitizeBoxes`][gpupipe.ops.SanitizeBoxes]).
Sizes follow torchvision: an ``int`` or an ``(h, w)`` pair.

Ops whose arguments are stored normalised (a size as ``(h, w)``, a fill as
three numbers, a range as ``(min, max)``) write their ``__init__`` by hand
(``init=False``): the fields carry the normalised types, ``__init__`` takes
what the caller may pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

from ..checks import number_range, positive_int, probability
from ..targets import TargetKind
from .base import (
    HW,
    Effect,
    Op,
    SizeArg,
    fill_value,
    hw,
    symmetric,
)
from .base import interpolation as interpolation_mode


@dataclass(frozen=True)
class Decode(Op):
    """Decodes encoded bytes to an 8-bit RGB image, EXIF orientation applied; always first.

    Output: ``(H, W, 3)`` uint8 (layout is the backend's business).
    """

    effect: ClassVar = Effect.DECODE


@dataclass(frozen=True, init=False)
class RandomResizedCrop(Op):
    """Crops a random area and aspect ratio, then resizes to ``size`` (torchvision's sampling).

    Args:
        size: output ``(h, w)`` or an int for a square.
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height).
    """

    size: HW
    _: KW_ONLY
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(
        self, size: SizeArg, *, scale: tuple[float, float] = (0.08, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3)
    ) -> None:
        object.__setattr__(self, "size", hw("RandomResizedCrop", size))
        object.__setattr__(self, "scale", number_range("RandomResizedCrop", "scale", scale, 1e-6, 1.0))
        object.__setattr__(self, "ratio", number_range("RandomResizedCrop", "ratio", ratio, 1e-6, 1e6))

    def output_size(self, size: HW | None) -> HW | None:
        return self.size


@dataclass(frozen=True, init=False)
class Resize(Op):
    """Resizes with antialiasing (bilinear / triangle filter).

    Args:
        size: an int resizes the shorter side to ``size`` keeping the aspect
            ratio (the longer side truncated to a whole pixel, as torchvision); ``(h, w)``
            resizes to exactly that; ``None`` (with ``max_size``) resizes the
            longer side to ``max_size``.
        max_size: the longer side is at most this (as in torchvision): an int
            ``size`` that would make it longer gives way.
    """

    size: None | int | HW  # None, the shorter side, or (h, w)
    _: KW_ONLY
    max_size: int | None = None
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(self, size: None | SizeArg, *, max_size: int | None = None) -> None:
        object.__setattr__(self, "max_size", max_size)
        if max_size is not None:
            positive_int("Resize: max_size", max_size)
        if size is None:
            if max_size is None:
                raise ValueError("Resize: size=None needs max_size (the longer side)")
        elif isinstance(size, int) and not isinstance(size, bool):
            if size < 1:
                raise ValueError(f"Resize: size must be positive, got {size!r}")
            if max_size is not None and max_size < size:
                raise ValueError(f"Resize: max_size {max_size} must be >= size {size}")
        else:
            if max_size is not None:
                raise ValueError("Resize: max_size applies to an int size, not to (h, w)")
            size = hw("Resize", size)
        object.__setattr__(self, "size", size)

    def output_size(self, size: HW | None) -> HW | None:
        return self.size if isinstance(self.size, tuple) else None

    def resized(self, height: int, width: int) -> HW:
        """The ``(h, w)`` this op gives an input of ``height x width``."""
        if isinstance(self.size, tuple):
            return self.size
        short, long_ = min(height, width), max(height, width)
        if self.size is None:
            assert self.max_size is not None  # __init__ refuses size=None without max_size
            new_short, new_long = _scaled(short, self.max_size, long_), self.max_size
        else:
            new_short, new_long = self.size, _scaled(long_, self.size, short)
            if self.max_size is not None and new_long > self.max_size:
                new_short, new_long = _scaled(new_short, self.max_size, new_long), self.max_size
        return (new_short, new_long) if height <= width else (new_long, new_short)


def _scaled(side: int, target: int, reference: int) -> int:
    """``side * target / reference`` truncated to a whole pixel (as torchvision's ``Resize``), at least 1."""
    return max(1, int(side * target / reference))


@dataclass(frozen=True, init=False)
class CenterCrop(Op):
    """Crops the centre ``size`` region; smaller images are padded with zeros.

    The top-left corner is ``((H - h) / 2, (W - w) / 2)`` with halves rounded
    to even, as torchvision's ``CenterCrop``; a side smaller than the crop is
    padded with zeros, ``(h - H) // 2`` rows before it (a negative corner), as
    torchvision pads it.
    """

    size: HW
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(self, size: SizeArg) -> None:
        object.__setattr__(self, "size", hw("CenterCrop", size))

    def output_size(self, size: HW | None) -> HW | None:
        return self.size  # a larger crop than ``size`` pads, on every backend

    def anchor(self, height: int, width: int) -> HW:
        """Returns the crop's ``(top, left)`` in a ``height x width`` image."""
        h, w = self.size
        return _centre_offset(height, h), _centre_offset(width, w)


def _centre_offset(side: int, crop: int) -> int:
    """Where a centred ``crop`` starts on ``side`` pixels, as torchvision's ``center_crop`` puts it."""
    if crop > side:
        return -((crop - side) // 2)
    return int(round((side - crop) / 2))


@dataclass(frozen=True, init=False)
class RandomCrop(Op):
    """Crops a ``size`` window at a random place; an image smaller than the window is first padded
    at the bottom and right (image with 0, mask with the source's ``ignore_index``), as
    torchvision's segmentation reference does."""

    size: HW
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(self, size: SizeArg) -> None:
        object.__setattr__(self, "size", hw("RandomCrop", size))

    def output_size(self, size: HW | None) -> HW | None:
        return self.size


@dataclass(frozen=True)
class RandomResize(Op):
    """Resizes the shorter side to a random whole number of pixels in ``[min_size, max_size]``
    (the segmentation recipes' random scaling)."""

    min_size: int
    max_size: int
    effect: ClassVar = Effect.GEOMETRIC

    def __post_init__(self) -> None:
        positive_int("RandomResize: min_size", self.min_size)
        positive_int("RandomResize: max_size", self.max_size)
        if self.max_size < self.min_size:
            raise ValueError(f"RandomResize: max_size {self.max_size} must be >= min_size {self.min_size}")

    def output_size(self, size: HW | None) -> HW | None:
        return None


@dataclass(frozen=True, init=False)
class PadTo(Op):
    """Pads (or cuts) at the bottom and right to exactly ``size``, keeping the top-left corner:
    the usual way to batch images resized with ``Resize(None, max_size=...)``.

    Args:
        size: output ``(h, w)`` or an int for a square.
        fill: the padding colour in ``[0, 255]`` (masks are padded with ``ignore_index``).
    """

    size: HW
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(self, size: SizeArg, fill: float | Sequence[float] = 0) -> None:
        object.__setattr__(self, "size", hw("PadTo", size))
        object.__setattr__(self, "fill", fill_value("PadTo", fill))

    def output_size(self, size: HW | None) -> HW | None:
        return self.size


@dataclass(frozen=True)
class HorizontalFlip(Op):
    """Mirrors the image left-right with probability ``p``."""

    p: float = 0.5
    effect: ClassVar = Effect.GEOMETRIC

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", probability("HorizontalFlip", self.p))


@dataclass(frozen=True)
class VerticalFlip(Op):
    """Mirrors the image top-bottom with probability ``p`` (``RandomVerticalFlip``)."""

    p: float = 0.5
    effect: ClassVar = Effect.GEOMETRIC

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", probability("VerticalFlip", self.p))


@dataclass(frozen=True, init=False)
class RandomRotation(Op):
    """Rotates by an angle drawn from ``degrees`` (``d`` means ``[-d, d]``), counter-clockwise,
    keeping the size; uncovered corners are black. Bilinear on every backend."""

    degrees: tuple[float, float]
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(self, degrees: float | tuple[float, float]) -> None:
        if isinstance(degrees, (int, float)) and not isinstance(degrees, bool):
            if degrees < 0:
                raise ValueError(f"RandomRotation: degrees must be >= 0, got {degrees!r}")
            degrees = (-float(degrees), float(degrees))
        object.__setattr__(self, "degrees", number_range("RandomRotation", "degrees", degrees, -360.0, 360.0))


@dataclass(frozen=True)
class RandomIoUCrop(Op):
    """The SSD crop: a random window whose IoU with some box reaches a randomly chosen minimum,
    as ``v2.RandomIoUCrop`` (and DALI's ``random_bbox_crop``) draw it; boxes whose centre falls
    outside the window are dropped. Needs boxes.

    Args:
        min_scale, max_scale: range of the window's sides as fractions of the image's.
        min_aspect_ratio, max_aspect_ratio: range of the window's width / height.
        sampler_options: the minimum IoUs to choose from; ``1.0`` or more means "no crop".
        trials: windows tried per chosen minimum.
    """

    _: KW_ONLY
    min_scale: float = 0.3
    max_scale: float = 1.0
    min_aspect_ratio: float = 0.5
    max_aspect_ratio: float = 2.0
    sampler_options: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
    trials: int = 40
    effect: ClassVar = Effect.GEOMETRIC
    carries: ClassVar[frozenset[TargetKind]] = frozenset({TargetKind.BOXES})
    drops_boxes_by_centre: ClassVar[bool] = True

    def __post_init__(self) -> None:
        number_range("RandomIoUCrop", "(min_scale, max_scale)", (self.min_scale, self.max_scale), 1e-3, 1.0)
        number_range(
            "RandomIoUCrop",
            "(min_aspect_ratio, max_aspect_ratio)",
            (self.min_aspect_ratio, self.max_aspect_ratio),
            1e-3,
            1e3,
        )
        options = tuple(float(v) for v in self.sampler_options)
        if not options or any(math.isnan(v) or v < 0 for v in options):
            raise ValueError(f"RandomIoUCrop: sampler_options must be non-negative IoUs, got {self.sampler_options!r}")
        object.__setattr__(self, "sampler_options", options)
        positive_int("RandomIoUCrop: trials", self.trials)

    def output_size(self, size: HW | None) -> HW | None:
        return None


@dataclass(frozen=True, init=False)
class RandomZoomOut(Op):
    """Places the image at a random spot of a canvas ``r`` times larger (``r`` drawn from
    ``side_range``), with probability ``p``: the SSD "expand" step, as ``v2.RandomZoomOut``."""

    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    _: KW_ONLY
    side_range: tuple[float, float] = (1.0, 4.0)
    p: float = 0.5
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(
        self, fill: float | Sequence[float] = 0, *, side_range: tuple[float, float] = (1.0, 4.0), p: float = 0.5
    ) -> None:
        object.__setattr__(self, "fill", fill_value("RandomZoomOut", fill))
        object.__setattr__(self, "side_range", number_range("RandomZoomOut", "side_range", side_range, 1.0, 100.0))
        object.__setattr__(self, "p", probability("RandomZoomOut", p))

    def output_size(self, size: HW | None) -> HW | None:
        return None


@dataclass(frozen=True, init=False)
class RandomAffine(Op):
    """A random affine map keeping the size, as ``v2.RandomAffine`` draws and applies it.

    Args (normalised as torchvision normalises them):
        degrees: the angle's range; ``d`` means ``(-d, d)``. Positive angles turn clockwise
            (``v2.functional.affine``'s convention).
        translate: ``(a, b)``: horizontal shift drawn from ``[-a * W, a * W]``, vertical from
            ``[-b * H, b * H]``, rounded to whole pixels; ``None``: no shift.
        scale: the scale factor's range; ``None``: 1.
        shear: ``s`` means x-shear in ``(-s, s)``; ``(a, b)``: x-shear in ``(a, b)``;
            ``(a, b, c, d)``: x-shear in ``(a, b)`` and y-shear in ``(c, d)``; degrees.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: the colour where no pixel maps (masks: ``ignore_index``); the DALI backends take one
            value (a colour per channel is refused when the loader is built).
        center: the ``(x, y)`` pixel the map turns about; ``None``: the image's centre.
    """

    degrees: tuple[float, float]
    translate: tuple[float, float] | None = None
    scale: tuple[float, float] | None = None
    shear: tuple[float, ...] | None = None
    _: KW_ONLY
    interpolation: str = "nearest"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    center: tuple[float, float] | None = None
    effect: ClassVar = Effect.GEOMETRIC

    def __init__(
        self,
        degrees: float | Sequence[float],
        translate: Sequence[float] | None = None,
        scale: Sequence[float] | None = None,
        shear: None | float | Sequence[float] = None,
        *,
        interpolation: Any = "nearest",
        fill: float | Sequence[float] = 0,
        center: Sequence[float] | None = None,
    ) -> None:
        name = "RandomAffine"
        put = object.__setattr__
        put(self, "degrees", symmetric(name, "degrees", degrees))
        put(self, "translate", None if translate is None else _pair(name, "translate", translate, 0.0, 1.0))
        scale = None if scale is None else number_range(name, "scale", scale, 0.0, math.inf)
        if scale is not None and scale[0] <= 0:
            raise ValueError(f"{name}: scale values must be positive, got {scale!r}")
        put(self, "scale", scale)
        put(self, "shear", None if shear is None else symmetric(name, "shear", shear, (2, 4)))
        put(self, "interpolation", interpolation_mode(name, interpolation))
        put(self, "fill", fill_value(name, fill))
        put(self, "center", None if center is None else _pair(name, "center", center, -math.inf, math.inf))

    @property
    def scale_only(self) -> bool:
        """No angle and no shear: rows stay rows, so a nearest warp is two exact 1-D gathers."""
        return self.degrees == (0.0, 0.0) and not any(self.shear or ())


def _pair(name: str, arg: str, value: Any, lo: float, hi: float) -> tuple[float, float]:
    """Two numbers, each in ``[lo, hi]`` (in any order)."""
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {arg} must be 2 numbers, got {value!r}") from None
    if not (lo <= a <= hi and lo <= b <= hi):
        raise ValueError(f"{name}: {arg} values must be in [{lo}, {hi}], got {value!r}")
    return a, b
