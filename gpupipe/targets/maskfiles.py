"""What a mask file's pixels mean: class ids, whatever the file's bit depth, on every backend.

One rule, used by the scan, the torchvision backend, the DALI feed and the packer:

* a gray PNG of 1, 2, 4, 8 or 16 bits: the stored sample values are the ids (a 16-bit mask's ids
  must fit ``0..255``);
* a palette PNG of 1, 2, 4 or 8 bits: the palette indices are the ids (the colours, and any
  transparency, are ignored);
* anything else (RGB, gray with alpha, ...) cannot keep its ids and is refused, naming the file, and
  so is an animated PNG (which frame?) and one with a chunk failing its CRC (PIL refuses it, libpng not);
* a pack's mask member is an 8-bit gray PNG, as the packer writes it (``packed_problem``): DALI's reader
  reads it as it is;
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

from ..images import MAX_PNG_CHUNKS, ImageRefused, ReadAt, header_at

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


#: Why an animated PNG (an ``acTL`` chunk before the pixels) is not read as a mask.
ANIMATED = (
    "is an animated PNG: DALI reads its first frame and PIL its default image, which may differ, so which "
    "frame holds the class ids has no one answer (save the mask as a single image)"
)


def is_animated(read_at: ReadAt, size: int) -> bool:
    """Whether a PNG of ``size`` bytes, read with ``read_at(offset, count)``, is animated (an ``acTL`` chunk
    before its first ``IDAT``): the chunks before the pixels are walked by their headers (8 bytes each), at
    most ``MAX_PNG_CHUNKS`` (the header of a PNG with more is refused)."""
    pos = 8
    for _ in range(MAX_PNG_CHUNKS + 1):
        if pos + 8 > size:
            break
        head = read_at(pos, 8)
        if len(head) < 8 or head[4:8] == b"IDAT":
            return False
        if head[4:8] == b"acTL":
            return True
        pos += 12 + int.from_bytes(head[:4], "big")
    return False


def size_problem(mask_hw, image_hw) -> str:
    """``"mask is WxH, the image WxH"`` when a mask's ``(h, w)`` is not its image's, else ``''``."""
    (h, w), (image_h, image_w) = (int(v) for v in mask_hw), (int(v) for v in image_hw)
    return "" if (h, w) == (image_h, image_w) else f"mask is {w}x{h}, the image {image_w}x{image_h}"


#: PNG colour type -> its name in messages.
_COLOURS = {0: "gray", 2: "RGB", 3: "palette", 4: "gray+alpha", 6: "RGBA"}


def packed_problem(head: bytes) -> str:
    """Why a pack's mask member (its first 26 bytes or more) is not what a pack holds, an 8-bit gray PNG of
    the class ids (the packer writes every mask so, and DALI's reader decodes it as it is: a palette or a
    low bit depth would come as colours or scaled values); ``''`` when it is one."""
    layout = png_layout(head)
    if layout == (0, 8):
        return ""
    what = "not a PNG" if layout is None else f"a {layout[1]}-bit {_COLOURS.get(layout[0], 'unknown')} PNG"
    return (
        f"is {what}: a pack's masks are 8-bit gray PNGs of the class ids (the packer writes them so; "
        "pack the masks' folder again with gpupipe.pack)"
    )


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


def ids_problem(ids: np.ndarray, classes: int, ignore_index: int) -> str:
    """``"holds class id 3, beyond the 2 classes ..."`` where ``ids`` (a decoded mask) hold an id that is
    neither one of ``classes`` class indices nor ``ignore_index``; ``''`` when none does (or ``classes`` is 0:
    nothing to check against). Where it would reach ``F.cross_entropy`` (on a GPU: an assert naming nothing)."""
    if not classes:
        return ""
    beyond = [int(v) for v in np.unique(ids) if v >= classes and v != ignore_index]
    if not beyond:
        return ""
    shown = ", ".join(map(str, beyond[:6])) + (f" and {len(beyond) - 6} more" if len(beyond) > 6 else "")
    return (
        f"holds class id {shown}, beyond the {classes} classes (0..{classes - 1}) and ignore_index {ignore_index} "
        "(give classes= every class, or mask_map= to map the mask's values)"
    )


def decode_mask(data: bytes) -> np.ndarray:
    """Decodes a mask to ``(H, W)`` uint8 class ids (see the module docstring for the rule).

    Raises:
        ValueError: not a PNG, a mode whose values are not class ids (RGB, alpha), or 16-bit ids above 255.
        OSError, SyntaxError: PIL cannot read the data.
    """
    from PIL import Image

    from ..images import upright

    layout = png_layout(data)
    if layout is None or layout[1] not in MASK_DEPTHS.get(layout[0], ()):  # a JPEG in a pack's ".png" member too
        raise ValueError(f"a mask {header_problem(data)}")
    problem = ANIMATED if is_animated(lambda offset, count: data[offset : offset + count], len(data)) else ""
    problem = problem or crc_problem(data)  # named here, where PIL would say "cannot identify image file <...>"
    if problem:
        raise ValueError(f"a mask {problem}")
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

    An 8-bit gray or palette PNG is given with its header, pixels and EXIF chunks only (``_plain_gray``;
    a palette's colour type changed to gray: the pixel bytes are the indices); any other mask is decoded
    here (``decode_mask``) and written again as an 8-bit gray PNG.

    Raises:
        ValueError, OSError, SyntaxError: as ``decode_mask``; a chunk failing its CRC (``crc_problem``).
    """
    layout = png_layout(data)
    if layout in ((0, 8), (3, 8)):
        problem = crc_problem(data)  # DALI's libpng would pass over what PIL (torchvision) refuses
        if problem:
            raise ValueError(f"a mask {problem}")
        return _plain_gray(data)
    return gray_png(decode_mask(data))


def crc_problem(data: bytes) -> str:
    """``"is damaged: its gAMA chunk fails its CRC check"`` where a chunk of a PNG's bytes (up to ``IEND``)
    fails its CRC, else ``''``. PIL refuses such a file; libpng, under DALI, passes over a metadata
    chunk's (``gAMA``, ``tEXt``, ...) with a warning: one rule for both."""
    pos = 8
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        body = data[pos + 4 : pos + 8 + length]
        crc = data[pos + 8 + length : pos + 12 + length]
        if len(crc) < 4:
            return ""  # truncated: the decoders say so
        if zlib.crc32(body) != int.from_bytes(crc, "big"):
            return f"is damaged: its {body[:4].decode('latin-1')!r} chunk fails its CRC check"
        if body[:4] == b"IEND":
            return ""
        pos += 12 + length
    return ""


#: The chunks of a mask that DALI is given: the header, the pixels, the end, and the EXIF orientation (which
#: every decoder applies). The others are dropped: a palette's chunks (``PLTE``, ``tRNS``, and ``bKGD``, ``sBIT``,
#: ``hIST`` in its terms), colour management (``gAMA``, ``iCCP``, ``sRGB``, ...) and text mean nothing for ids,
#: and libpng printed a warning per mask and epoch for those a gray PNG may not hold (an RGB ``iCCP``).
_KEPT_CHUNKS = (b"IHDR", b"IDAT", b"IEND", b"eXIf")


def _plain_gray(data: bytes) -> bytes:
    """An 8-bit gray or palette PNG as a gray PNG of its values (indices), without decoding: ``IHDR``'s
    colour type becomes 0, the chunks but ``_KEPT_CHUNKS`` are dropped, the pixel data is the same bytes
    (``data`` itself where nothing changes)."""
    out = [data[:8]]
    pos, dropped = 8, False
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        chunk = data[pos : pos + 12 + length]
        if kind == b"IHDR" and data[pos + 17] != 0:
            body = bytearray(data[pos + 8 : pos + 8 + length])
            body[9], dropped = 0, True
            chunk = data[pos : pos + 8] + bytes(body) + zlib.crc32(b"IHDR" + bytes(body)).to_bytes(4, "big")
        if kind in _KEPT_CHUNKS:
            out.append(chunk)
        else:
            dropped = True
        pos += 12 + length
    return b"".join(out) if dropped else data


__all__ = [
    "MASK_DEPTHS",
    "png_layout",
    "header_problem",
    "packed_problem",
    "ids_problem",
    "crc_problem",
    "is_animated",
    "ANIMATED",
    "decode_mask",
    "gray_png",
    "mask_for_dali",
]
