"""The one meaning of "an RGB image" for files PIL opens, shared by the packer and the torchvision fallback.

EXIF orientation applied; grayscale, palette, alpha, CMYK/YCCK and 16-bit
images become 8-bit RGB (16-bit keeps its high byte, alpha is dropped),
which is also what DALI's and torchvision's decoders give.
"""

from __future__ import annotations

import io
import warnings
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError


class ImageRefused(ValueError):
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
