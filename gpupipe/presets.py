"""Standard recipes as op lists: the ImageNet ``train`` and ``val`` pipelines."""

from __future__ import annotations

from typing import Callable, Dict, List

from .ops import CenterCrop, Decode, HorizontalFlip, Normalize, Op, RandomResizedCrop, Resize, SizeArg


def train(size: SizeArg = 224) -> List[Op]:
    """The ImageNet training recipe: random-resized crop, flip, normalise.

    Args:
        size: output side (or ``(h, w)``).

    Returns:
        ``[Decode, RandomResizedCrop(size), HorizontalFlip(0.5), Normalize()]``.
    """
    return [Decode(), RandomResizedCrop(size=size), HorizontalFlip(p=0.5), Normalize()]


def val(size: SizeArg = 224, resize: int = 256) -> List[Op]:
    """The ImageNet evaluation recipe: shorter side to ``resize``, centre crop.

    Args:
        size: output side (or ``(h, w)``) of the centre crop.
        resize: shorter side after resizing; must be at least the crop.

    Returns:
        ``[Decode, Resize(resize), CenterCrop(size), Normalize()]``.
    """
    crop = CenterCrop(size=size)
    if not isinstance(resize, int) or isinstance(resize, bool) or resize < max(crop.size):
        raise ValueError(f"val: resize must be an int >= the crop size {crop.size}, got {resize!r}")
    return [Decode(), Resize(size=resize), crop, Normalize()]


PRESETS: Dict[str, Callable[..., List[Op]]] = {"train": train, "val": val}


def get(name: str, **kwargs) -> List[Op]:
    """Returns the preset ``name`` (``"train"`` or ``"val"``) built with ``kwargs``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)} or pass a list of ops")
    return PRESETS[name](**kwargs)
