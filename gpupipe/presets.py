"""Standard recipes as op lists: ImageNet classification (``train`` with the common augmentation
options, ``val``), segmentation and detection (torchvision's reference recipes)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from .checks import did_you_mean
from .ops import (
    CenterCrop,
    ColorJitter,
    CutMix,
    Decode,
    HorizontalFlip,
    MixUp,
    Normalize,
    Op,
    PadTo,
    RandAugment,
    RandomCrop,
    RandomErasing,
    RandomIoUCrop,
    RandomResize,
    RandomResizedCrop,
    RandomZoomOut,
    Resize,
    SanitizeBoxes,
    SizeArg,
    TrivialAugment,
)


def train(
    size: SizeArg = 224,
    *,
    auto_augment: str | None = None,
    color_jitter: None | float | tuple[float, float, float] | tuple[float, float, float, float] = None,
    random_erasing: float = 0.0,
    mixup: float = 0.0,
    cutmix: float = 0.0,
) -> list[Op]:
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
    ops: list[Op] = [Decode(), RandomResizedCrop(size=size), HorizontalFlip(p=0.5)]
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


def val(size: SizeArg = 224, resize: int = 256) -> list[Op]:
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


def segmentation_train(crop: SizeArg = 480, base: int = 520) -> list[Op]:
    """torchvision's segmentation reference training: the shorter side resized to a random size in
    ``[0.5, 2.0] x base``, a horizontal flip, a random ``crop`` (images smaller than it padded at the
    bottom and right: 0 for the image, ``ignore_index`` for the mask), normalisation.

    Returns:
        ``[Decode, RandomResize(base // 2, 2 * base), HorizontalFlip(0.5), RandomCrop(crop), Normalize]``.
    """
    if isinstance(base, bool) or not isinstance(base, int) or base < 2:
        raise ValueError(f"segmentation_train: base must be an int >= 2, got {base!r}")
    return [Decode(), RandomResize(base // 2, 2 * base), HorizontalFlip(0.5), RandomCrop(crop), Normalize()]


def segmentation_val(size: int = 520) -> list[Op]:
    """Segmentation evaluation in batches: the longer side resized to ``size`` (aspect kept), then padded
    to ``size x size`` at the bottom and right (masks with ``ignore_index``, so metrics skip the padding).

    Returns:
        ``[Decode, Resize(None, max_size=size), PadTo(size), Normalize]``.
    """
    return [Decode(), Resize(None, max_size=size), PadTo(size), Normalize()]


def detection_ssd(size: SizeArg = 300, fill: tuple[float, float, float] = (124, 116, 104)) -> list[Op]:
    """The SSD training recipe (as torchvision's detection reference): photometric distortion, zoom
    out (expand) with probability 0.5, the IoU-constrained random crop, a horizontal flip, and a
    resize to a square. No ``Normalize``: torchvision's detection models normalise inside, from
    float images in ``[0, 1]``. Boxes left smaller than a pixel are dropped.

    Returns:
        ``[Decode, ColorJitter, RandomZoomOut, RandomIoUCrop, HorizontalFlip, Resize((size, size)), SanitizeBoxes]``.
    """
    return [
        Decode(),
        ColorJitter(brightness=(0.875, 1.125), contrast=(0.5, 1.5), saturation=(0.5, 1.5), hue=(-0.05, 0.05)),
        RandomZoomOut(fill, side_range=(1.0, 4.0), p=0.5),
        RandomIoUCrop(),
        HorizontalFlip(0.5),
        Resize((size, size) if isinstance(size, int) else size),
        SanitizeBoxes(),
    ]


def detection_val(size: int = 800, max_size: int = 1333) -> list[Op]:
    """Faster R-CNN-style evaluation in batches: the shorter side to ``size`` with the longer at most
    ``max_size`` (as ``GeneralizedRCNNTransform``), padded to ``max_size x max_size`` at the bottom and
    right; each image's unpadded size is in the targets (``"image_sizes"``). No ``Normalize`` (the
    models normalise inside).

    Returns:
        ``[Decode, Resize(size, max_size=max_size), PadTo(max_size)]``.
    """
    return [Decode(), Resize(size, max_size=max_size), PadTo(max_size)]


PRESETS: dict[str, Callable[..., list[Op]]] = {
    "train": train,
    "val": val,
    "segmentation-train": segmentation_train,
    "segmentation-val": segmentation_val,
    "detection-ssd": detection_ssd,
    "detection-val": detection_val,
}


def get(name: str, **kwargs) -> list[Op]:
    """Returns the preset ``name`` (a key of ``PRESETS``) built with ``kwargs``."""
    if name not in PRESETS:
        guess = did_you_mean(name, PRESETS)
        path = " (a path: the source comes first, the preset second)" if is_path(name) and not guess else ""
        raise ValueError(f"unknown preset {name!r}{guess}{path}; choose one of {sorted(PRESETS)} or pass a list of ops")
    return PRESETS[name](**kwargs)


def is_path(name) -> bool:
    """Whether a pipeline argument is a path rather than a preset name: a ``PathLike``, a name holding a path
    separator, or one that exists (``"data"``, a folder in the current one)."""
    if isinstance(name, os.PathLike):
        return True
    return isinstance(name, str) and name not in PRESETS and ("/" in name or os.sep in name or os.path.exists(name))


def refuse_swapped(source, pipeline) -> None:
    """Refuses a preset name given as the source and a path as the pipeline (``loader("train", "data/train")``).

    Raises:
        ValueError: naming the call in the right order.
    """
    if isinstance(source, str) and source in PRESETS and is_path(pipeline):
        raise ValueError(
            f"unknown preset {os.fspath(pipeline)!r}: a path, and the source {source!r} is a preset name: the source "
            f"comes first: gpupipe.loader({os.fspath(pipeline)!r}, {source!r})"
        )
