"""Pixels: opening an image file checked, and its one 8-bit RGB reading (EXIF orientation applied).

EXIF orientation applied; grayscale, palette, alpha, CMYK/YCCK and 16-bit
images become 8-bit RGB (16-bit gray scaled by 255 / 65535, colour keeps its high byte; alpha dropped),
which is also what DALI's and torchvision's decoders give.
"""

from __future__ import annotations

import io
import warnings
from typing import BinaryIO, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import Error

#: EXIF tag of the orientation.
ORIENTATION = 0x0112


class ImageRefused(Error, ValueError):
    """A file that is not an image, has an unreadable header, or has too many pixels; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def open_checked(fileobj: BinaryIO, max_pixels: int) -> Image.Image:
    """Opens an image lazily (the header only) and refuses it before any pixel is decoded.

    Raises:
        ImageRefused: not an image, an unreadable header, or more than
            ``max_pixels`` pixels (decompression bombs).
    """
    try:
        with warnings.catch_warnings():  # PIL's own bomb limit is replaced by ``max_pixels``
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(fileobj)
    except UnidentifiedImageError:
        raise ImageRefused("not an image (unrecognised format)") from None
    except Image.DecompressionBombError as err:
        raise ImageRefused(f"too many pixels (decompression bomb?): {err}") from None
    except (OSError, SyntaxError, ValueError) as err:
        raise ImageRefused(f"unreadable image header: {err}") from None
    width, height = img.size
    if width * height > max_pixels:
        raise ImageRefused(
            f"too many pixels: {width}x{height} = {width * height / 1e6:.0f} MP exceeds the "
            f"{max_pixels / 1e6:.0f} MP limit (decompression bomb?)"
        )
    return img


def to_rgb8(img: Image.Image, kind: str | None = None) -> Image.Image:
    """Any PIL mode to 8-bit RGB. 16-bit gray is scaled as DALI's decoders scale it (``v * 255 / 65535``,
    rounded), whatever its values (a dark image's too: a PNG's mode ``I`` too, as Pillow before 11 opens 16-bit
    gray; ``kind``: the file's format, ``img.format`` by default); so are integer images (mode ``I``: a 16-bit
    PGM) whose values exceed 255."""
    values = np.asarray(img).astype(np.int64) if img.mode.startswith("I") else None
    if values is not None and (img.mode != "I" or (kind or img.format) == "PNG" or values.max(initial=0) > 255):
        values = (values * 255 + 32767) // 65535
    if values is not None:
        img = Image.fromarray(np.clip(values, 0, 255).astype(np.uint8), "L")
    elif img.mode == "F":
        img = Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8), "L")
    elif img.mode in ("P", "PA"):
        img = img.convert("RGBA")
    return img if img.mode == "RGB" else img.convert("RGB")


def decode_rgb(data: bytes, decode_as: str = "upright") -> np.ndarray:
    """Decodes with PIL to ``(H, W, 3)`` uint8 RGB, EXIF orientation applied (``"stored"``: torchvision's pil_loader).

    Raises:
        OSError, ValueError, SyntaxError: PIL cannot read the data.
    """
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(to_rgb8(upright(img), img.format) if decode_as == "upright" else img.convert("RGB"))


#: EXIF orientation -> the transpose that shows the stored pixels as displayed (as ``ImageOps.exif_transpose``).
_TURNS = "FLIP_LEFT_RIGHT ROTATE_180 FLIP_TOP_BOTTOM TRANSPOSE ROTATE_270 TRANSVERSE ROTATE_90".split()
_TRANSPOSE = {o: Image.Transpose[name] for o, name in zip(range(2, 9), _TURNS)}


def upright(img: Image.Image, orientation: int | None = None) -> Image.Image:
    """``img`` as displayed: decoded, its EXIF ``orientation`` (by default read once from ``img``) applied
    (``img`` itself when upright).

    Decoded first, so that a PNG's ``eXIf`` chunk after its pixels counts (PIL reads it at the end).
    """
    img.load()
    method = _TRANSPOSE.get(exif_orientation(img) if orientation is None else orientation)
    return img if method is None else img.transpose(method)


def exif_orientation(img: Image.Image) -> int:
    """The orientation in an image's EXIF block, as the scan reads it (1 without one). Not ``img.getexif()``'s
    alone: without an EXIF one PIL takes an XMP ``tiff:Orientation`` (or an ImageMagick raw profile's), which
    DALI and ``torchvision.io`` ignore, and so does gpupipe; where PIL says turned, the EXIF block must say so."""
    if img.getexif().get(ORIENTATION, 1) == 1:
        return 1
    block = img.info.get("exif") or b""
    return exif_block_orientation(block if block.startswith(b"Exif\x00\x00") else b"Exif\x00\x00" + block)


def exif_block_orientation(app1: bytes) -> int:
    """The orientation tag (0x0112) of IFD0 in an APP1 segment, 1 when absent or unreadable."""
    if app1[:6] != b"Exif\x00\x00" or len(app1) < 14:
        return 1
    tiff = app1[6:]
    orders: dict[bytes, Literal["little", "big"]] = {b"II": "little", b"MM": "big"}
    order = orders.get(tiff[:2])
    if order is None:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    count = int.from_bytes(tiff[ifd : ifd + 2], order)
    for k in range(min(count, 512)):
        entry = tiff[ifd + 2 + 12 * k : ifd + 14 + 12 * k]
        if len(entry) < 12:
            break
        if int.from_bytes(entry[:2], order) == ORIENTATION:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return 1


__all__ = [
    "ORIENTATION",
    "ImageRefused",
    "decode_rgb",
    "exif_block_orientation",
    "exif_orientation",
    "open_checked",
    "to_rgb8",
    "upright",
]
