"""Checking and normalising one input image into a clean RGB JPEG.

Every input is decoded fully once (which finds truncated files), EXIF
orientation is applied, any mode (grayscale, palette, RGBA, CMYK/YCCK,
16-bit) becomes 8-bit RGB, other formats are re-encoded as JPEG, and
``max_size`` shrinks the shorter side (never enlarges). A JPEG that is
already clean RGB, upright and small enough is copied byte for byte.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Optional, Tuple

from PIL import Image, ImageOps

from ..images import ImageRefused, open_checked, to_rgb8

#: EXIF tag of the orientation.
ORIENTATION = 0x0112


@dataclass(frozen=True)
class ConvertSettings:
    """How inputs are normalised.

    Attributes:
        max_size: shorter side at most this many pixels (``None``: keep the size).
        quality: JPEG quality of re-encoded images.
        max_pixels: refuse images with more pixels (decompression bombs).
    """

    max_size: Optional[int] = None
    quality: int = 90
    max_pixels: int = 100_000_000


@dataclass(frozen=True)
class Converted:
    """The outcome for one input: JPEG bytes, or the reason it was skipped."""

    jpeg: Optional[bytes]
    reason: Optional[str]
    bytes_in: int
    copied: bool = False


def target_size(width: int, height: int, max_size: Optional[int]) -> Tuple[int, int]:
    """``(w, h)`` with the shorter side at most ``max_size`` (aspect kept, never enlarged)."""
    short = min(width, height)
    if max_size is None or short <= max_size:
        return width, height
    scale = max_size / short
    return max(1, round(width * scale)), max(1, round(height * scale))


def convert(data: bytes, settings: ConvertSettings) -> Converted:
    """Checks one encoded image and returns it as a clean RGB JPEG, or why not."""
    if not data:
        return Converted(None, "empty file (0 bytes)", 0)
    try:
        img = open_checked(io.BytesIO(data), settings.max_pixels)
    except ImageRefused as refused:
        return Converted(None, refused.reason, len(data))
    width, height = img.size
    orientation = img.getexif().get(ORIENTATION, 1)
    size = target_size(width, height, settings.max_size)
    clean = img.format == "JPEG" and img.mode == "RGB" and orientation == 1 and size == (width, height)
    if img.format == "JPEG" and size != (width, height):
        # Let libjpeg decode at 1/2, 1/4 or 1/8 scale when that still covers the target.
        img.draft("RGB", size)  # stored (pre-rotation) coordinates, like ``size``
    try:
        img.load()  # the full decode, once: finds truncated and corrupt files
    except (OSError, SyntaxError, ValueError) as err:
        return Converted(None, f"cannot decode: {err}", len(data))
    if clean:
        return Converted(data, None, len(data), copied=True)
    img = to_rgb8(ImageOps.exif_transpose(img))
    size = target_size(img.width, img.height, settings.max_size)
    if size != img.size:
        img = img.resize(size, Image.BICUBIC, reducing_gap=3.0)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=settings.quality)
    return Converted(out.getvalue(), None, len(data))
