"""The ``"torch"`` form: the auto-augment policies and random erasing as batched torch ops on DALI's output.

On an H200 (batch 256, 224 px, ``benchmarks/results/h200-2026-11-27-2``) RandAugment (n=2) cost 13.0 ms per
batch in DALI's operators (the fused chain of ``augment_fused``) and random erasing 6.6 ms, against 15 ms for the
whole decode and crop: DALI runs them per sample. Here, when a spec ends with them, DALI's graph stops before
them and gives the uint8 batch; each level is then the same chain as ``augment_fused.lower_fused``, with the same
per-sample parameters (``host_params``, worked out on the planning thread), as a few kernels over the whole batch:

1. DALI's ``warp_affine`` (the shears, translations and rotation) as gathers from the batch (pixel centres
   at ``+0.5``, taps outside the image take the fill; each centre mapped in the float arithmetic of DALI's kernel
   on that device, which decides the pixel read where a point falls on a pixel's edge);
2. DALI's ``saturation`` (its colour-twist matrix) and a per-sample 3x3 ``filter`` (borders reflected as
   DALI's ``reflect_101``);
3. the per-channel ``x * A + B`` of Brightness, Contrast and AutoContrast;
4. posterize and solarize as integer operations; Equalize from a batched histogram, picked per sample.

Every step rounds to uint8 as DALI's operator does, so the images are DALI's (``tests/test_dali_torch_form.py``:
within one level on 0.1 % of pixels, 0.5 % with bilinear sampling). Random erasing fills each planned
rectangle with the mean, as ``fn.erase``. The batch then goes to the ``Place.FINISH`` step (normalisation), as
``dali-cpu``'s uint8 batches do. Only for image-level targets: a policy's geometry must move masks and boxes,
which DALI's graph does.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import torch
import torch.nn.functional as F

from ... import ops as O
from ...ops import Output
from ...plan.spec import PipelineSpec
from .augment import one_fill
from .augment_fused import POLICIES, host_params, levels_of

#: The ops the ``"torch"`` form runs after DALI's graph (a spec's trailing run of them).
TAIL_OPS = (*POLICIES, O.RandomErasing)
#: DALI's ``saturation`` at 0 (``out = rgb @ M``, rows: input channel; measured with DALI 2.4): the colour
#: twist is ``s * I + (1 - s) * GREY_TWIST`` (its YIQ round trip, not quite PIL's grey weights).
GREY_TWIST = torch.tensor(
    [
        [0.2989000082015991, 0.2988879978656769, 0.2998409867286682],
        [0.5868030190467834, 0.5867800116539001, 0.5886510014533997],
        [0.11396200209856033, 0.1139570027589798, 0.11432100087404251],
    ]
)
_RGB_WEIGHTS = torch.tensor([0.299, 0.587, 0.114])
#: Per level: ``matrix`` 6, ``kernel`` 9, then one number each (``host_params``' names).
_LEVEL = (
    ("matrix", 6),
    ("kernel", 9),
    ("saturation", 1),
    ("scale", 1),
    ("contrast", 1),
    ("autocontrast", 1),
    ("threshold", 1),
    ("posterize", 1),
    ("equalize", 1),
)
_ERASE = ("top", "left", "height", "width")


@dataclasses.dataclass(frozen=True)
class TorchTail:
    """The trailing ops of a spec that run as torch ops on DALI's uint8 output.

    Attributes:
        spec: the whole pipeline.
        start: the index of the first op of the tail in ``spec.ops``.

    Raises:
        ValueError: a policy's ``fill`` differs per channel (``augment.one_fill``).
    """

    spec: PipelineSpec
    start: int

    def __post_init__(self) -> None:
        for op in self.ops:  # refused when the loader is built, as the graph's lowering refuses it
            if isinstance(op, POLICIES):
                one_fill(op)

    @property
    def ops(self) -> tuple[O.Op, ...]:
        return self.spec.ops[self.start :]

    def graph_spec(self) -> PipelineSpec:
        """The spec DALI's graph computes: the ops before the tail, uint8 output in the same memory format."""
        return dataclasses.replace(
            self.spec,
            ops=self.spec.ops[: self.start],
            sizes=self.spec.sizes[: self.start],
            output=Output("uint8", channels_last=self.spec.output.channels_last),
        )

    def pack(self, steps: list[dict[str, np.ndarray]], count: int) -> np.ndarray:
        """``(count, P)`` float32: every sample's parameters of the tail's ops from the plan's ``steps`` (per
        policy level ``_LEVEL``, the warp as its inverse map; per erasing top, left, height, width)."""
        columns: list[np.ndarray] = []
        for j, op in enumerate(self.ops, self.start):
            if isinstance(op, O.RandomErasing):
                step = steps[j]
                on = np.asarray(step["erase"]).reshape(count, 1)
                bounds = np.stack([np.asarray(step[k]).reshape(count) for k in _ERASE], 1)
                bounds[:, 2:] *= on
                columns.append(bounds.astype(np.float32))
                continue
            size = self.spec.size_before(j)
            assert size is not None  # the policies need images of one size (refused in build_spec)
            params = host_params(op, steps[j], size)
            for level in range(levels_of(op)):
                for name, width in _LEVEL:
                    value = np.asarray(params[f"{name}{level}"], np.float64).reshape(count, width)
                    if name == "matrix":  # the map from output to source pixels, inverted here, not on the GPU
                        forward = np.concatenate(
                            [value.reshape(count, 2, 3), np.tile([[[0.0, 0.0, 1.0]]], (count, 1, 1))], 1
                        )
                        value = np.linalg.inv(forward)[:, :2].reshape(count, 6)
                    columns.append(value.astype(np.float32))
        return np.concatenate(columns, 1) if columns else np.zeros((count, 0), np.float32)  # num_ops=0: none

    def apply(self, images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """The tail on ``images`` uint8 ``(B, 3, H, W)`` with ``pack``'s ``params`` ``(B, P)`` (same device)."""
        x, col = images, 0
        for op in self.ops:
            if isinstance(op, O.RandomErasing):
                x = erase(x, params[:, col : col + 4], self.spec.mean)
                col += 4
                continue
            assert isinstance(op, POLICIES)
            fill, nearest = _fill_level(op), op.interpolation == "nearest"
            for _ in range(levels_of(op)):
                level = {}
                for name, width in _LEVEL:
                    level[name] = params[:, col : col + width]
                    col += width
                x = policy_level(x, level, fill, nearest)
        return x


def _fill_level(op: O.Op) -> float:
    """The uint8 level DALI's ``warp_affine`` fills with for the policy ``op``: its one ``fill`` value rounded
    to the nearest level, halves away from zero, and saturated (a fill of 0.5 reads 1, not 0.5 or 0)."""
    return float(min(max(np.floor(one_fill(op) + 0.5), 0.0), 255.0))


def tail_of(spec: PipelineSpec, *, targets_move: bool) -> TorchTail | None:
    """The trailing run of ``TAIL_OPS`` of ``spec``, or ``None`` where it has none or its targets move with
    the pixels (``targets_move``: masks, boxes, which DALI's graph moves)."""
    start = len(spec.ops)
    while start > 0 and isinstance(spec.ops[start - 1], TAIL_OPS):
        start -= 1
    if start == len(spec.ops) or targets_move:
        return None
    return TorchTail(spec, start)


@functools.lru_cache(maxsize=32)
def _on(name: str, device: torch.device, mean: tuple[float, ...] = ()) -> torch.Tensor:
    """A constant on ``device``, copied there once (a copy from pageable memory per batch would wait for the
    stream, i.e. for the training step queued before it): ``"grey_twist"``, ``"rgb_weights"`` or ``"fill"``
    (``mean``'s levels, uint8)."""
    if name == "fill":
        return torch.tensor([round(255 * m) for m in mean], dtype=torch.uint8).to(device)
    return {"grey_twist": GREY_TWIST, "rgb_weights": _RGB_WEIGHTS}[name].to(device)


def _to_uint8(y: torch.Tensor) -> torch.Tensor:
    return y.add_(0.5).floor_().clamp_(0, 255).to(torch.uint8)  # halves away from zero, as DALI rounds


def warp(x: torch.Tensor, inverse: torch.Tensor, fill: float, nearest: bool) -> torch.Tensor:
    """DALI's ``warp_affine`` (``inverse_map=False``) on uint8 ``(B, C, H, W)``: ``inverse`` ``(B, 2, 3)`` maps
    output pixel coordinates (centres at ``+0.5``) to the source's; taps outside the image take ``fill``.
    Sampled as DALI's samplers do (nearest: the pixel under the point; linear: two horizontal blends, then a
    vertical one, from the point less half a pixel), so that the images are DALI's to the rounding."""
    b, c, h, w = x.shape
    px, py = _source_points(inverse.reshape(b, 2, 3), h, w)
    flat = x.reshape(b, c, h * w).float()

    def tap(col: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        inside = ((col >= 0) & (col < w) & (row >= 0) & (row < h)).unsqueeze(1)
        index = (row.clamp(0, h - 1) * w + col.clamp(0, w - 1)).view(b, 1, h * w).expand(b, c, h * w)
        return torch.where(inside, flat.gather(2, index).view(b, c, h, w), float(fill))

    if nearest:
        return tap(px.floor().long(), py.floor().long()).to(torch.uint8)
    fx, fy = px - 0.5, py - 0.5
    left, top = fx.floor(), fy.floor()
    qx, qy = (fx - left).unsqueeze(1), (fy - top).unsqueeze(1)
    col, row = left.long(), top.long()
    upper = tap(col, row) * (1 - qx) + tap(col + 1, row) * qx
    lower = tap(col, row + 1) * (1 - qx) + tap(col + 1, row + 1) * qx
    return _to_uint8(upper + (lower - upper) * qy)


def _source_points(inverse: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` ``(B, H, W)`` float32: where each output pixel's centre maps to in the source, rounded as DALI
    rounds it: ``t + a * x + b * y`` (``inverse`` ``(B, 2, 3)``, rows ``(a, b, t)``), summed left to right. DALI's
    GPU kernel maps every centre, its products fused into the sums (``nvcc``'s default FMA contraction, made
    here in float64: a float32 product is exact there); its CPU kernel maps each row's first centre and adds
    ``a`` pixel by pixel. Where a point falls on a pixel's edge (a shear of 0.2 puts whole columns there) each
    rounding reads another pixel, so each device's is followed."""
    gpu = inverse.device.type != "cpu"
    kind = torch.float64 if gpu else torch.float32
    rows = torch.arange(h, dtype=kind, device=inverse.device).view(1, h, 1) + 0.5
    points = []
    for k in range(2):
        a, b, t = (inverse[:, k, j].to(kind).view(-1, 1, 1) for j in range(3))
        if gpu:
            cols = torch.arange(w, dtype=kind, device=inverse.device).view(1, 1, w) + 0.5
            first = (t + a * cols).float().double()  # fma(a, x, t), rounded to float32
            points.append((first + b * rows).float())  # fma(b, y, first)
            continue
        point = (t + a * 0.5) + b * rows  # (B, H, 1): each row's first centre
        columns = [point]
        for _ in range(w - 1):
            point = point + a
            columns.append(point)
        points.append(torch.cat(columns, 2))
    return points[0], points[1]


def saturation(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """DALI's ``saturation`` with per-sample ``s`` ``(B, 1)``."""
    eye = torch.eye(3, device=x.device)
    twist = s.view(-1, 1, 1) * eye + (1 - s.view(-1, 1, 1)) * _on("grey_twist", x.device)  # (B, 3 in, 3 out)
    y = torch.einsum("bihw,bio->bohw", x.float(), twist)
    return _to_uint8(y)


def keep_border(filtered: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``filtered`` ``(B, C, H, W)`` with ``x``'s one-pixel border (the whole ``x`` where a side is 2 pixels or
    fewer), as torchvision's ``adjust_sharpness`` and ``augment_suite.keep_border`` give it."""
    if min(x.shape[-2:]) <= 2:
        return x
    out = x.clone()
    out[..., 1:-1, 1:-1] = filtered[..., 1:-1, 1:-1]
    return out


def filter3x3(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """DALI's ``filter`` with a per-sample 3x3 ``kernel`` ``(B, 9)``, borders ``reflect_101``."""
    b, c, h, w = x.shape
    rows, cols = _reflect_101(h, x.device), _reflect_101(w, x.device)
    padded = x.float().reshape(1, b * c, h, w).index_select(2, rows).index_select(3, cols)
    weight = kernel.reshape(b, 1, 1, 3, 3).expand(b, c, 1, 3, 3).reshape(b * c, 1, 3, 3)
    return _to_uint8(F.conv2d(padded, weight, groups=b * c).reshape(b, c, h, w))


def _reflect_101(n: int, device: torch.device) -> torch.Tensor:
    """The indices ``-1 .. n`` of a side of ``n`` pixels reflected as DALI's ``reflect_101`` (``F.pad``'s
    ``"reflect"`` refuses a side of one pixel, which DALI reads as its one pixel)."""
    if n == 1:
        return torch.zeros(3, dtype=torch.long, device=device)
    i = torch.arange(-1, n + 1, device=device).abs()
    return torch.where(i >= n, 2 * (n - 1) - i, i)


def brightness_contrast_autocontrast(x: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    """``x * A + B`` per channel, as ``augment_fused._brightness_contrast_autocontrast``."""
    b = x.shape[0]
    y = x.float()
    mean = y.mean((2, 3), keepdim=True)
    centre = (mean * _on("rgb_weights", x.device).view(1, 3, 1, 1)).sum(1, keepdim=True)
    lo, hi = y.amin((2, 3), keepdim=True), y.amax((2, 3), keepdim=True)
    spread = hi - lo
    stretches = spread > 0
    stretch = 255 / torch.where(stretches, spread, 255.0)
    auto, contrast = p["autocontrast"].view(b, 1, 1, 1), p["contrast"].view(b, 1, 1, 1)
    a = p["scale"].view(b, 1, 1, 1) * (1 - auto) + stretch * auto
    shift = centre * (1 - contrast) - lo * stretches * stretch * auto
    return _to_uint8(y * a + shift)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Per image and channel histogram equalisation of uint8 ``(B, C, H, W)``, as DALI's ``equalize``."""
    b, c, h, w = x.shape
    flat = x.reshape(b * c, h * w).long()
    # (bincount would wait for the GPU: its size); integer counts, exact in any order: under
    # torch.use_deterministic_algorithms a float scatter_add_ on CUDA takes torch's slower sorted route
    ones = torch.ones(1, 1, dtype=torch.int32, device=x.device).expand(b * c, h * w)
    hist = torch.zeros(b * c, 256, dtype=torch.int32, device=x.device).scatter_add_(1, flat, ones)
    cdf = hist.cumsum(1)
    first = cdf.gather(1, (hist > 0).float().argmax(1, keepdim=True))  # the count of the lowest level present
    scale = 255 / (h * w - first).clamp(min=1)
    lut = ((cdf - first) * scale).round_().clamp_(0, 255).to(torch.uint8)
    out = lut.gather(1, flat).reshape(b, c, h, w)
    constant = (first == h * w).view(b, c, 1, 1)  # one level only: left as it is
    return torch.where(constant, x, out)


def policy_level(x: torch.Tensor, p: dict[str, torch.Tensor], fill: float, nearest: bool) -> torch.Tensor:
    """One level of the fused chain on uint8 ``(B, 3, H, W)`` with its per-sample parameters ``p``."""
    b = x.shape[0]
    x = warp(x, p["matrix"], fill, nearest)
    x = saturation(x, p["saturation"])
    x = keep_border(filter3x3(x, p["kernel"]), x)
    x = brightness_contrast_autocontrast(x, p)
    x = x & p["posterize"].to(torch.uint8).view(b, 1, 1, 1)
    x = torch.where(x.float() >= p["threshold"].view(b, 1, 1, 1), 255 - x, x)
    return torch.where(p["equalize"].view(b, 1, 1, 1) > 0, equalize(x), x)


def erase(x: torch.Tensor, bounds: torch.Tensor, mean: tuple[float, float, float]) -> torch.Tensor:
    """``x`` uint8 ``(B, 3, H, W)`` with each sample's rectangle (``bounds`` ``(B, 4)``: top, left, height,
    width; height 0: none) filled with the mean, as ``fn.erase``."""
    rows = torch.arange(x.shape[2], device=x.device).view(1, -1, 1)
    cols = torch.arange(x.shape[3], device=x.device).view(1, 1, -1)
    top, left, height, width = (bounds[:, k].view(-1, 1, 1) for k in range(4))
    inside = (rows >= top) & (rows < top + height) & (cols >= left) & (cols < left + width)
    fill = _on("fill", x.device, tuple(mean)).view(1, 3, 1, 1)
    return torch.where(inside.unsqueeze(1), fill, x)


__all__ = ["TAIL_OPS", "TorchTail", "policy_level", "tail_of"]
