"""The torchvision lowering: each op applied with its planned parameters by ``transforms.v2`` kernels.

A sample travels as an :class:`Item`: the image (``(3, H, W)`` uint8), its
mask (``tv_tensors.Mask``) or boxes (``tv_tensors.BoundingBoxes``, plus the
same boxes moved but never clipped, for the visible fraction). Geometric
kernels dispatch on each, so the mask and the boxes get the image's exact
window, coin and angle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

from ... import ops as O
from ...plan import boxes as bx
from ...spec import PipelineSpec
from ...targets import IMAGE_LEVEL
from ..common import Lowering

Params = Dict[str, np.ndarray]


@dataclass
class Item:
    """One sample on its way through the ops."""

    image: torch.Tensor
    mask: Optional[tv_tensors.Mask] = None
    boxes: Optional[tv_tensors.BoundingBoxes] = None
    raw_boxes: Optional[np.ndarray] = None  # moved like ``boxes`` but not clipped
    box_labels: Optional[torch.Tensor] = None

    @property
    def size(self):
        return self.image.shape[-2:]

    def geometry(self, params: Params, image_fn, mask_fn=None, boxes_fn=None) -> None:
        """Applies one geometric kernel to the image, the mask and the boxes."""
        self.image = image_fn(self.image)
        if self.mask is not None:
            self.mask = (mask_fn or image_fn)(self.mask)
        if self.boxes is not None:
            moved = (boxes_fn or image_fn)(self.boxes)
            height, width = self.size  # clipped here too: the kernels' scaling may overshoot by rounding
            moved[:, 0::2] = moved[:, 0::2].clamp(0, width)
            moved[:, 1::2] = moved[:, 1::2].clamp(0, height)
            self.boxes = moved
            assert self.raw_boxes is not None  # set with the boxes
            self.raw_boxes = bx.apply(params["affine"].astype(np.float64), self.raw_boxes)


def _window(item: Item, p: Params, spec: PipelineSpec, fill=(0, 0, 0)) -> None:
    """Crops the window ``(top, left, height, width)``; parts outside the image take ``fill``
    (masks: ``ignore_index``). Boxes are moved and clipped."""
    top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
    item.geometry(p, lambda x: _paste(x, top, left, h, w, fill),
                  lambda m: tv_tensors.wrap(_paste(m, top, left, h, w, (spec.ignore_index,)), like=m),
                  lambda b: F.crop(b, top, left, h, w))


def _paste(x: torch.Tensor, top: int, left: int, h: int, w: int, fill) -> torch.Tensor:
    height, width = x.shape[-2:]
    if 0 <= top and 0 <= left and top + h <= height and left + w <= width:
        return x[..., top:top + h, left:left + w]
    out = torch.empty((*x.shape[:-2], h, w), dtype=x.dtype)
    out[...] = torch.tensor(fill, dtype=x.dtype).view(-1, 1, 1) if len(fill) > 1 else fill[0]
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, height), min(left + w, width)
    if y1 > y0 and x1 > x0:
        out[..., y0 - top:y1 - top, x0 - left:x1 - left] = x[..., y0:y1, x0:x1]
    return out


def _as_plain(kernel):
    """Runs a mask kernel on the Mask's plain tensor and wraps the result back. torchvision's Mask
    kernels pick their own sampling: ``resized_crop`` always, and ``resize`` before 0.29, sample
    NEAREST whatever ``interpolation`` asks, where DALI and the plan sample pixel centres."""
    return lambda mask: tv_tensors.wrap(kernel(mask.as_subclass(torch.Tensor)), like=mask)


def _fill(op) -> tuple:
    return tuple(int(round(v)) for v in op.fill)


def _resized_crop(item: Item, p: Params, size) -> None:
    top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
    size = [int(v) for v in size]
    item.geometry(p, lambda x: F.resized_crop(x, top, left, h, w, size, antialias=True),
                  _as_plain(lambda m: F.resized_crop(m, top, left, h, w, size,
                                                     interpolation=InterpolationMode.NEAREST_EXACT)))


def _resize(item: Item, p: Params) -> None:
    size = [int(v) for v in p["size"]]
    item.geometry(p, lambda x: F.resize(x, size, antialias=True),
                  _as_plain(lambda m: F.resize(m, size, interpolation=InterpolationMode.NEAREST_EXACT)))


def _flip(item: Item, p: Params) -> None:
    if int(p["flip"]):
        item.geometry(p, F.horizontal_flip)


def _rotate(item: Item, p: Params, spec: PipelineSpec) -> None:
    angle = float(p["angle"])
    item.geometry(p, lambda x: F.rotate(x, angle, interpolation=InterpolationMode.BILINEAR, fill=0),
                  _as_plain(lambda m: F.rotate(m, angle, interpolation=InterpolationMode.NEAREST,
                                               fill=spec.ignore_index)))


def _iou_crop(item: Item, p: Params, spec: PipelineSpec) -> None:
    if item.boxes is not None:  # boxes whose centre leaves the window are dropped, as v2.RandomIoUCrop does
        window = np.array([p["left"], p["top"], p["left"] + p["width"], p["top"] + p["height"]], np.float64)
        outside = torch.from_numpy(~bx.centered_in(item.boxes.numpy(), window))
        item.boxes[outside] = 0.0
        assert item.raw_boxes is not None  # set with the boxes
        item.raw_boxes[outside.numpy()] = 0.0
    _window(item, p, spec)


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
        item.image[:, top:top + h, left:left + w] = fill


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
        img = policy._apply_image_or_video_transform(img, name, magnitude, interpolation=InterpolationMode.NEAREST,
                                                     fill=policy._fill)
    item.image = img


_IMAGE_ONLY = "it shears, translates and rotates the image without its targets"

#: op type -> Lowering(apply(item, params, op, spec)).
LOWERINGS = {
    O.Decode: Lowering(lambda item, p, op, spec: None),
    O.RandomResizedCrop: Lowering(lambda item, p, op, spec: _resized_crop(item, p, op.size)),
    O.Resize: Lowering(lambda item, p, op, spec: _resize(item, p)),
    O.RandomResize: Lowering(lambda item, p, op, spec: _resize(item, p)),
    O.CenterCrop: Lowering(lambda item, p, op, spec: _window(item, p, spec)),
    O.RandomCrop: Lowering(lambda item, p, op, spec: _window(item, p, spec)),
    O.PadTo: Lowering(lambda item, p, op, spec: _window(item, p, spec, _fill(op))),
    O.RandomZoomOut: Lowering(lambda item, p, op, spec: _window(
        item, {**p, "top": -p["top"], "left": -p["left"], "height": p["size"][0], "width": p["size"][1]}, spec,
        _fill(op))),
    O.RandomIoUCrop: Lowering(lambda item, p, op, spec: _iou_crop(item, p, spec)),
    O.HorizontalFlip: Lowering(lambda item, p, op, spec: _flip(item, p)),
    O.RandomRotation: Lowering(lambda item, p, op, spec: _rotate(item, p, spec)),
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
