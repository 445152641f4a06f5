"""The DALI lowering: each op as DALI operators applied with its planned parameters.

The parameters arrive through one ``external_source`` (a node per
parameter, see :class:`Params`); every lowering reads the ones of its op,
so the image, the mask and the boxes get one window, one coin, one angle:

* ``Decode`` followed by a crop decodes only the window
  (``decoders.image_slice``: ROI decoding); with ``device="mixed"`` on the
  GPU (nvJPEG, with the hardware JPEG decoder where the GPU has one), and
  every later image op then runs on the GPU.
* Masks are decoded on the CPU (8-bit class ids) and follow with
  nearest-neighbour sampling, padded with ``ignore_index``.
* Boxes are moved with ``coord_transform`` by each geometric op's affine
  map, clipped to the image, and the ones that do not survive get label -1.
* A trailing ``HorizontalFlip``, ``Normalize`` and the output dtype / layout
  become one ``crop_mirror_normalize``.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from nvidia.dali import fn, types
from nvidia.dali import math as dmath

from ... import ops as O
from ...spec import PipelineSpec
from ...targets import IMAGE_LEVEL
from ..common import Lowering

#: DALI dtype that ``crop_mirror_normalize`` emits for each output dtype;
#: bfloat16 (which DALI lacks) is emitted as float32 and converted by torch.
DALI_DTYPE = {"float32": types.FLOAT, "bfloat16": types.FLOAT, "float16": types.FLOAT16, "uint8": types.UINT8}


class Graph:
    """What is being built: the image, mask and box nodes, the spec and the parameters
    (``params[j, name]``: op ``j``'s planned parameter as a node, see :mod:`.params`).

    The nodes are DALI ``DataNode`` values, ``Any`` to mypy (DALI is not analysed, see pyproject.toml)."""

    def __init__(self, spec: PipelineSpec, params, *, gpu: bool, decoder: Dict) -> None:
        self.spec = spec
        self.params = params
        self.gpu = gpu
        self.decoder = decoder  # decoder keyword arguments
        self.images: Any = None
        self.encoded: Any = None
        self.mask: Any = None
        self.boxes: Any = None  # (N, 4) xyxy, clipped after every op
        self.raw: Any = None  # the same boxes, never clipped (visible fraction)
        self.box_labels: Any = None

    def p(self, j: int, name: str):
        return self.params[j, name]

    def on_device(self, node):
        """A per-sample CPU number moved next to the images, for arithmetic with them."""
        return node.gpu() if self.gpu and not isinstance(node, float) else node

    def hw(self, j: int, name: str = "size"):
        """``(h, w)`` parameter nodes of op ``j``."""
        size = self.p(j, name)
        return size[0], size[1]


def _anchor_shape(g: Graph, j: int):
    return fn.stack(g.p(j, "top"), g.p(j, "left")), fn.stack(g.p(j, "height"), g.p(j, "width"))


def _move_boxes(g: Graph, j: int) -> None:
    """Boxes through op ``j``'s affine map: corners moved, enclosing box, clipped to the new size."""
    if g.boxes is None:
        return
    h, w = g.hw(j)
    limit = fn.cast(fn.stack(w, h, w, h), dtype=types.FLOAT)
    g.raw = _affine_boxes(g.raw, g.p(j, "affine"))
    g.boxes = dmath.min(dmath.max(_affine_boxes(g.boxes, g.p(j, "affine")), 0.0), limit)


def _affine_boxes(boxes, affine):
    x0, y0, x1, y1 = (boxes[:, k] for k in range(4))
    corners = fn.stack(fn.stack(x0, y0, axis=1), fn.stack(x1, y0, axis=1), fn.stack(x0, y1, axis=1),
                       fn.stack(x1, y1, axis=1), axis=1)
    moved = fn.reshape(fn.coord_transform(fn.reshape(corners, shape=[-1, 2]), MT=affine), shape=[-1, 4, 2])
    return fn.cat(fn.reductions.min(moved, axes=1), fn.reductions.max(moved, axes=1), axis=1)


def _slice(node, g: Graph, j: int, fill):
    anchor, shape = _anchor_shape(g, j)
    return fn.slice(node, anchor, shape, axis_names="HW", out_of_bounds_policy="pad", fill_values=fill)


def _window(g: Graph, j: int, op: O.Op, fill=0) -> None:
    """Op ``j`` as a window ``(top, left, height, width)``; outside the image: ``fill`` (masks: ignore_index)."""
    g.images = _slice(g.images, g, j, list(fill) if isinstance(fill, tuple) else fill)
    if g.mask is not None:
        g.mask = _slice(g.mask, g, j, g.spec.ignore_index)
    _move_boxes(g, j)


def _resize_images(g: Graph, j: int) -> None:
    size = fn.cast(g.p(j, "size"), dtype=types.FLOAT)
    g.images = fn.resize(g.images, size=size, antialias=True, interp_type=types.INTERP_LINEAR)
    if g.mask is not None:
        g.mask = fn.resize(g.mask, size=size, antialias=False, interp_type=types.INTERP_NN)


def _resize(g: Graph, j: int, op: O.Op) -> None:
    _resize_images(g, j)
    _move_boxes(g, j)


def _resized_crop(g: Graph, j: int, op: O.RandomResizedCrop) -> None:
    g.images = _slice(g.images, g, j, 0)
    if g.mask is not None:
        g.mask = _slice(g.mask, g, j, g.spec.ignore_index)
    _resize_images(g, j)
    _move_boxes(g, j)


def _decode(g: Graph, j: int, op: O.Decode) -> None:
    g.images = fn.decoders.image(g.encoded, **g.decoder)


def roi_decoder(decoder: Dict) -> Dict:
    """The decoder arguments of a ROI decode. On the GPU without fancy upsampling: nvImageCodec's CUDA
    JPEG decoder refuses a ROI with fancy upsampling on chroma-subsampled JPEGs (nvJPEG < 13.2), logs
    a warning for every such image and hands it to a slower decoder; plain upsampling is what DALI's
    own ``decoders.image_random_crop`` uses by default."""
    if decoder.get("device") == "mixed":
        return {**decoder, "jpeg_fancy_upsampling": False}
    return decoder


def _decode_resized_crop(g: Graph, j: int, op: O.RandomResizedCrop) -> None:
    """Decode fused with the crop after it: only the window (always inside the image) is decoded."""
    anchor = fn.stack(g.p(j, "left"), g.p(j, "top"))
    shape = fn.stack(g.p(j, "width"), g.p(j, "height"))
    g.images = fn.decoders.image_slice(g.encoded, anchor, shape, axis_names="WH", **roi_decoder(g.decoder))
    if g.mask is not None:
        g.mask = _slice(g.mask, g, j, g.spec.ignore_index)
    _resize_images(g, j)
    _move_boxes(g, j)


def _zoom_out(g: Graph, j: int, op: O.RandomZoomOut) -> None:
    h, w = g.hw(j)
    anchor, shape = fn.stack(-g.p(j, "top"), -g.p(j, "left")), fn.stack(h, w)
    g.images = fn.slice(g.images, anchor, shape, axis_names="HW", out_of_bounds_policy="pad", fill_values=list(op.fill))
    if g.mask is not None:
        g.mask = fn.slice(g.mask, anchor, shape, axis_names="HW", out_of_bounds_policy="pad",
                          fill_values=g.spec.ignore_index)
    _move_boxes(g, j)


def _iou_crop(g: Graph, j: int, op: O.RandomIoUCrop) -> None:
    if g.boxes is not None:  # boxes whose centre is outside the window are emptied (dropped later)
        top, left = fn.cast(g.p(j, "top"), dtype=types.FLOAT), fn.cast(g.p(j, "left"), dtype=types.FLOAT)
        bottom = top + fn.cast(g.p(j, "height"), dtype=types.FLOAT)
        right = left + fn.cast(g.p(j, "width"), dtype=types.FLOAT)
        cx = (g.boxes[:, 0] + g.boxes[:, 2]) * 0.5
        cy = (g.boxes[:, 1] + g.boxes[:, 3]) * 0.5
        inside = fn.cast((cx > left) & (cx < right) & (cy > top) & (cy < bottom), dtype=types.FLOAT)
        keep = fn.stack(inside, inside, inside, inside, axis=1)
        g.boxes, g.raw = g.boxes * keep, g.raw * keep
    _window(g, j, op)


def _flip(g: Graph, j: int, op: O.HorizontalFlip) -> None:
    flag = g.p(j, "flip")
    g.images = fn.flip(g.images, horizontal=flag)
    if g.mask is not None:
        g.mask = fn.flip(g.mask, horizontal=flag)
    _move_boxes(g, j)


def _rotate(g: Graph, j: int, op: O.RandomRotation) -> None:
    angle = g.p(j, "angle")
    g.images = fn.rotate(g.images, angle=angle, keep_size=True, fill_value=0, interp_type=types.INTERP_LINEAR)
    if g.mask is not None:
        g.mask = fn.rotate(g.mask, angle=angle, keep_size=True, fill_value=g.spec.ignore_index,
                           interp_type=types.INTERP_NN)
    _move_boxes(g, j)


def _color_jitter(g: Graph, j: int, op: O.ColorJitter) -> None:
    """Brightness and contrast as torchvision computes them (contrast around each image's mean
    gray level: ``c * x + (1 - c) * mean``), then saturation and hue with ``hsv``; one fixed order."""
    if op.brightness or op.contrast:
        x = fn.cast(g.images, dtype=types.FLOAT)
        if op.brightness:
            x = dmath.clamp(x * g.on_device(g.p(j, "brightness")), 0.0, 255.0)
        if op.contrast:
            c = g.on_device(g.p(j, "contrast"))
            gray = fn.color_space_conversion(fn.cast(x, dtype=types.UINT8), image_type=types.RGB,
                                             output_type=types.GRAY)
            x = dmath.clamp(c * x + (1.0 - c) * fn.reductions.mean(fn.cast(gray, dtype=types.FLOAT)), 0.0, 255.0)
        g.images = fn.cast(x, dtype=types.UINT8)
    if op.saturation or op.hue:
        g.images = fn.hsv(g.images, saturation=g.p(j, "saturation"), hue=g.p(j, "hue") * 360.0)


def _grayscale(g: Graph, j: int, op: O.RandomGrayscale) -> None:
    g.images = fn.hsv(g.images, saturation=1.0 - fn.cast(g.p(j, "gray"), dtype=types.FLOAT))


def _blur(g: Graph, j: int, op: O.GaussianBlur) -> None:
    g.images = fn.gaussian_blur(g.images, window_size=op.kernel, sigma=g.p(j, "sigma"))


def _erase(g: Graph, j: int, op: O.RandomErasing) -> None:
    on = g.p(j, "erase")
    anchor = fn.cast(fn.stack(g.p(j, "top"), g.p(j, "left")), dtype=types.FLOAT)
    shape = fn.cast(fn.stack(g.p(j, "height") * on, g.p(j, "width") * on), dtype=types.FLOAT)
    g.images = fn.erase(g.images, anchor=anchor, shape=shape, axis_names="HW",
                        fill_value=[round(255 * m) for m in g.spec.mean])


#: torchvision's op names -> DALI's auto_aug names.
_AUTO_AUG_NAMES = {"Identity": "identity", "ShearX": "shear_x", "ShearY": "shear_y", "TranslateX": "translate_x",
                   "TranslateY": "translate_y", "Rotate": "rotate", "Brightness": "brightness", "Color": "color",
                   "Contrast": "contrast", "Sharpness": "sharpness", "Posterize": "posterize", "Solarize": "solarize",
                   "AutoContrast": "auto_contrast", "Equalize": "equalize"}


def _auto_augment(g: Graph, j: int, op) -> None:
    """The planned ops of RandAugment / TrivialAugment Wide with DALI's auto_aug suites (timm's magnitudes)."""
    from nvidia.dali.auto_aug import rand_augment, trivial_augment
    from nvidia.dali.auto_aug.core import select, signed_bin

    if isinstance(op, O.RandAugment):
        suite, levels, bins = rand_augment.get_rand_augment_suite(use_shape=True), op.num_ops, op.magnitude
    else:
        suite, levels, bins = trivial_augment.get_trivial_augment_wide_suite(use_shape=True), 1, g.p(j, "bins")
    by_name = {aug.name: aug for aug in suite}
    ordered = [by_name[_AUTO_AUG_NAMES[name]] for name in O.AUGMENT_OPS]
    size = g.spec.size_before(j)
    assert size is not None  # the op needs images of one size: build_spec refuses it where sizes vary
    shape = list(size)  # (h, w)
    ops, signs = g.p(j, "ops"), g.p(j, "signs")
    for level in range(levels):
        magnitude = signed_bin(bins, random_sign=signs[level])
        g.images = select(ordered, ops[level], data=g.images, magnitude_bin=magnitude,
                          num_magnitude_bins=op.num_magnitude_bins, shape=shape, fill_value=0)


def _no_op(g: Graph, j: int, op: O.Op) -> None:
    """Ops that change nothing here (``Decode`` is the reader's output when not fused)."""


_IMAGE_ONLY = "DALI's auto_aug applies its geometric ops to one input, not to the targets"

#: op type -> lowering ``apply(graph, op_index, op)``.
LOWERINGS: Dict[type, Lowering] = {
    O.Decode: Lowering(_decode),
    O.RandomResizedCrop: Lowering(_resized_crop),
    O.Resize: Lowering(_resize),
    O.RandomResize: Lowering(_resize),
    O.CenterCrop: Lowering(_window),
    O.RandomCrop: Lowering(_window),
    O.PadTo: Lowering(lambda g, j, op: _window(g, j, op, op.fill)),
    O.RandomZoomOut: Lowering(_zoom_out),
    O.RandomIoUCrop: Lowering(_iou_crop),
    O.HorizontalFlip: Lowering(_flip),
    O.RandomRotation: Lowering(_rotate),
    O.ColorJitter: Lowering(_color_jitter),
    O.RandomGrayscale: Lowering(_grayscale),
    O.GaussianBlur: Lowering(_blur),
    O.RandAugment: Lowering(_auto_augment, IMAGE_LEVEL, _IMAGE_ONLY),
    O.TrivialAugment: Lowering(_auto_augment, IMAGE_LEVEL, _IMAGE_ONLY),
    O.RandomErasing: Lowering(_erase),
}
#: Pairs of neighbours that become one DALI operator: ``Decode`` and the random crop after it (ROI decoding).
FUSIONS: Dict[Tuple[type, type], Callable[[Graph, int, Any], None]] = {
    (O.Decode, O.RandomResizedCrop): _decode_resized_crop}


@contextlib.contextmanager
def quiet_auto_aug():
    """Silences exactly the deprecation notices DALI's own auto_aug module prints about the
    experimental aliases it calls (``fn.experimental.filter`` / ``equalize``).

    DALI forces them through its own ``catch_warnings()`` + ``simplefilter("default")``, so a filter
    cannot stop them; ``warnings.showwarning`` is wrapped instead. Pipelines are traced in the loader's
    thread while runs build in the background, so the wrapper is counted: installed by the first
    thread in, restored by the last one out (a swap restored by one thread would unmute the other).
    """
    with _QUIET["lock"]:
        if _QUIET["depth"] == 0:
            _QUIET["shown"] = shown = warnings.showwarning

            def show(message, category, *args, **kwargs):
                if category is DeprecationWarning and "nvidia.dali.fn.experimental" in str(message):
                    return
                shown(message, category, *args, **kwargs)

            _QUIET["show"] = warnings.showwarning = show
        _QUIET["depth"] += 1
    try:
        yield
    finally:
        with _QUIET["lock"]:
            _QUIET["depth"] -= 1
            if _QUIET["depth"] == 0 and warnings.showwarning is _QUIET["show"]:
                warnings.showwarning = _QUIET["shown"]


_QUIET: Dict = {"lock": threading.Lock(), "depth": 0, "shown": None, "show": None}


def lower(g: Graph, output_mirror: Optional[object] = None) -> List:
    """Builds the graph of ``g.spec`` on ``g.encoded`` (and the targets).

    Returns:
        ``[images]`` (``(B, C, H, W)``, or ``(B, H, W, C)`` for channels_last),
        then the mask, or the boxes and their labels, when the spec carries them.
    """
    spec = g.spec
    ops = list(enumerate(spec.ops))
    tail_flip = ops.pop() if ops and isinstance(ops[-1][1], O.HorizontalFlip) and g.boxes is None \
        and g.mask is None else None  # with targets the flip stays an op, so they follow it
    k = 0
    while k < len(ops):
        j, op = ops[k]
        pair = (type(op), type(ops[k + 1][1])) if k + 1 < len(ops) else None
        if pair in FUSIONS:
            FUSIONS[pair](g, ops[k + 1][0], ops[k + 1][1])
            k += 2
        else:
            LOWERINGS[type(op)].apply(g, j, op)
            k += 1
    cmn = {}
    if tail_flip is not None:
        cmn["mirror"] = g.p(tail_flip[0], "flip")
    if spec.output.dtype != "uint8":
        cmn["mean"] = [255.0 * m for m in spec.mean]
        cmn["std"] = [255.0 * s for s in spec.std]
    images = fn.crop_mirror_normalize(g.images, dtype=DALI_DTYPE[spec.output.dtype],
                                      output_layout="HWC" if spec.output.channels_last else "CHW", **cmn)
    outputs = [images]
    if g.mask is not None:
        outputs.append(g.mask)
    if g.boxes is not None:
        outputs.extend(_sanitized(g))
    return outputs


def _sanitized(g: Graph):
    """Padded boxes and labels; boxes that do not survive get label -1 (and zero coordinates)."""
    rule = g.spec.sanitize
    w = g.boxes[:, 2] - g.boxes[:, 0]
    h = g.boxes[:, 3] - g.boxes[:, 1]
    keep = (w >= max(rule.min_size, 1e-6)) & (h >= max(rule.min_size, 1e-6))
    if rule.min_visible > 0:
        raw_area = (g.raw[:, 2] - g.raw[:, 0]) * (g.raw[:, 3] - g.raw[:, 1])
        keep = keep & (w * h >= dmath.max(raw_area, 1e-12) * rule.min_visible)
    kept = fn.cast(keep, dtype=types.INT32)
    labels = g.box_labels * kept + (kept - 1)
    boxes = g.boxes * fn.cast(fn.stack(kept, kept, kept, kept, axis=1), dtype=types.FLOAT)
    return fn.pad(boxes, axes=[0], fill_value=0.0), fn.pad(labels, axes=[0], fill_value=-1)


__all__ = ["LOWERINGS", "FUSIONS", "Graph", "lower", "quiet_auto_aug", "roi_decoder", "DALI_DTYPE"]
