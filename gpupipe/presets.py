"""Standard recipes as op lists: the ImageNet ``train`` (with the common augmentation options) and ``val`` pipelines."""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple, Union

from .ops import (
    CenterCrop,
    ColorJitter,
    CutMix,
    Decode,
    HorizontalFlip,
    MixUp,
    Normalize,
    Op,
    RandAugment,
    RandomErasing,
    RandomResizedCrop,
    Resize,
    SizeArg,
    TrivialAugment,
)


def train(
    size: SizeArg = 224,
    *,
    auto_augment: Optional[str] = None,
    color_jitter: Union[None, float, Tuple[float, float, float], Tuple[float, float, float, float]] = None,
    random_erasing: float = 0.0,
    mixup: float = 0.0,
    cutmix: float = 0.0,
) -> List[Op]:
    """The ImageNet training recipe, with the options of timm's and torchvision's reference recipes.

    Args:
        size: output side (or ``(h, w)``).
        auto_augment: ``"rand-m{M}-n{N}"`` (RandAugment, magnitude M of 31
            bins, N ops per image; e.g. ``"rand-m9-n2"``), ``"trivial"``
            (TrivialAugment Wide) or ``None``.
        color_jitter: ``x`` (brightness, contrast and saturation ``x``), or
            a 3- or 4-tuple (with hue), as ``v2.ColorJitter``.
        random_erasing: probability of RandomErasing (0: off).
        mixup: MixUp's alpha (0: off).
        cutmix: CutMix's alpha (0: off). With both, each batch gets one of the two.

    Returns:
        ``[Decode, RandomResizedCrop, HorizontalFlip, (auto augment), (ColorJitter),
        (RandomErasing), Normalize, (MixUp), (CutMix)]``.
    """
    ops: List[Op] = [Decode(), RandomResizedCrop(size=size), HorizontalFlip(p=0.5)]
    if auto_augment is not None:
        ops.append(_auto_augment(auto_augment))
    if color_jitter is not None:
        values = (color_jitter,) * 3 if isinstance(color_jitter, (int, float)) else tuple(color_jitter)
        if len(values) not in (3, 4):
            raise ValueError(f"train: color_jitter must be a number or a 3- or 4-tuple, got {color_jitter!r}")
        ops.append(ColorJitter(**dict(zip(("brightness", "contrast", "saturation", "hue"), values))))
    if random_erasing:
        ops.append(RandomErasing(p=random_erasing))
    ops.append(Normalize())
    if mixup:
        ops.append(MixUp(alpha=mixup))
    if cutmix:
        ops.append(CutMix(alpha=cutmix))
    return ops


def _auto_augment(name: str) -> Op:
    """``"rand-m9-n2"`` -> ``RandAugment(num_ops=2, magnitude=9)``; ``"trivial"`` -> ``TrivialAugment()``."""
    if name == "trivial":
        return TrivialAugment()
    match = re.fullmatch(r"rand((?:-[mn]\d+)*)", name)
    if match:
        fields = dict(re.findall(r"-([mn])(\d+)", match.group(1)))
        return RandAugment(num_ops=int(fields.get("n", 2)), magnitude=int(fields.get("m", 9)))
    raise ValueError(f"auto_augment must be 'rand-m<M>-n<N>' (e.g. 'rand-m9-n2') or 'trivial', got {name!r}")


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
