"""The torchvision lowering: each op applied with its planned parameters by ``transforms.v2`` kernels.

A sample travels as an ``Item``: the image (``(3, H, W)`` uint8) and
its target's state (``None`` for image-level targets). A geometric op is a
pixel *kernel* (``kernel(x, fill=..., nearest=...)`` on a plain ``(C, H, W)``
tensor: a window, resize, flip or rotation) applied to the image, then
handed with the op's parameters to the target's lowering
(``targets``, ``move``): a mask samples the same kernel
nearest-neighbour, boxes move by the op's affine map. So the target gets the
image's exact window, coin and angle.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

from ... import ops as O
from ...ops.pixel import AUTO_AUGMENT_OPS
from ...ops.registry import LoweringTable, lowering_table
from ...plan.spec import PipelineSpec
from ...targets import IMAGE_LEVEL
from ...targets.base import Kernel

if TYPE_CHECKING:
    from .targets import TorchvisionTarget

Params = dict[str, np.ndarray]


@dataclass
class Item:
    """One sample on its way through the ops: the image and its target's state."""

    image: torch.Tensor
    target: TorchvisionTarget | None = None
    state: Any = None

    @property
    def size(self):
        return self.image.shape[-2:]

    def geometry(self, params: Params, op: O.Op, spec: PipelineSpec, kernel: Kernel, fill: Any = 0) -> None:
        """Applies one geometric ``kernel`` to the image (``fill`` where no pixel maps) and moves the target."""
        self.image = kernel(self.image, fill=fill, nearest=False)
        if self.target is not None and self.state is not None:
            self.state = self.target.move(self.state, kernel, params, op, spec)


class TorchvisionLowering(Protocol):
    """A torchvision lowering: applies op ``op`` with its planned parameters to one sample, in place."""

    def __call__(self, item: Item, p: Params, op: Any, spec: PipelineSpec, /) -> None: ...


#: op type -> its lowering, registered with ``@lowering(OpType)`` next to each function below.
LOWERINGS: LoweringTable[TorchvisionLowering] = lowering_table("torchvision")
lowering = LOWERINGS.register


def _paste(x: torch.Tensor, top: int, left: int, h: int, w: int, fill) -> torch.Tensor:
    """The window ``(top, left, h, w)`` of ``x``; parts outside it take ``fill`` (a number or one per channel)."""
    height, width = x.shape[-2:]
    if 0 <= top and 0 <= left and top + h <= height and left + w <= width:
        return x[..., top : top + h, left : left + w]
    fill = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,)
    out = torch.empty((*x.shape[:-2], h, w), dtype=x.dtype, device=x.device)
    out[...] = torch.tensor(fill, dtype=x.dtype, device=x.device).view(-1, 1, 1) if len(fill) > 1 else fill[0]
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, height), min(left + w, width)
    if y1 > y0 and x1 > x0:
        out[..., y0 - top : y1 - top, x0 - left : x1 - left] = x[..., y0:y1, x0:x1]
    return out


def _resized(x: torch.Tensor, size: list[int], nearest: bool) -> torch.Tensor:
    """``x`` ``(C, H, W)`` resized to ``size``: bilinear with antialiasing, or nearest-neighbour by the
    documented rule, output pixel ``j`` reading source pixel ``floor((2j + 1) * H / (2h))`` in integers
    (torch's ``NEAREST_EXACT`` takes it in float32 and reads the pixel above at some sizes, e.g. 2 -> 41)."""
    if not nearest:
        return F.resize(x, size, interpolation=InterpolationMode.BILINEAR, antialias=True)
    rows, cols = ((torch.arange(n, device=x.device) * 2 + 1) * m // (2 * n) for m, n in zip(x.shape[-2:], size))
    return x[..., rows[:, None], cols]


def _fill(op) -> tuple:
    return tuple(int(round(v)) for v in op.fill)


def _window(item: Item, p: Params, op: O.Op, spec: PipelineSpec, fill=(0, 0, 0)) -> None:
    """Crops the window ``(top, left, height, width)``; parts outside the image take ``fill``."""
    top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
    item.geometry(p, op, spec, lambda x, fill, nearest=False: _paste(x, top, left, h, w, fill), fill)


@lowering(O.CenterCrop, O.RandomCrop, O.RandomIoUCrop)
def _crop(item: Item, p: Params, op: O.Op, spec: PipelineSpec) -> None:
    _window(item, p, op, spec)


@lowering(O.RandomZoomOut)
def _zoom_out(item: Item, p: Params, op: O.RandomZoomOut, spec: PipelineSpec) -> None:
    window = {**p, "top": -p["top"], "left": -p["left"], "height": p["size"][0], "width": p["size"][1]}
    _window(item, window, op, spec, _fill(op))


@lowering(O.RandomResizedCrop)
def _resized_crop(item: Item, p: Params, op: O.RandomResizedCrop, spec: PipelineSpec) -> None:
    top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
    size = [int(v) for v in op.size]
    item.geometry(
        p,
        op,
        spec,
        lambda x, fill=0, nearest=False: _resized(x[..., top : top + h, left : left + w], size, nearest),
    )


@lowering(O.Resize, O.RandomResize)
def _resize(item: Item, p: Params, op: O.Op, spec: PipelineSpec) -> None:
    size = [int(v) for v in p["size"]]
    item.geometry(
        p,
        op,
        spec,
        lambda x, fill=0, nearest=False: _resized(x, size, nearest),
    )


@lowering(O.HorizontalFlip)
def _flip(item: Item, p: Params, op: O.HorizontalFlip, spec: PipelineSpec) -> None:
    if int(p["flip"]):
        item.geometry(p, op, spec, lambda x, fill=0, nearest=False: F.horizontal_flip(x))


@lowering(O.VerticalFlip)
def _vflip(item: Item, p: Params, op: O.VerticalFlip, spec: PipelineSpec) -> None:
    if int(p["flip"]):
        item.geometry(p, op, spec, lambda x, fill=0, nearest=False: F.vertical_flip(x))


@lowering(O.RandomAffine)
def _affine(item: Item, p: Params, op: O.RandomAffine, spec: PipelineSpec) -> None:
    """``v2.functional.affine`` with the planned angle, shift, scale and shears (masks: nearest)."""
    angle, scale = float(p["angle"]), float(p["scale"])
    shift, shear = [float(p["tx"]), float(p["ty"])], [float(p["shear_x"]), float(p["shear_y"])]
    center = None if op.center is None else list(op.center)

    def kernel(x, fill, nearest=False):
        nearest = nearest or op.interpolation == "nearest"
        if nearest and op.scale_only:  # rows stay rows: gathered exactly
            cx, cy = (None, None) if op.center is None else op.center
            rows = scaled_indices(x.shape[-2], scale, shift[1], cy)
            cols = scaled_indices(x.shape[-1], scale, shift[0], cx)
            padded = _paste(x, 0, 0, x.shape[-2] + 1, x.shape[-1] + 1, fill)
            return padded[..., rows[:, None].to(x.device), cols.to(x.device)]
        if nearest:
            turn = inverse_coefficients(angle, *shear)
            return warp_nearest(x, turn, fill, shift=shift, scale=scale, centre=op.center)
        fill = fill if isinstance(fill, (int, float)) else list(fill)
        return F.affine(
            x, angle, shift, scale, shear, interpolation=InterpolationMode.BILINEAR, fill=fill, center=center
        )

    item.geometry(p, op, spec, kernel, _fill(op))


def scaled_indices(n: int, scale: float, shift: float, centre: float | None) -> torch.Tensor:
    """``(n,)`` int64: pixel ``j`` of a side ``n`` scaled by ``scale`` about ``centre`` (``None``: ``n / 2``) and
    shifted by ``shift`` reads source pixel ``floor((2j + 1 - 2 centre - 2 shift) / (2 scale) + centre)`` (its
    centre mapped back, floored: on an edge, the pixel after it), in float64 with the IEEE operations DALI's
    lowering uses (``_scaled_index_map``); ``n`` (a row or column of fill appended) outside ``[0, n)``.
    ``grid_sample``'s nearest rounds half to even in float32 and takes either side of such an edge."""
    c = n * 0.5 if centre is None else float(centre)
    j = torch.arange(n, dtype=torch.float64)
    q = torch.floor((j * 2.0 + 1.0 - c * 2.0 - float(shift) * 2.0) / (float(scale) * 2.0) + c)
    return torch.where((q >= 0) & (q < n), q, torch.full_like(q, n)).long()


@lowering(O.RandomRotation)
def _rotate(item: Item, p: Params, op: O.RandomRotation, spec: PipelineSpec) -> None:
    angle = float(p["angle"])

    def kernel(x, fill, nearest=False):
        if nearest:  # by the documented rule; ``F.rotate`` turns by -angle, clockwise
            return warp_nearest(x, inverse_coefficients(-angle), fill)
        fill = fill if isinstance(fill, (int, float)) else list(fill)
        return F.rotate(x, angle, interpolation=InterpolationMode.BILINEAR, fill=fill)

    item.geometry(p, op, spec, kernel)


#: A source point this close before an edge (in pixels) counts as on it: as DALI's ``lowering_warp.EDGE``.
EDGE = 2.0**-20


def inverse_coefficients(angle: float, shear_x: float = 0.0, shear_y: float = 0.0) -> tuple[float, ...]:
    """``(a, b, c, d)`` of torchvision's affine matrix for a clockwise ``angle`` and shears (degrees), in
    float64 as DALI's ``lowering_warp.inverse_coefficients``; its inverse is ``[[d, -b], [-c, a]]``."""
    rot, sx, sy = (v * (math.pi / 180.0) for v in (angle, shear_x, shear_y))
    a = math.cos(rot - sy) / math.cos(sy)
    c = math.sin(rot - sy) / math.cos(sy)
    return a, -(a * math.tan(sx) + math.sin(rot)), c, math.cos(rot) - c * math.tan(sx)


def warp_nearest(x: torch.Tensor, turn, fill, *, shift=(0.0, 0.0), scale=1.0, centre=None) -> torch.Tensor:
    """``x`` ``(C, H, W)`` warped nearest-neighbour by the documented rule: output pixel ``(i, j)``'s centre
    moved back through the inverse map ``turn`` (``inverse_coefficients``), scale and shift about ``centre``
    (``None``: the image's centre), floored, a point within ``EDGE`` before an edge taken as on it; ``fill``
    outside. The same float64 rule as DALI's ``lowering_warp.warp_nearest`` (``grid_sample``'s nearest takes
    the position in float32 and picks either side of an edge: a quarter turn of a 12x13 mask, where every
    centre lands on one, read 242 of 312 pixels unlike DALI's float32 warp)."""
    h, w = x.shape[-2:]
    cx, cy = (w * 0.5, h * 0.5) if centre is None else (float(centre[0]), float(centre[1]))
    a, b, c, d = (v / float(scale) for v in turn)
    dy = torch.arange(h, dtype=torch.float64)[:, None] + 0.5 - cy - float(shift[1])
    dx = torch.arange(w, dtype=torch.float64)[None, :] + 0.5 - cx - float(shift[0])
    col = torch.floor((d * dx + cx + EDGE) - b * dy)
    row = torch.floor((a * dy + cy + EDGE) - c * dx)
    inside = (row >= 0) & (row < h) & (col >= 0) & (col < w)
    rows, cols = torch.where(inside, row, float(h)).long(), torch.where(inside, col, float(w)).long()
    padded = _paste(x, 0, 0, h + 1, w + 1, fill)
    return padded[..., rows.to(x.device), cols.to(x.device)]


@lowering(O.ColorJitter)
def _color_jitter(item: Item, p: Params, op: O.ColorJitter, spec: PipelineSpec) -> None:
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


@lowering(O.RandomGrayscale)
def _grayscale(item: Item, p: Params, op: O.RandomGrayscale, spec: PipelineSpec) -> None:
    if int(p["gray"]):
        item.image = F.rgb_to_grayscale(item.image, num_output_channels=3)


@lowering(O.GaussianBlur)
def _blur(item: Item, p: Params, op: O.GaussianBlur, spec: PipelineSpec) -> None:
    sigma, r = float(p["sigma"]), op.kernel // 2
    # Reflected past the edge as DALI reflects (``reflect 101``, again and again where the image is narrower than
    # the kernel's half: torch's reflect pad refuses that), then blurred and the added border cut off.
    rows, cols = (_reflect_101(n, r, item.image.device) for n in item.image.shape[-2:])
    padded = item.image[..., rows[:, None], cols]
    item.image = F.gaussian_blur(padded, [op.kernel, op.kernel], [sigma, sigma])[
        ..., r : r + len(rows) - 2 * r, r : r + len(cols) - 2 * r
    ]


def _reflect_101(n: int, r: int, device) -> torch.Tensor:
    """``(n + 2r,)`` the source index of each position ``-r .. n + r - 1`` reflected about the edge pixels."""
    i = torch.arange(-r, n + r, device=device)
    if n == 1:
        return torch.zeros_like(i)
    i = i.remainder(2 * (n - 1))
    return torch.where(i >= n, 2 * (n - 1) - i, i)


@lowering(O.RandomErasing)
def _erase(item: Item, p: Params, op: O.RandomErasing, spec: PipelineSpec) -> None:
    if int(p["erase"]):
        top, left, h, w = int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"])
        fill = torch.tensor([round(255 * m) for m in spec.mean], dtype=item.image.dtype).view(3, 1, 1)
        item.image = item.image.clone()
        item.image[:, top : top + h, left : left + w] = fill


_IMAGE_ONLY = "it shears, translates and rotates the image without its targets"
_POLICIES = {O.RandAugment: v2.RandAugment, O.TrivialAugment: v2.TrivialAugmentWide, O.AutoAugment: v2.AutoAugment}


@functools.lru_cache(maxsize=16)
def _policy(op: Any) -> Any:
    """The torchvision transform whose ops and magnitudes ``op`` applies, with its interpolation and fill."""
    return _POLICIES[type(op)](interpolation=InterpolationMode(op.interpolation), fill=list(_fill(op)))


@lowering(O.RandAugment, O.TrivialAugment, O.AutoAugment, targets=IMAGE_LEVEL, why=_IMAGE_ONLY)
def _auto_augment(item: Item, p: Params, op: Any, spec: PipelineSpec) -> None:
    """The planned ops of RandAugment / TrivialAugment Wide / AutoAugment, with torchvision's magnitudes."""
    policy = _policy(op)
    names = AUTO_AUGMENT_OPS if isinstance(op, O.AutoAugment) else O.AUGMENT_OPS
    height, width = item.size
    img = item.image
    levels = np.broadcast_to(p["bins"], p["ops"].shape) if "bins" in p else np.full(p["ops"].shape, op.magnitude)
    for index, sign, level in zip(p["ops"], p["signs"], levels):
        name = names[int(index)]
        if name == "Identity":
            continue
        magnitudes_fn, signed = policy._AUGMENTATION_SPACE[name]
        magnitudes = magnitudes_fn(op.num_magnitude_bins, height, width)
        if magnitudes is not None and magnitudes.ndim > 0:
            magnitude = float(magnitudes[int(level)])
            if signed and int(sign):
                magnitude = -magnitude
        else:
            magnitude = 0.0
        img = policy._apply_image_or_video_transform(
            img, name, magnitude, interpolation=policy.interpolation, fill=policy._fill
        )
    item.image = img


@lowering(O.Decode)
def _decode(item: Item, p: Params, op: O.Decode, spec: PipelineSpec) -> None:
    """Nothing: the backend decodes before the ops run."""


@lowering(O.PadTo)
def _pad_to(item: Item, p: Params, op: O.PadTo, spec: PipelineSpec) -> None:
    _window(item, p, op, spec, _fill(op))


def apply_ops(item: Item, spec: PipelineSpec, steps) -> Item:
    """Applies every op of ``spec`` (after ``Decode``) with its planned parameters."""
    for op, params in zip(spec.ops, steps):
        LOWERINGS[type(op)].apply(item, params, op, spec)
    return item
