"""The DALI lowering: each op as DALI operators applied with its planned parameters.

The parameters arrive through one ``external_source`` (a node per
parameter, see ``params``); every lowering reads the ones of its op,
so the image and its target get one window, one coin, one angle:

* ``Decode`` followed by a crop decodes only the window
  (``decoders.image_slice``: ROI decoding); with ``device="mixed"`` on the
  GPU (nvJPEG, with the hardware JPEG decoder where the GPU has one), and
  every later image op then runs on the GPU.
* A geometric op is a pixel *kernel* (``kernel(node, fill=..., nearest=...)``:
  a slice, resize, flip or rotation) applied to the images, then handed with
  the op's parameters to the target's DALI lowering, which moves its own state
  (``targets``, ``move``: masks sample the kernel
  nearest-neighbour, boxes move by the op's affine map).
* A trailing ``HorizontalFlip``, ``Normalize`` and the output dtype / layout
  become one ``crop_mirror_normalize``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvidia.dali import fn, types
from nvidia.dali import math as dmath

from ... import ops as O
from ...targets.base import Kernel
from .augment import fill_refused, one_fill, quiet_auto_aug  # importing it registers the auto-augment lowerings
from .hue import blend_contrast, blend_saturation, scale_brightness, shift_hue, to_gray
from .lowering_warp import constant64, inverse_coefficients, ramp, warp_nearest
from .table import LOWERINGS, Graph, lowering

#: DALI dtype that ``crop_mirror_normalize`` emits for each output dtype;
#: bfloat16 (which DALI lacks) is emitted as float32 and converted by torch.
DALI_DTYPE = {"float32": types.FLOAT, "bfloat16": types.FLOAT, "float16": types.FLOAT16, "uint8": types.UINT8}


def _slicing(anchor, shape) -> Kernel:
    """A window ``anchor`` ``(top, left)``, ``shape`` ``(h, w)``; outside the image: ``fill``."""

    def kernel(x, *, fill, nearest: bool = False):
        fill = list(fill) if isinstance(fill, tuple) else fill
        return fn.slice(x, anchor, shape, axis_names="HW", out_of_bounds_policy="pad", fill_values=fill)

    return kernel


def _index_map(n_in, n_out):
    """``(n_out,)`` int32: output pixel ``j`` reads source pixel ``floor((2j + 1) * n_in / (2 n_out))``, in
    int64 arithmetic (exact; DALI's ``INTERP_NN`` takes it in float32 and reads the pixel above where
    ``(j + 0.5) * n_in / n_out`` is a whole number, e.g. at 30 -> 45)."""
    j = fn.cast(ramp(n_out), dtype=types.INT64)
    n_in, n_out = fn.cast(n_in, dtype=types.INT64), fn.cast(n_out, dtype=types.INT64)
    return fn.cast((j * 2 + 1) * n_in // (n_out * 2), dtype=types.INT32)


def _gathered(x, rows, cols):
    """``x`` ``(H, W, C)`` with the rows, then the columns, of the index maps ``rows`` and ``cols`` (int32
    nodes on the CPU) gathered (``sequence_rearrange``, on either device): no float positions."""
    x = fn.sequence_rearrange(fn.reshape(x, layout="FWC"), new_order=rows)
    x = fn.sequence_rearrange(fn.transpose(x, perm=[1, 0, 2], output_layout="FHC"), new_order=cols)
    return fn.transpose(x, perm=[1, 0, 2], output_layout="HWC")


def _nearest_exact(x, source, size):
    """``x`` ``(H, W, C)`` (``source``) resized nearest-neighbour to ``size`` ``(h, w)`` (int nodes)."""
    return _gathered(x, _index_map(source[0], size[0]), _index_map(source[1], size[1]))


def _scaled_index_map(n, scale, shift, centre):
    """``(n,)`` int32: pixel ``j`` of a side ``n`` (int node) scaled by ``scale`` about ``centre`` and shifted
    by ``shift`` (float nodes) reads source pixel ``floor((2j + 1 - 2 centre - 2 shift) / (2 scale) + centre)``,
    in float64 as ``torchvision.lowering.scaled_indices`` computes it (the same IEEE operations, so the same
    pixels); ``n`` (a row or column of fill appended) where that falls outside ``[0, n)``."""
    f64 = types.FLOAT64
    j, nf = fn.cast(ramp(n), dtype=f64), fn.cast(n, dtype=f64)
    s, t = fn.cast(scale, dtype=f64), fn.cast(shift, dtype=f64)
    if centre is None:
        c = nf * 0.5
    else:  # DALI has no float64 constant: the sum of three float32 ones, exact (72 bits for 53)
        c = constant64(float(centre))
    q = dmath.floor((j * 2.0 + 1.0 - c * 2.0 - t * 2.0) / (s * 2.0) + c)
    inside = fn.cast((q >= 0.0) & (q < nf), dtype=f64)
    return fn.cast(q * inside + nf * (1.0 - inside), dtype=types.INT32)


def _scaled_exact(g: Graph, j: int, op: O.RandomAffine, x, fill):
    """``x`` ``(H, W, C)`` through op ``j``'s affine map, a pure scale and shift (no angle, no shear), sampled
    nearest by the documented rule: one row and one column of ``fill`` appended, then gathered."""
    size = g.p(j, "size")
    cx, cy = (None, None) if op.center is None else op.center
    rows = _scaled_index_map(size[0], g.p(j, "scale"), g.p(j, "ty"), cy)
    cols = _scaled_index_map(size[1], g.p(j, "scale"), g.p(j, "tx"), cx)
    return _gathered(_slicing(fn.stack(0, 0), size + 1)(x, fill=fill), rows, cols)


def _resizing(size, source) -> Kernel:
    """A resize from ``source`` to ``size`` ``(h, w)`` (int nodes): linear with antialiasing, or
    nearest-neighbour by the documented rule (``_nearest_exact``)."""

    def kernel(x, *, fill=0, nearest: bool = False):
        if nearest:
            return _nearest_exact(x, source, size)
        return fn.resize(x, size=fn.cast(size, dtype=types.FLOAT), antialias=True, interp_type=types.INTERP_LINEAR)

    return kernel


def _then(first: Kernel, second: Kernel) -> Kernel:
    def kernel(x, *, fill, nearest: bool = False):
        return second(first(x, fill=fill, nearest=nearest), fill=fill, nearest=nearest)

    return kernel


def _window_kernel(g: Graph, j: int) -> Kernel:
    return _slicing(fn.stack(g.p(j, "top"), g.p(j, "left")), fn.stack(g.p(j, "height"), g.p(j, "width")))


def _resize_kernel(g: Graph, j: int, source=None) -> Kernel:
    """Op ``j``'s resize, from ``source`` (``(h, w)`` nodes; by default the op's planned ``source``)."""
    return _resizing(g.p(j, "size"), g.p(j, "source") if source is None else source)


def _window_resize_kernel(g: Graph, j: int) -> Kernel:
    """Op ``j``'s window resized to its size (a resized crop)."""
    return _resize_kernel(g, j, fn.stack(g.p(j, "height"), g.p(j, "width")))


def _window(g: Graph, j: int, op: O.Op, fill=0) -> None:
    """Op ``j`` as a window ``(top, left, height, width)``; outside the image: ``fill``."""
    g.geometric(j, op, _window_kernel(g, j), fill)


@lowering(O.CenterCrop, O.RandomCrop, O.RandomIoUCrop)
def _crop(g: Graph, j: int, op: O.Op) -> None:
    _window(g, j, op)


@lowering(O.PadTo)
def _pad_to(g: Graph, j: int, op: O.PadTo) -> None:
    _window(g, j, op, op.fill)


@lowering(O.Resize, O.RandomResize)
def _resize(g: Graph, j: int, op: O.Op) -> None:
    g.geometric(j, op, _resize_kernel(g, j))


@lowering(O.RandomResizedCrop)
def _resized_crop(g: Graph, j: int, op: O.RandomResizedCrop) -> None:
    g.geometric(j, op, _then(_window_kernel(g, j), _window_resize_kernel(g, j)))


@lowering(O.Decode)
def _decode(g: Graph, j: int, op: O.Decode) -> None:
    g.images = fn.decoders.image(g.encoded, **g.decoder)


def roi_decoder(decoder: dict) -> dict:
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
    g.images = _window_resize_kernel(g, j)(
        fn.decoders.image_slice(g.encoded, anchor, shape, axis_names="WH", **roi_decoder(g.decoder))
    )
    g.geometric(j, op, _then(_window_kernel(g, j), _window_resize_kernel(g, j)), image=False)


@lowering(O.RandomZoomOut)
def _zoom_out(g: Graph, j: int, op: O.RandomZoomOut) -> None:
    h, w = g.hw(j)
    g.geometric(j, op, _slicing(fn.stack(-g.p(j, "top"), -g.p(j, "left")), fn.stack(h, w)), op.fill)


@lowering(O.HorizontalFlip)
def _flip(g: Graph, j: int, op: O.HorizontalFlip) -> None:
    flag = g.p(j, "flip")
    g.geometric(j, op, lambda x, fill=0, nearest=False: fn.flip(x, horizontal=flag))


@lowering(O.VerticalFlip)
def _vflip(g: Graph, j: int, op: O.VerticalFlip) -> None:
    flag = g.p(j, "flip")
    g.geometric(j, op, lambda x, fill=0, nearest=False: fn.flip(x, horizontal=0, vertical=flag))


def _blend_edges_as_torchvision(warp: Callable[..., Any], x, fill: float):
    """A bilinear ``warp(x, fill=...)`` whose edge pixels blend as torchvision's ``grid_sample`` with a fill:
    ``mask * (sampled - fill) + fill``, where ``sampled`` is the zero-padded sample and ``mask`` the
    in-image fraction (a ones channel warped alike). So the image part of an edge pixel is weighed by
    ``mask`` twice, where a plain warp (``sampled + (1 - mask) * fill``) weighs it once: up to 64 levels of
    255 apart on the edge otherwise. Warps one extra channel, in float32."""
    xf = fn.cast(x, dtype=types.FLOAT)
    warped = warp(fn.cat(xf, xf[:, :, 0:1] * 0.0 + 1.0, axis=2), fill=0.0)
    sampled, mask = warped[:, :, 0:3], warped[:, :, 3:4]
    return fn.cast(dmath.clamp(mask * (sampled - fill) + fill, 0.0, 255.0), dtype=types.UINT8)


@lowering(O.RandomAffine, refuses=fill_refused)
def _affine(g: Graph, j: int, op: O.RandomAffine) -> None:
    """``warp_affine`` by the planned map (the one boxes move by: torchvision's, source to output)."""
    matrix = g.p(j, "affine")

    def warp(x, *, fill):
        return fn.warp_affine(x, matrix=matrix, fill_value=fill, interp_type=types.INTERP_LINEAR, inverse_map=False)

    def kernel(x, *, fill, nearest: bool = False):
        if nearest or op.interpolation == "nearest":
            if op.scale_only:  # rows stay rows: gathered exactly
                return _scaled_exact(g, j, op, x, fill)
            turn = inverse_coefficients(g.p(j, "angle"), g.p(j, "shear_x"), g.p(j, "shear_y"))
            shift = (g.p(j, "tx"), g.p(j, "ty"))
            return warp_nearest(
                x, g.p(j, "size"), turn, fill=fill, shift=shift, scale=g.p(j, "scale"), centre=op.center
            )
        return _blend_edges_as_torchvision(warp, x, fill)

    g.geometric(j, op, kernel, one_fill(op))


@lowering(O.RandomRotation)
def _rotate(g: Graph, j: int, op: O.RandomRotation) -> None:
    angle = g.p(j, "angle")

    def warp(x, *, fill):
        return fn.rotate(x, angle=angle, keep_size=True, fill_value=fill, interp_type=types.INTERP_LINEAR)

    def kernel(x, *, fill, nearest: bool = False):
        if nearest:  # by the documented rule; torchvision's rotate turns by -angle, clockwise
            return warp_nearest(x, g.p(j, "size"), inverse_coefficients(-angle), fill=fill)
        return _blend_edges_as_torchvision(warp, x, fill)

    g.geometric(j, op, kernel)


@lowering(O.ColorJitter)
def _color_jitter(g: Graph, j: int, op: O.ColorJitter) -> None:
    """As torchvision computes each part on uint8 (``hue``: blends truncated after each step, the hue shifted
    in HSV), in one fixed order: brightness, contrast (around each image's mean gray level), saturation, hue."""
    if op.brightness:
        g.images = scale_brightness(g.images, g.on_device(g.p(j, "brightness")))
    if op.contrast:
        g.images = blend_contrast(g.images, g.on_device(g.p(j, "contrast")))
    if op.saturation:
        g.images = blend_saturation(g.images, g.on_device(g.p(j, "saturation")))
    if op.hue:  # torchvision's HSV shift: DALI's hsv turns hue in YIQ, far from it at larger angles
        g.images = shift_hue(g.images, g.on_device(g.p(j, "hue")))


@lowering(O.RandomGrayscale)
def _grayscale(g: Graph, j: int, op: O.RandomGrayscale) -> None:
    g.images = to_gray(g.images, g.on_device(fn.cast(g.p(j, "gray"), dtype=types.FLOAT)))


@lowering(O.GaussianBlur)
def _blur(g: Graph, j: int, op: O.GaussianBlur) -> None:
    g.images = fn.gaussian_blur(g.images, window_size=op.kernel, sigma=g.p(j, "sigma"))


@lowering(O.RandomErasing)
def _erase(g: Graph, j: int, op: O.RandomErasing) -> None:
    """The planned rectangle (none where the coin said no) filled with the mean, by ``fn.erase`` on both devices
    (on an H200 a mask built from the rectangle's bounds cost 20.3 ms per batch of 256 at 224 px, ``fn.erase``
    6.6 ms: ``benchmarks/results/h200-2026-11-27-2``)."""
    on = g.p(j, "erase")
    top, left, height, width = g.p(j, "top"), g.p(j, "left"), g.p(j, "height") * on, g.p(j, "width") * on
    anchor = fn.cast(fn.stack(top, left), dtype=types.FLOAT)
    shape = fn.cast(fn.stack(height, width), dtype=types.FLOAT)
    fill = [round(255 * m) for m in g.spec.mean]
    g.images = fn.erase(g.images, anchor=anchor, shape=shape, axis_names="HW", fill_value=fill)


#: Pairs of neighbours that become one DALI operator: ``Decode`` and the random crop after it (ROI decoding).
FUSIONS: dict[tuple[type, type], Callable[[Graph, int, Any], None]] = {
    (O.Decode, O.RandomResizedCrop): _decode_resized_crop
}


def lower(g: Graph) -> list:
    """Builds the graph of ``g.spec`` on ``g.encoded`` (and the target's state).

    Returns:
        ``[images]`` (``(B, C, H, W)``, or ``(B, H, W, C)`` for channels_last),
        then the outputs that carry the target (its lowering's ``outputs``).
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
    return [images, *g.target.outputs(g.state, spec)]


__all__ = ["LOWERINGS", "FUSIONS", "Graph", "lower", "quiet_auto_aug", "roi_decoder", "DALI_DTYPE"]
