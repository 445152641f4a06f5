"""The torchvision lowering: each op applied with its planned parameters by ``transforms.v2`` kernels.

A sample travels as an :class:`Item`: the image (``(3, H, W)`` uint8) and
its target's state (``None`` for image-level targets). A geometric op is a
pixel *kernel* (``kernel(x, fill=..., nearest=...)`` on a plain ``(C, H, W)``
tensor: a window, resize, flip or rotation) applied to the image, then
handed with the op's parameters to the target's handler
(:meth:`~gpupipe.targets.base.Target.move`): a mask samples the same kernel
nearest-neighbour, boxes move by the op's affine map. So the target gets the
image's exact window, coin and angle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

from ... import ops as O
from ...spec import PipelineSpec
from ...targets import IMAGE_LEVEL, Target
from ...targets.base import Kernel
from ..common import Lowering

Params = Dict[str, np.ndarray]


@dataclass
class Item:
    """One sample on its way through the ops: the image and its target's state."""

    image: torch.Tensor
    target: Optional[Target] = None
    state: Any = None

    @property
    def size(self):
        return self.image.shape[-2:]

    def geometry(self, params: Params, op: O.Op, spec: PipelineSpec, kernel: Kernel, fill: Any = 0) -> None:
        """Applies one geometric ``kernel`` to the image (``fill`` where no pixel maps) and moves the target."""
        self.image = kernel(self.image, fill=fill, nearest=False)
        if self.target is not None and self.state is not None:
            self.state = self.target.move(self.state, kernel, params, op, spec)


def _paste(x: torch.Tensor, top: int, left: int, h: int, w: int, fill) -> torch.Tensor:
    """The window ``(top, left, h, w)`` of ``x``; parts outside it take ``fill`` (a number or one per channel)."""
    height, width = x.shape[-2:]
    if 0 <= top and 0 <= left and top + h <= height and left + w <= width:
        return x[..., top : top + h, left : left + w]
    fill = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,)
    out = torch.empty((*x.shape[:-2], h, w), dtype=x.dtype)
    out[...] = torch.tensor(fill, dtype=x.dtype).view(-1, 1, 1) if len(fill) > 1 else fill[0]
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, height), min(left + w, width)
    if y1 > y0 and x1 > x0:
        out[..., y0 - top : y1 - top, x0 - left : x1 - left] = x[..., y0:y1, x0:x1]
    return out


def _interpolation(nearest: bool) -> InterpolationMode:
    """Pixel centres sampled nearest (class ids: ``NEAREST_EXACT``, as DALI and the plan sample), else bilinear."""
    return InterpolationMode.NEAREST_EXACT if nearest else InterpolationMode.BILINEAR


def _fill(op) -> tuple:
    return tuple(int(round(v)) for v in op.fill)


def _window(item: Item, p: Params, op: O.Op, spec: PipelineSpec, fill=(0, 0, 0)) -> None:
    """Crops the window ``(top, left, height, width)``; parts outside the image take ``fill``."""
    top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
    item.geometry(p, op, spec, lambda x, fill, nearest=False: _paste(x, top, left, h, w, fill), fill)


def _zoom_out(item: Item, p: Params, op: O.RandomZoomOut, spec: PipelineSpec) -> None:
    window = {**p, "top": -p["top"], "left": -p["left"], "height": p["size"][0], "width": p["size"][1]}
    _window(item, window, op, spec, _fill(op))


def _resized_crop(item: Item, p: Params, op: O.RandomResizedCrop, spec: PipelineSpec) -> None:
    top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
    size = [int(v) for v in op.size]
    item.geometry(
        p,
        op,
        spec,
        lambda x, fill=0, nearest=False: F.resized_crop(
            x, top, left, h, w, size, interpolation=_interpolation(nearest), antialias=not nearest
        ),
    )


def _resize(item: Item, p: Params, op: O.Op, spec: PipelineSpec) -> None:
    size = [int(v) for v in p["size"]]
    item.geometry(
        p,
        op,
        spec,
        lambda x, fill=0, nearest=False: F.resize(
            x, size, interpolation=_interpolation(nearest), antialias=not nearest
        ),
    )


def _flip(item: Item, p: Params, op: O.HorizontalFlip, spec: PipelineSpec) -> None:
    if int(p["flip"]):
        item.geometry(p, op, spec, lambda x, fill=0, nearest=False: F.horizontal_flip(x))


def _rotate(item: Item, p: Params, op: O.RandomRotation, spec: PipelineSpec) -> None:
    angle = float(p["angle"])
    item.geometry(
        p,
        op,
        spec,
        lambda x, fill, nearest=False: F.rotate(
            x,
            angle,
            interpolation=InterpolationMode.NEAREST if nearest else InterpolationMode.BILINEAR,
            fill=fill if isinstance(fill, (int, float)) else list(fill),
        ),
    )


def _color_jitter(item: Item, p: Params, op: O.ColorJitter) -> None:
    """Applied in a fixed order (brightness, contrast, saturation, hue), as on DALI."""
    img = item.image
    if op.brightness:
        img = F.adjust_brightness(img, float(p["brightness"]))
    if op.contrast:
        img = F.adjust_contrast(img, float(p["contrast"]))
    if op.saturation:
        img = F.adjust_saturation(img, float(p["saturation"]))
    if op.hue:
        img = F.adjust_hue(img, float(p["hue"]))
    item.image = img


def _grayscale(item: Item, p: Params) -> None:
    if int(p["gray"]):
        item.image = F.rgb_to_grayscale(item.image, num_output_channels=3)


def _blur(item: Item, p: Params, op: O.GaussianBlur) -> None:
    sigma = float(p["sigma"])
    item.image = F.gaussian_blur(item.image, [op.kernel, op.kernel], [sigma, sigma])


def _erase(item: Item, p: Params, spec: PipelineSpec) -> None:
    if int(p["erase"]):
        top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
        fill = torch.tensor([round(255 * m) for m in spec.mean], dtype=item.image.dtype).view(3, 1, 1)
        item.image = item.image.clone()
        item.image[:, top : top + h, left : left + w] = fill


_POLICIES = {O.RandAugment: v2.RandAugment(), O.TrivialAugment: v2.TrivialAugmentWide()}


def _auto_augment(item: Item, p: Params, op) -> None:
    """The planned ops of RandAugment / TrivialAugment Wide, with torchvision's magnitudes."""
    policy = _POLICIES[type(op)]
    height, width = item.size
    img = item.image
    for index, sign in zip(p["ops"], p["signs"]):
        name = O.AUGMENT_OPS[int(index)]
        magnitudes_fn, signed = policy._AUGMENTATION_SPACE[name]
        magnitudes = magnitudes_fn(op.num_magnitude_bins, height, width)
        if magnitudes is not None and magnitudes.ndim > 0:
            level = int(p["bins"]) if "bins" in p else op.magnitude
            magnitude = float(magnitudes[level])
            if signed and int(sign):
                magnitude = -magnitude
        else:
            magnitude = 0.0
        img = policy._apply_image_or_video_transform(
            img, name, magnitude, interpolation=InterpolationMode.NEAREST, fill=policy._fill
        )
    item.image = img


_IMAGE_ONLY = "it shears, translates and rotates the image without its targets"

#: op type -> Lowering(apply(item, params, op, spec)).
LOWERINGS = {
    O.Decode: Lowering(lambda item, p, op, spec: None),
    O.RandomResizedCrop: Lowering(_resized_crop),
    O.Resize: Lowering(_resize),
    O.RandomResize: Lowering(_resize),
    O.CenterCrop: Lowering(_window),
    O.RandomCrop: Lowering(_window),
    O.PadTo: Lowering(lambda item, p, op, spec: _window(item, p, op, spec, _fill(op))),
    O.RandomZoomOut: Lowering(_zoom_out),
    O.RandomIoUCrop: Lowering(_window),
    O.HorizontalFlip: Lowering(_flip),
    O.RandomRotation: Lowering(_rotate),
    O.ColorJitter: Lowering(lambda item, p, op, spec: _color_jitter(item, p, op)),
    O.RandomGrayscale: Lowering(lambda item, p, op, spec: _grayscale(item, p)),
    O.GaussianBlur: Lowering(lambda item, p, op, spec: _blur(item, p, op)),
    O.RandAugment: Lowering(lambda item, p, op, spec: _auto_augment(item, p, op), IMAGE_LEVEL, _IMAGE_ONLY),
    O.TrivialAugment: Lowering(lambda item, p, op, spec: _auto_augment(item, p, op), IMAGE_LEVEL, _IMAGE_ONLY),
    O.RandomErasing: Lowering(lambda item, p, op, spec: _erase(item, p, spec)),
}


def apply_ops(item: Item, spec: PipelineSpec, steps) -> Item:
    """Applies every op of ``spec`` (after ``Decode``) with its planned parameters."""
    for op, params in zip(spec.ops, steps):
        LOWERINGS[type(op)].apply(item, params, op, spec)
    return item
