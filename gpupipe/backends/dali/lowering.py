"""The DALI lowering: each op as DALI operators applied with its planned parameters.

The parameters arrive through one ``external_source`` (a node per
parameter, see :mod:`.params`); every lowering reads the ones of its op,
so the image and its target get one window, one coin, one angle:

* ``Decode`` followed by a crop decodes only the window
  (``decoders.image_slice``: ROI decoding); with ``device="mixed"`` on the
  GPU (nvJPEG, with the hardware JPEG decoder where the GPU has one), and
  every later image op then runs on the GPU.
* A geometric op is a pixel *kernel* (``kernel(node, fill=..., nearest=...)``:
  a slice, resize, flip or rotation) applied to the images, then handed with
  the op's parameters to the target's handler, which moves its own state
  (:meth:`~gpupipe.targets.base.Target.dali_move`: masks sample the kernel
  nearest-neighbour, boxes move by the op's affine map).
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
from ...targets import IMAGE_LEVEL, Target
from ...targets.base import Kernel
from ..common import Lowering

#: DALI dtype that ``crop_mirror_normalize`` emits for each output dtype;
#: bfloat16 (which DALI lacks) is emitted as float32 and converted by torch.
DALI_DTYPE = {"float32": types.FLOAT, "bfloat16": types.FLOAT, "float16": types.FLOAT16, "uint8": types.UINT8}


class Graph:
    """What is being built: the image nodes, the target's state, the spec and the parameters
    (``params[j, name]``: op ``j``'s planned parameter as a node, see :mod:`.params`).

    The nodes are DALI ``DataNode`` values, ``Any`` to mypy (DALI is not analysed, see pyproject.toml).

    Args:
        spec: the spec the graph computes.
        params: the planned parameters as nodes.
        gpu: the image ops run on the GPU.
        decoder: the image decoder's keyword arguments.
        target: the handler of the source's targets, with their state in the graph (``None``:
            nothing moves with the pixels).
    """

    def __init__(
        self,
        spec: PipelineSpec,
        params,
        *,
        gpu: bool,
        decoder: Dict,
        target: Optional[Target] = None,
        state: Any = None,
    ) -> None:
        self.spec = spec
        self.params = params
        self.gpu = gpu
        self.decoder = decoder  # decoder keyword arguments
        self.images: Any = None
        self.encoded: Any = None
        self.target = target
        self.state: Any = state

    def p(self, j: int, name: str):
        return self.params[j, name]

    def on_device(self, node):
        """A per-sample CPU number moved next to the images, for arithmetic with them."""
        return node.gpu() if self.gpu and not isinstance(node, float) else node

    def hw(self, j: int, name: str = "size"):
        """``(h, w)`` parameter nodes of op ``j``."""
        size = self.p(j, name)
        return size[0], size[1]

    def geometric(self, j: int, op: O.Op, kernel: Kernel, fill: Any = 0, *, image: bool = True) -> None:
        """Applies op ``j``'s pixel ``kernel`` to the images (``fill`` where no pixel maps; not when
        ``image`` is ``False``: already done) and moves the target with it."""
        if image:
            self.images = kernel(self.images, fill=fill, nearest=False)
        if self.target is not None and self.state is not None:
            self.state = self.target.dali_move(self.state, kernel, _OpParams(self, j), op, self.spec)


class _OpParams:
    """Op ``j``'s planned parameters as nodes: ``params[name]``."""

    def __init__(self, g: Graph, j: int) -> None:
        self.g, self.j = g, j

    def __getitem__(self, name: str):
        return self.g.p(self.j, name)


def _slicing(anchor, shape) -> Kernel:
    """A window ``anchor`` ``(top, left)``, ``shape`` ``(h, w)``; outside the image: ``fill``."""

    def kernel(x, *, fill, nearest: bool = False):
        fill = list(fill) if isinstance(fill, tuple) else fill
        return fn.slice(x, anchor, shape, axis_names="HW", out_of_bounds_policy="pad", fill_values=fill)

    return kernel


def _resizing(size) -> Kernel:
    """A resize to ``size`` ``(h, w)``: linear with antialiasing, or nearest-neighbour."""

    def kernel(x, *, fill=0, nearest: bool = False):
        return fn.resize(
            x, size=size, antialias=not nearest, interp_type=types.INTERP_NN if nearest else types.INTERP_LINEAR
        )

    return kernel


def _then(first: Kernel, second: Kernel) -> Kernel:
    def kernel(x, *, fill, nearest: bool = False):
        return second(first(x, fill=fill, nearest=nearest), fill=fill, nearest=nearest)

    return kernel


def _window_kernel(g: Graph, j: int) -> Kernel:
    return _slicing(fn.stack(g.p(j, "top"), g.p(j, "left")), fn.stack(g.p(j, "height"), g.p(j, "width")))


def _resize_kernel(g: Graph, j: int) -> Kernel:
    return _resizing(fn.cast(g.p(j, "size"), dtype=types.FLOAT))


def _window(g: Graph, j: int, op: O.Op, fill=0) -> None:
    """Op ``j`` as a window ``(top, left, height, width)``; outside the image: ``fill``."""
    g.geometric(j, op, _window_kernel(g, j), fill)


def _resize(g: Graph, j: int, op: O.Op) -> None:
    g.geometric(j, op, _resize_kernel(g, j))


def _resized_crop(g: Graph, j: int, op: O.RandomResizedCrop) -> None:
    g.geometric(j, op, _then(_window_kernel(g, j), _resize_kernel(g, j)))


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
    g.images = _resize_kernel(g, j)(
        fn.decoders.image_slice(g.encoded, anchor, shape, axis_names="WH", **roi_decoder(g.decoder))
    )
    g.geometric(j, op, _then(_window_kernel(g, j), _resize_kernel(g, j)), image=False)


def _zoom_out(g: Graph, j: int, op: O.RandomZoomOut) -> None:
    h, w = g.hw(j)
    g.geometric(j, op, _slicing(fn.stack(-g.p(j, "top"), -g.p(j, "left")), fn.stack(h, w)), op.fill)


def _flip(g: Graph, j: int, op: O.HorizontalFlip) -> None:
    flag = g.p(j, "flip")
    g.geometric(j, op, lambda x, fill=0, nearest=False: fn.flip(x, horizontal=flag))


def _rotate(g: Graph, j: int, op: O.RandomRotation) -> None:
    angle = g.p(j, "angle")

    def kernel(x, *, fill, nearest: bool = False):
        return fn.rotate(
            x,
            angle=angle,
            keep_size=True,
            fill_value=fill,
            interp_type=types.INTERP_NN if nearest else types.INTERP_LINEAR,
        )

    g.geometric(j, op, kernel)


def _color_jitter(g: Graph, j: int, op: O.ColorJitter) -> None:
    """Brightness and contrast as torchvision computes them (contrast around each image's mean
    gray level: ``c * x + (1 - c) * mean``), then saturation and hue with ``hsv``; one fixed order."""
    if op.brightness or op.contrast:
        x = fn.cast(g.images, dtype=types.FLOAT)
        if op.brightness:
            x = dmath.clamp(x * g.on_device(g.p(j, "brightness")), 0.0, 255.0)
        if op.contrast:
            c = g.on_device(g.p(j, "contrast"))
            gray = fn.color_space_conversion(
                fn.cast(x, dtype=types.UINT8), image_type=types.RGB, output_type=types.GRAY
            )
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
    g.images = fn.erase(
        g.images, anchor=anchor, shape=shape, axis_names="HW", fill_value=[round(255 * m) for m in g.spec.mean]
    )


#: torchvision's op names -> DALI's auto_aug names.
_AUTO_AUG_NAMES = {
    "Identity": "identity",
    "ShearX": "shear_x",
    "ShearY": "shear_y",
    "TranslateX": "translate_x",
    "TranslateY": "translate_y",
    "Rotate": "rotate",
    "Brightness": "brightness",
    "Color": "color",
    "Contrast": "contrast",
    "Sharpness": "sharpness",
    "Posterize": "posterize",
    "Solarize": "solarize",
    "AutoContrast": "auto_contrast",
    "Equalize": "equalize",
}


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
        g.images = select(
            ordered,
            ops[level],
            data=g.images,
            magnitude_bin=magnitude,
            num_magnitude_bins=op.num_magnitude_bins,
            shape=shape,
            fill_value=0,
        )


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
    O.RandomIoUCrop: Lowering(_window),
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
    (O.Decode, O.RandomResizedCrop): _decode_resized_crop
}


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


def lower(g: Graph) -> List:
    """Builds the graph of ``g.spec`` on ``g.encoded`` (and the target's state).

    Returns:
        ``[images]`` (``(B, C, H, W)``, or ``(B, H, W, C)`` for channels_last),
        then the outputs that carry the target (:meth:`~gpupipe.targets.base.Target.dali_outputs`).
    """
    spec = g.spec
    moving = g.target is not None and g.state is not None
    ops = list(enumerate(spec.ops))
    tail_flip = (
        ops.pop() if ops and isinstance(ops[-1][1], O.HorizontalFlip) and not moving else None
    )  # with targets the flip stays an op, so they follow it
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
    images = fn.crop_mirror_normalize(
        g.images,
        dtype=DALI_DTYPE[spec.output.dtype],
        output_layout="HWC" if spec.output.channels_last else "CHW",
        **cmn,
    )
    if not moving:
        return [images]
    assert g.target is not None  # moving
    return [images, *g.target.dali_outputs(g.state, spec)]


__all__ = ["LOWERINGS", "FUSIONS", "Graph", "lower", "quiet_auto_aug", "roi_decoder", "DALI_DTYPE"]
