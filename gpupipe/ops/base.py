"""The op base class, what an op declares about itself, and argument checks shared by ops."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any, ClassVar

from ..targets import ALL_TARGETS, TargetKind
from .registry import add_op

SizeArg = int | Sequence[int]
HW = tuple[int, int]


class Effect(str, enum.Enum):
    """What an op does, which tells the spec and the backends how it treats targets."""

    DECODE = "decode"  # bytes to an RGB image
    GEOMETRIC = "geometric"  # moves pixels: masks follow (nearest), boxes follow (moved, clipped, dropped)
    PIXEL = "pixel"  # changes pixel values only: targets are left alone
    NORMALIZE = "normalize"  # the per-channel normalisation (last per-image op)
    BATCH = "batch"  # works on whole batches after they arrive
    TARGET = "target"  # works on targets only
    OUTPUT = "output"  # dtype and memory format of the batch


class Op:
    """Base class of all ops: frozen dataclasses holding validated arguments.

    A subclass registers itself when it is defined (``gpupipe.ops.registry``; a base class of
    other ops says ``class Base(Op, abstract=True)``); a second class of the same name is an error.

    Class attributes each op declares:
        effect: what the op does (``Effect``).
        carries: the target kinds the op can carry along (others are refused
            when the loader is built, naming op and target).
        needs_fixed_size: the op needs images of one size (after the crop).
        drops_boxes_by_centre: boxes whose centre leaves the op's window are dropped, even
            when part of the object stays in view (``RandomIoUCrop``, as torchvision's).
    """

    effect: ClassVar[Effect] = Effect.PIXEL
    carries: ClassVar[frozenset[TargetKind]] = ALL_TARGETS
    needs_fixed_size: ClassVar[bool] = False
    drops_boxes_by_centre: ClassVar[bool] = False

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not abstract:
            add_op(cls)

    def output_size(self, size: HW | None) -> HW | None:
        """The ``(h, w)`` of every image after this op, given every input's (``None``: sizes vary)."""
        return size

    @property
    def name(self) -> str:
        return type(self).__name__


def hw(name: str, size: SizeArg) -> HW:
    """Validates a size argument and returns it as ``(h, w)``."""
    if isinstance(size, bool):
        raise ValueError(f"{name}: size must be an int or (h, w), got {size!r}")
    if isinstance(size, int):
        size = (size, size)
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: size must be an int or (h, w), got {size!r}") from None
    if h < 1 or w < 1 or tuple(size) != (h, w) or any(isinstance(v, bool) for v in size):  # True is no size
        raise ValueError(f"{name}: size must be positive integers, got {size!r}")
    return h, w


def round_half_away(x: float) -> int:
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def fill_value(name: str, value) -> tuple[float, float, float]:
    """A fill colour: one number or three, each in ``[0, 255]``."""
    values = (value,) * 3 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    try:
        triple = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: fill must be a number or 3 numbers in [0, 255], got {value!r}") from None
    if len(triple) != 3 or not all(0.0 <= v <= 255.0 for v in triple):
        raise ValueError(f"{name}: fill must be a number or 3 numbers in [0, 255], got {value!r}")
    return triple


#: Interpolations an op may take by name (an ``InterpolationMode``'s ``.value`` is its name).
INTERPOLATIONS = ("nearest", "bilinear")


def interpolation(name: str, value: Any) -> str:
    """``"nearest"`` or ``"bilinear"``, given as a string or as torchvision's ``InterpolationMode``."""
    mode = getattr(value, "value", value)
    if mode not in INTERPOLATIONS:
        raise ValueError(f"{name}: interpolation must be one of {list(INTERPOLATIONS)}, got {value!r}")
    return str(mode)


def symmetric(name: str, arg: str, value: Any, sizes: tuple[int, ...] = (2,)) -> tuple[float, ...]:
    """torchvision's ``_setup_number_or_seq``: a number ``x >= 0`` gives ``(-x, x)``; a sequence must hold
    one of ``sizes`` numbers."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0 or math.isnan(value):
            raise ValueError(f"{name}: {arg} must be >= 0 when a single number, got {value!r}")
        return (-float(value), float(value))
    try:
        values = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {arg} must be a number or a sequence of {sizes} numbers, got {value!r}") from None
    if len(values) not in sizes or any(math.isnan(v) for v in values):
        raise ValueError(f"{name}: {arg} must be a number or a sequence of {sizes} numbers, got {value!r}")
    return values
