"""Each op's parameters for a batch of samples, drawn as torchvision draws them.

One function per op type, vectorised over the batch, registered as the op's
planner with ``@planner(OpType)`` (``gpupipe.ops.registry``). A function gets the
op and a ``Step`` (the samples' keys and current sizes) and returns
the op's parameters as arrays with a leading batch axis; geometric ops
also return ``size`` (``(B, 2)``, the output ``(h, w)``) and ``affine``
(``(B, 2, 3)``, how they move pixel coordinates); a resize also its input ``source``
(``(B, 2)``: a mask's exact nearest-neighbour index map needs it). Every random number comes
from ``gpupipe.plan.seeding.uniforms`` on the sample's key, so a sample gets
the same parameters in a batch of one or of many, on every backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import ops as O
from ..ops.registry import PLANNERS, planner
from ..targets import boxmath as bx
from . import affine as maps
from .seeding import uniforms

Params = dict[str, np.ndarray]


@dataclass
class Step:
    """What an op's planner sees.

    Attributes:
        keys: ``(B,)`` uint64 sample keys.
        sizes: ``(B, 2)`` int64 ``(h, w)`` of the images the op receives.
        stream: the op's own block of random streams.
        boxes: per sample ``(N, 4)`` boxes as the op receives them (only when an op needs them).
    """

    keys: np.ndarray
    sizes: np.ndarray
    stream: int
    boxes: list[np.ndarray] | None = None

    def uniform(self, sub: int = 0, count: int = 1) -> np.ndarray:
        """``(B, count)`` draws in ``[0, 1)`` from sub-stream ``sub`` of this op."""
        return uniforms(self.keys, self.stream + sub, count)

    def coin(self, p: float, sub: int = 0) -> np.ndarray:
        """``(B,)`` booleans, true with probability ``p``."""
        return self.uniform(sub)[:, 0] < p

    @property
    def heights(self) -> np.ndarray:
        return self.sizes[:, 0]

    @property
    def widths(self) -> np.ndarray:
        return self.sizes[:, 1]


def _between(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return lo + (hi - lo) * u


def _randint(u: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Uniform integers in ``[0, count)`` (``count >= 1``)."""
    return np.minimum(np.floor(u * count), count - 1).astype(np.int64)


def _geometry(out_sizes: np.ndarray, affine: np.ndarray, **params) -> Params:
    return {"size": np.asarray(out_sizes, np.int64), "affine": affine.astype(np.float32), **params}


def _window_params(top, left, height, width) -> Params:
    return {
        "top": np.asarray(top, np.int64),
        "left": np.asarray(left, np.int64),
        "height": np.asarray(height, np.int64),
        "width": np.asarray(width, np.int64),
    }


@planner(O.RandomResizedCrop)
def random_resized_crop(op: O.RandomResizedCrop, s: Step) -> Params:
    """torchvision's ``RandomResizedCrop.get_params``: 10 tries, then a central fallback."""
    h_img, w_img = s.heights[:, None].astype(np.float64), s.widths[:, None].astype(np.float64)
    u = s.uniform(0, 40).reshape(-1, 10, 4)
    area = h_img * w_img * _between(u[..., 0], *op.scale)
    log_ratio = np.log(op.ratio)
    aspect = np.exp(_between(u[..., 1], *log_ratio))
    w = np.round(np.sqrt(area * aspect))
    h = np.round(np.sqrt(area / aspect))
    ok = (w > 0) & (w <= w_img) & (h > 0) & (h <= h_img)
    first = np.argmax(ok, axis=1)
    rows = np.arange(len(first))
    found = ok[rows, first]
    h_try, w_try = h[rows, first].astype(np.int64), w[rows, first].astype(np.int64)
    top_try = _randint(u[rows, first, 2], s.heights - h_try + 1)
    left_try = _randint(u[rows, first, 3], s.widths - w_try + 1)
    # Fallback: the whole image, its aspect ratio clamped into ``ratio``, centred.
    in_ratio = s.widths / s.heights
    w_fb = np.where(
        in_ratio < op.ratio[0], s.widths, np.where(in_ratio > op.ratio[1], np.round(s.heights * op.ratio[1]), s.widths)
    ).astype(np.int64)
    h_fb = np.where(in_ratio < op.ratio[0], np.round(s.widths / op.ratio[0]), s.heights).astype(np.int64)
    h_fb, w_fb = np.minimum(h_fb, s.heights), np.minimum(w_fb, s.widths)
    h_c = np.where(found, h_try, h_fb)
    w_c = np.where(found, w_try, w_fb)
    top = np.where(found, top_try, (s.heights - h_fb) // 2)
    left = np.where(found, left_try, (s.widths - w_fb) // 2)
    out = np.tile(np.asarray(op.size, np.int64), (len(top), 1))
    affine = maps.crop_resize(top, left, h_c, w_c, out[:, 0], out[:, 1])
    return _geometry(out, affine, **_window_params(top, left, h_c, w_c))


@planner(O.Resize)
def resize(op: O.Resize, s: Step) -> Params:
    out = np.array([op.resized(int(h), int(w)) for h, w in s.sizes], np.int64).reshape(-1, 2)
    zeros = np.zeros(len(out), np.int64)
    affine = maps.crop_resize(zeros, zeros, s.heights, s.widths, out[:, 0], out[:, 1])
    return _geometry(out, affine, source=np.asarray(s.sizes, np.int64).reshape(-1, 2))


@planner(O.RandomResize)
def random_resize(op: O.RandomResize, s: Step) -> Params:
    short = op.min_size + _randint(s.uniform()[:, 0], np.full(len(s.keys), op.max_size - op.min_size + 1))
    out = np.array(
        [O.Resize(int(side)).resized(int(h), int(w)) for side, (h, w) in zip(short, s.sizes)], np.int64
    ).reshape(-1, 2)
    zeros = np.zeros(len(out), np.int64)
    affine = maps.crop_resize(zeros, zeros, s.heights, s.widths, out[:, 0], out[:, 1])
    return _geometry(out, affine, source=np.asarray(s.sizes, np.int64).reshape(-1, 2))


def _fixed_window(s: Step, size, top, left) -> Params:
    out = np.tile(np.asarray(size, np.int64), (len(s.keys), 1))
    return _geometry(
        out,
        maps.translate(-np.asarray(left, np.float64), -np.asarray(top, np.float64)),
        **_window_params(top, left, out[:, 0], out[:, 1]),
    )


@planner(O.CenterCrop)
def center_crop(op: O.CenterCrop, s: Step) -> Params:
    anchors = np.array([op.anchor(int(h), int(w)) for h, w in s.sizes], np.int64).reshape(-1, 2)
    return _fixed_window(s, op.size, anchors[:, 0], anchors[:, 1])


@planner(O.RandomCrop)
def random_crop(op: O.RandomCrop, s: Step) -> Params:
    """A window inside the image padded (bottom and right) to at least ``size``."""
    h, w = op.size
    u = s.uniform(0, 2)
    top = _randint(u[:, 0], np.maximum(s.heights, h) - h + 1)
    left = _randint(u[:, 1], np.maximum(s.widths, w) - w + 1)
    return _fixed_window(s, op.size, top, left)


@planner(O.PadTo)
def pad_to(op: O.PadTo, s: Step) -> Params:
    zeros = np.zeros(len(s.keys), np.int64)
    return _fixed_window(s, op.size, zeros, zeros)


@planner(O.HorizontalFlip)
def horizontal_flip(op: O.HorizontalFlip, s: Step) -> Params:
    flip = s.coin(op.p)
    return _geometry(s.sizes, maps.hflip(flip, s.widths), flip=flip.astype(np.int32))


@planner(O.VerticalFlip)
def vertical_flip(op: O.VerticalFlip, s: Step) -> Params:
    flip = s.coin(op.p)
    return _geometry(s.sizes, maps.vflip(flip, s.heights), flip=flip.astype(np.int32))


@planner(O.RandomAffine)
def random_affine(op: O.RandomAffine, s: Step) -> Params:
    """``v2.RandomAffine.make_params``: angle, shift (whole pixels, rounded half to even), scale, shears."""
    u = s.uniform(0, 6)
    angle = _between(u[:, 0], *op.degrees)
    zero, one = np.zeros(len(u)), np.ones(len(u))
    tx, ty = zero.copy(), zero.copy()
    if op.translate is not None:
        max_dx, max_dy = op.translate[0] * s.widths, op.translate[1] * s.heights
        tx, ty = np.round(max_dx * (2 * u[:, 1] - 1)), np.round(max_dy * (2 * u[:, 2] - 1))
    scale = one if op.scale is None else _between(u[:, 3], *op.scale)
    shear_x = zero if op.shear is None else _between(u[:, 4], op.shear[0], op.shear[1])
    shear_y = _between(u[:, 5], op.shear[2], op.shear[3]) if op.shear is not None and len(op.shear) == 4 else zero
    cx, cy = (s.widths * 0.5, s.heights * 0.5) if op.center is None else op.center
    params = {"angle": angle, "tx": tx, "ty": ty, "scale": scale, "shear_x": shear_x, "shear_y": shear_y}
    affine = maps.torchvision_affine(angle, tx, ty, scale, shear_x, shear_y, cx, cy)
    return _geometry(s.sizes, affine, **{k: np.asarray(v, np.float32) for k, v in params.items()})


@planner(O.RandomRotation)
def random_rotation(op: O.RandomRotation, s: Step) -> Params:
    angle = _between(s.uniform()[:, 0], *op.degrees)
    return _geometry(s.sizes, maps.rotation(angle, s.heights, s.widths), angle=angle.astype(np.float32))


@planner(O.RandomZoomOut)
def random_zoom_out(op: O.RandomZoomOut, s: Step) -> Params:
    """``v2.RandomZoomOut``: a canvas ``r`` times the image, the image at a random spot; with probability ``p``."""
    u = s.uniform(0, 4)
    apply = u[:, 0] < op.p
    r = _between(u[:, 1], *op.side_range)
    canvas_h = np.where(apply, (s.heights * r).astype(np.int64), s.heights)
    canvas_w = np.where(apply, (s.widths * r).astype(np.int64), s.widths)
    top = np.where(apply, ((canvas_h - s.heights) * u[:, 3]).astype(np.int64), 0)
    left = np.where(apply, ((canvas_w - s.widths) * u[:, 2]).astype(np.int64), 0)
    out = np.stack([canvas_h, canvas_w], axis=1)
    return _geometry(out, maps.translate(left.astype(np.float64), top.astype(np.float64)), top=top, left=left)


#: Outer rounds of ``RandomIoUCrop`` before giving up and keeping the image whole
#: (torchvision loops until it succeeds; "no crop" is one of its options).
IOU_ROUNDS = 64


@planner(O.RandomIoUCrop)
def random_iou_crop(op: O.RandomIoUCrop, s: Step) -> Params:
    """``v2.RandomIoUCrop``'s search, per sample (boxes vary in number)."""
    n = len(s.keys)
    top, left = np.zeros(n, np.int64), np.zeros(n, np.int64)
    height, width = s.heights.copy(), s.widths.copy()
    for i in range(n):
        window = _iou_window(op, s, i)
        if window is not None:
            top[i], left[i], height[i], width[i] = window
    out = np.stack([height, width], axis=1)
    return _geometry(
        out,
        maps.translate(-left.astype(np.float64), -top.astype(np.float64)),
        **_window_params(top, left, height, width),
    )


def _iou_window(op: O.RandomIoUCrop, s: Step, i: int):
    h_img, w_img = int(s.heights[i]), int(s.widths[i])
    boxes = s.boxes[i] if s.boxes is not None else np.zeros((0, 4), np.float32)
    boxes = boxes[bx.area(boxes) > 0]
    key = s.keys[i : i + 1]
    for round_ in range(IOU_ROUNDS):
        u = uniforms(key, s.stream + 1 + round_, 1 + 4 * op.trials)[0]
        min_iou = op.sampler_options[min(int(u[0] * len(op.sampler_options)), len(op.sampler_options) - 1)]
        if min_iou >= 1.0:
            return None
        for t in range(op.trials):
            r0, r1, r2, r3 = u[1 + 4 * t : 5 + 4 * t]
            new_w = int(w_img * _between(r0, op.min_scale, op.max_scale))
            new_h = int(h_img * _between(r1, op.min_scale, op.max_scale))
            if new_h == 0 or not op.min_aspect_ratio <= new_w / new_h <= op.max_aspect_ratio:
                continue
            left = int((w_img - new_w) * r2)
            top = int((h_img - new_h) * r3)
            if new_w == 0:
                continue
            window = np.array([left, top, left + new_w, top + new_h], np.float64)
            inside = bx.centered_in(boxes, window)
            if not inside.any():
                continue
            if bx.iou(boxes[inside].astype(np.float64), window).max() < min_iou:
                continue
            return top, left, new_h, new_w
    return None


@planner(O.ColorJitter)
def color_jitter(op: O.ColorJitter, s: Step) -> Params:
    u = s.uniform(0, 4)
    out = {}
    for k, (name, neutral) in enumerate((("brightness", 1.0), ("contrast", 1.0), ("saturation", 1.0), ("hue", 0.0))):
        bounds = getattr(op, name)
        values = np.full(len(u), neutral) if bounds is None else _between(u[:, k], *bounds)
        out[name] = values.astype(np.float32)
    return out


@planner(O.RandomGrayscale)
def random_grayscale(op: O.RandomGrayscale, s: Step) -> Params:
    return {"gray": s.coin(op.p).astype(np.int32)}


@planner(O.GaussianBlur)
def gaussian_blur(op: O.GaussianBlur, s: Step) -> Params:
    return {"sigma": _between(s.uniform()[:, 0], *op.sigma).astype(np.float32)}


@planner(O.RandomErasing)
def random_erasing(op: O.RandomErasing, s: Step) -> Params:
    """``v2.RandomErasing.make_params``: up to 10 tries for a rectangle that fits, with probability ``p``."""
    h_img, w_img = s.heights[:, None].astype(np.float64), s.widths[:, None].astype(np.float64)
    u = s.uniform(1, 40).reshape(-1, 10, 4)
    area = h_img * w_img * _between(u[..., 0], *op.scale)
    aspect = np.exp(_between(u[..., 1], *np.log(op.ratio)))
    h = np.round(np.sqrt(area * aspect))
    w = np.round(np.sqrt(area / aspect))
    ok = (h < h_img) & (w < w_img)
    first = np.argmax(ok, axis=1)
    rows = np.arange(len(first))
    erase = s.coin(op.p) & ok[rows, first]
    h_c, w_c = h[rows, first].astype(np.int64), w[rows, first].astype(np.int64)
    top = _randint(u[rows, first, 2], s.heights - h_c + 1)
    left = _randint(u[rows, first, 3], s.widths - w_c + 1)
    zero = np.zeros_like(top)
    return {
        "erase": erase.astype(np.int32),
        **_window_params(
            np.where(erase, top, zero),
            np.where(erase, left, zero),
            np.where(erase, h_c, zero),
            np.where(erase, w_c, zero),
        ),
    }


@planner(O.Decode)
def _nothing(op: O.Op, s: Step) -> Params:
    return {}


__all__ = ["PLANNERS", "planner", "Step", "Params", "IOU_ROUNDS"]
