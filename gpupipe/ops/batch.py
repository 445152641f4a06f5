"""Ops after the per-image work: batch mixing, box clean-up and the output step."""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, ClassVar

from ..targets import IMAGE_LEVEL, TargetKind
from .base import Effect, Op

if TYPE_CHECKING:  # annotations only: ops import no heavy library
    import torch

#: Output dtypes a loader can deliver, by name (torch dtypes are mapped by name).
OUTPUT_DTYPES = ("float32", "float16", "bfloat16", "uint8")


class BatchOp(Op, abstract=True):
    """An op on whole batches: its step (``gpupipe.loading.batchsteps``) runs in the loader, on the
    loader's device, after the batch arrives; a pipeline holding one without a step is refused."""

    effect: ClassVar = Effect.BATCH
    carries: ClassVar[frozenset[TargetKind]] = IMAGE_LEVEL


class MixingOp(BatchOp, abstract=True):
    """A batch op that mixes each batch with itself rolled by one; ``alpha`` > 0."""

    alpha: float

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or self.alpha <= 0:
            raise ValueError(f"{type(self).__name__}: alpha must be > 0, got {self.alpha!r}")


@dataclass(frozen=True)
class MixUp(MixingOp):
    """MixUp (Zhang et al.): each batch blended with itself rolled by one, ``lam ~ Beta(alpha, alpha)``;
    labels become soft targets ``(B, num_classes)``."""

    alpha: float = 0.2


@dataclass(frozen=True)
class CutMix(MixingOp):
    """CutMix (Yun et al.): a box of the batch rolled by one pasted in, its area from ``Beta(alpha, alpha)``;
    labels become soft targets ``(B, num_classes)`` weighted by the pasted area."""

    alpha: float = 1.0


@dataclass(frozen=True)
class SanitizeBoxes(Op):
    """Which boxes survive the geometry, as ``v2.SanitizeBoundingBoxes`` decides.

    After every geometric op boxes are clipped to the image; at the end a box
    is dropped (with its label) when its width or height is below
    ``min_size`` pixels, or when less than ``min_visible`` of its area (moved
    with the image but not clipped) is left inside the image. Without this
    op the defaults apply.
    """

    _: KW_ONLY
    min_size: float = 1.0
    min_visible: float = 0.0
    effect: ClassVar = Effect.TARGET
    carries: ClassVar[frozenset[TargetKind]] = frozenset({TargetKind.BOXES})

    def __post_init__(self) -> None:
        for arg, hi in (("min_size", 1e6), ("min_visible", 1.0)):
            value = getattr(self, arg)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or math.isnan(value)
                or not 0 <= value <= hi
            ):
                raise ValueError(f"SanitizeBoxes: {arg} must be a number in [0, {hi:g}], got {value!r}")
            object.__setattr__(self, arg, float(value))


@dataclass(frozen=True, init=False)
class Output(Op):
    """The batch the loader hands out: dtype and memory format.

    Args:
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` (normalised with the
            pipeline's ``Normalize``, or scaled to ``[0, 1]`` without one)
            or ``"uint8"`` (``[0, 255]``, unnormalised: any ``Normalize``
            is left for the caller, see ``Loader.mean`` / ``Loader.std``).
            A ``torch.dtype`` is accepted too.
        channels_last: give ``(B, 3, H, W)`` tensors in channels_last memory format.
    """

    dtype: str = "float32"  # stored by name (one of OUTPUT_DTYPES); __init__ also takes a torch.dtype
    _: KW_ONLY
    channels_last: bool = False
    effect: ClassVar = Effect.OUTPUT

    def __init__(self, dtype: str | torch.dtype = "float32", *, channels_last: bool = False) -> None:
        object.__setattr__(self, "dtype", self.checked(dtype, channels_last))
        object.__setattr__(self, "channels_last", channels_last)

    @staticmethod
    def checked(dtype, channels_last, where: str = "Output") -> str:
        """``dtype``'s name, after checking both arguments; messages name them as ``where(dtype=...)``."""
        name = str(dtype).removeprefix("torch.")
        if name not in OUTPUT_DTYPES:
            raise ValueError(f"{where}(dtype=...) must be one of {sorted(OUTPUT_DTYPES)}, got {dtype!r}")
        if not isinstance(channels_last, bool):
            raise ValueError(f"{where}(channels_last=...) must be a bool, got {channels_last!r}")
        return name

    @property
    def torch_dtype(self):
        """The ``torch.dtype`` of the images."""
        import torch

        return getattr(torch, self.dtype)
