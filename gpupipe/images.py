"""The one meaning of "an RGB image" for files PIL opens, shared by the packer and the torchvision fallback.

EXIF orientation applied; grayscale, palette, alpha, CMYK/YCCK and 16-bit
images become 8-bit RGB (16-bit keeps its high byte, alpha is dropped),
which is also what DALI's and torchvision's decoders give.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Literal

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import Error


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


def to_rgb8(img: Image.Image) -> Image.Image:
    """Any PIL mode to 8-bit RGB; 16-bit and 32-bit integer images keep their high byte."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        values = np.asarray(img).astype(np.int64)
        if values.max(initial=0) > 255:
            values = values >> 8
        img = Image.fromarray(np.clip(values, 0, 255).astype(np.uint8), "L")
    elif img.mode == "F":
        img = Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8), "L")
    elif img.mode in ("P", "PA"):
        img = img.convert("RGBA")
    return img if img.mode == "RGB" else img.convert("RGB")


def decode_rgb(data: bytes) -> np.ndarray:
    """Decodes with PIL to ``(H, W, 3)`` uint8 RGB, EXIF orientation applied.

    Raises:
        OSError, ValueError, SyntaxError: PIL cannot read the data.
    """
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(to_rgb8(ImageOps.exif_transpose(img)))


@dataclass(frozen=True)
class Header:
    """What an image file's header says.

    Attributes:
        kind: ``"JPEG"``, ``"PNG"`` or PIL's format name.
        width, height: as stored.
        orientation: the EXIF orientation (1 upright; 5-8 swap width and height when applied).
    """

    kind: str
    width: int
    height: int
    orientation: int = 1

    @property
    def oriented(self) -> tuple[int, int]:
        """``(h, w)`` of the decoded image, EXIF orientation applied."""
        return (self.width, self.height) if self.orientation in (5, 6, 7, 8) else (self.height, self.width)


_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
#: Bytes read at the start of a file; a JPEG whose frame header lies further is read on from there.
HEAD_BYTES = 4096

ReadAt = Callable[[int, int], bytes]


def read_header(fh: BinaryIO, max_pixels: int) -> Header:
    """Parses an image's header from an open file (JPEG and PNG natively, other formats with PIL).

    Raises:
        ImageRefused: not an image, an unreadable header, or more than ``max_pixels`` pixels.
    """

    def read_at(offset: int, size: int) -> bytes:
        fh.seek(offset)
        return fh.read(size)

    return header_at(read_at, lambda: fh, max_pixels)


def header_at(read_at: ReadAt, open_file: Callable[[], BinaryIO], max_pixels: int) -> Header:
    """``read_header`` over ``read_at(offset, size)``; ``open_file()`` gives PIL a file for other formats."""
    head = read_at(0, HEAD_BYTES)
    if head[:3] == b"\xff\xd8\xff":
        header = _jpeg_header(read_at, head)
    elif head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        header = Header("PNG", width, height, _png_orientation(_reader(read_at, head)))
    else:
        fh = open_file()
        fh.seek(0)
        with open_checked(fh, max_pixels) as img:
            orientation = img.getexif().get(0x0112, 1) if img.format == "WEBP" else 1
            header = Header(img.format or "?", img.width, img.height, orientation)
    if header.width < 1 or header.height < 1:
        raise ImageRefused(f"unreadable image header: size {header.width}x{header.height}")
    pixels = header.width * header.height
    if pixels > max_pixels:
        raise ImageRefused(
            f"too many pixels: {header.width}x{header.height} = {pixels / 1e6:.0f} MP exceeds the "
            f"{max_pixels / 1e6:.0f} MP limit (decompression bomb?)"
        )
    return header


def _jpeg_header(read_at: ReadAt, head: bytes) -> Header:
    """Walks the JPEG marker segments up to the frame header, noting the EXIF orientation."""
    at = _reader(read_at, head)
    pos, orientation = 2, 1
    for _ in range(10_000):
        marker = at(pos, 4)
        if len(marker) < 2 or marker[0] != 0xFF:
            break
        kind = marker[1]
        if kind == 0xFF:  # fill byte
            pos += 1
            continue
        if kind == 0x01 or 0xD0 <= kind <= 0xD8:  # markers without a length
            pos += 2
            continue
        if kind in (0xD9, 0xDA) or len(marker) < 4:
            break
        length = int.from_bytes(marker[2:4], "big")
        if length < 2:
            break
        if kind in _SOF:
            frame = at(pos + 4, 5)
            if len(frame) < 5:
                break
            return Header("JPEG", int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big"), orientation)
        if kind == 0xE1 and orientation == 1:
            orientation = _exif_orientation(at(pos + 4, min(length - 2, 1 << 16)))
        pos += 2 + length
    raise ImageRefused("unreadable image header: no JPEG frame header")


def _reader(read_at: ReadAt, head: bytes) -> ReadAt:
    """``read_at`` that serves what lies inside ``head`` (the file's first bytes) from it."""

    def at(offset: int, size: int) -> bytes:
        if offset + size <= len(head):
            return head[offset : offset + size]
        return read_at(offset, size)

    return at


def _png_orientation(at: ReadAt) -> int:
    """The EXIF orientation of a PNG's ``eXIf`` chunk (before ``IDAT``, as the PNG spec puts it; both
    decoders turn the image by it), 1 when there is none."""
    pos = 8
    for _ in range(1_000):
        chunk = at(pos, 8)
        if len(chunk) < 8 or chunk[4:8] in (b"IDAT", b"IEND"):
            break
        length = int.from_bytes(chunk[:4], "big")
        if chunk[4:8] == b"eXIf":
            return _exif_orientation(b"Exif\x00\x00" + at(pos + 8, min(length, 1 << 16)))
        pos += 12 + length
    return 1


def _exif_orientation(app1: bytes) -> int:
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
        if int.from_bytes(entry[:2], order) == 0x0112:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return 1
