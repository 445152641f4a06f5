"""What a mask file's pixels mean: class ids, whatever the file's bit depth, on every backend.

One rule, used by the scan, the torchvision backend, the DALI feed and the packer:

* a gray PNG of 1, 2, 4, 8 or 16 bits: the stored sample values are the ids (a 16-bit mask's ids
  must fit ``0..255``);
* a palette PNG of 1, 2, 4 or 8 bits: the palette indices are the ids (the colours, and any
  transparency, are ignored);
* anything else (RGB, gray with alpha, ...) cannot keep its ids and is refused, naming the file;
* a mask is read as displayed: its EXIF orientation (a PNG ``eXIf`` chunk) is applied, as DALI's
  decoder applies it and as an image's is.

PIL scales 2- and 4-bit gray to 8 bits and DALI's decoders scale every low-bit PNG (and
expand palettes to colours), so neither decoder's output is taken as it is: ``decode_mask``
undoes PIL's scaling, and ``mask_for_dali`` gives DALI only 8-bit gray PNGs.
"""

from __future__ import annotations

import io
import zlib

import numpy as np

from ..images import ImageRefused, ReadAt, header_at

_PNG = b"\x89PNG\r\n\x1a\n"
#: PNG colour type -> the bit depths whose values are class ids.
MASK_DEPTHS = {0: (1, 2, 4, 8, 16), 3: (1, 2, 4, 8)}
#: PIL's factor for 2- and 4-bit gray (0..3 -> 0..255, 0..15 -> 0..255), undone exactly.
_PIL_GRAY_SCALE = {2: 85, 4: 17}


def png_layout(data: bytes):
    """``(colour type, bit depth)`` from a PNG's ``IHDR``, or ``None`` when ``data`` is not a PNG."""
    if data[:8] != _PNG or data[12:16] != b"IHDR" or len(data) < 26:
        return None
    return data[25], data[24]


def mask_hw(read_at: ReadAt, size: int) -> tuple[int, int] | None:
    """``(h, w)`` of a mask as displayed (its EXIF orientation applied) from its header, read with
    ``read_at(offset, count)`` from a file of ``size`` bytes; ``None`` when it is not a readable PNG (its
    decoding then says what is wrong)."""
    if png_layout(read_at(0, 26)) is None:
        return None
    try:
        return header_at(read_at, lambda: io.BytesIO(read_at(0, size)), 1 << 62, size).oriented
    except ImageRefused:
        return None


def size_problem(mask_hw, image_hw) -> str:
    """``"mask is WxH, the image WxH"`` when a mask's ``(h, w)`` is not its image's, else ``''``."""
    (h, w), (image_h, image_w) = (int(v) for v in mask_hw), (int(v) for v in image_hw)
    return "" if (h, w) == (image_h, image_w) else f"mask is {w}x{h}, the image {image_w}x{image_h}"


def header_problem(head: bytes) -> str:
    """Why a mask file (its first 26 bytes or more) cannot hold class ids; ``''`` when it can."""
    layout = png_layout(head)
    if layout is None:
        return "is not a PNG"
    colour, depth = layout
    if depth not in MASK_DEPTHS.get(colour, ()):
        return (
            f"is not a single-channel gray (1-16 bit) or palette (1-8 bit) PNG (colour type {colour}, {depth}-bit): "
            "its values cannot be kept as class ids"
        )
    return ""


def decode_mask(data: bytes) -> np.ndarray:
    """Decodes a mask to ``(H, W)`` uint8 class ids (see the module docstring for the rule).

    Raises:
        ValueError: a mode whose values are not class ids (RGB, alpha, float), or 16-bit ids above 255.
        OSError, SyntaxError: PIL cannot read the data.
    """
    from PIL import Image

    from ..images import upright

    layout = png_layout(data)
    if layout is not None and layout[1] not in MASK_DEPTHS.get(layout[0], ()):
        raise ValueError(f"a mask {header_problem(data)}")
    with Image.open(io.BytesIO(data)) as img:
        mode = img.mode
        if mode not in ("1", "L", "P", "I", "I;16", "I;16B", "I;16L", "I;16N"):
            raise ValueError(f"a mask must be a single-channel gray or palette image (class ids), got mode {mode}")
        values = np.asarray(upright(img))  # as the image: its orientation read once, after the pixels too
    if mode == "L" and layout is not None and layout[1] in _PIL_GRAY_SCALE:
        return (values // _PIL_GRAY_SCALE[layout[1]]).astype(np.uint8)
    if values.dtype != np.uint8:
        top = int(values.max(initial=0))
        if top > 255 or int(values.min(initial=0)) < 0:
            raise ValueError(f"a mask's class ids must fit 0..255, this one holds {top}")
        values = values.astype(np.uint8)
    return values


def gray_png(ids: np.ndarray, level: int = 1) -> bytes:
    """``(H, W)`` uint8 ids as an 8-bit gray PNG compressed at zlib ``level`` (1, fast: a mask fed
    to DALI is read once; the packer writes its masks at 6)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(ids, np.uint8), "L").save(out, "PNG", compress_level=level)
    return out.getvalue()


def mask_for_dali(data: bytes) -> bytes:
    """An encoded mask that DALI's decoder reads as its class ids: an 8-bit gray PNG.

    An 8-bit gray PNG is given as it is, an 8-bit palette PNG with its colour type changed (the
    pixel bytes are the indices); any other mask is decoded here (``decode_mask``) and written
    again as an 8-bit gray PNG.

    Raises:
        ValueError, OSError, SyntaxError: as ``decode_mask``.
    """
    layout = png_layout(data)
    if layout == (0, 8):
        return data
    if layout == (3, 8):
        return _palette_as_gray(data)
    return gray_png(decode_mask(data))


def _palette_as_gray(data: bytes) -> bytes:
    """An 8-bit palette PNG as a gray PNG of its indices, without decoding: ``IHDR``'s colour
    type 3 becomes 0, the palette chunks are dropped, the pixel data is the same bytes."""
    out = [data[:8]]
    pos = 8
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        chunk = data[pos : pos + 12 + length]
        if kind == b"IHDR":
            body = bytearray(data[pos + 8 : pos + 8 + length])
            body[9] = 0
            chunk = data[pos : pos + 8] + bytes(body) + zlib.crc32(b"IHDR" + bytes(body)).to_bytes(4, "big")
        if kind not in (b"PLTE", b"tRNS"):
            out.append(chunk)
        pos += 12 + length
    return b"".join(out)


__all__ = ["MASK_DEPTHS", "png_layout", "header_problem", "decode_mask", "gray_png", "mask_for_dali"]
