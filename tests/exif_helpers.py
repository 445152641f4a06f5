"""Images whose EXIF orientation lies where the tests need it: PNG ``eXIf`` chunks before or after the pixels,
JPEG EXIF segments before or after the frame header, and one scene to turn."""

from __future__ import annotations

import io
import zlib

import numpy as np
from PIL import Image

TURN = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}


def chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def exif_block(orientation: int | None) -> bytes:
    """A TIFF-structured EXIF block (an ``eXIf`` chunk's body) with IFD0 holding ``orientation`` (none: empty)."""
    entries = [] if orientation is None else [(0x0112).to_bytes(2, "little") + b"\x03\x00\x01\x00\x00\x00"
                                              + orientation.to_bytes(2, "little") + b"\x00\x00"]
    return b"II*\x00\x08\x00\x00\x00" + len(entries).to_bytes(2, "little") + b"".join(entries) + bytes(4)


def png_with_exif(pixels: np.ndarray, before=(), after=()) -> bytes:
    """``pixels`` as a PNG with ``eXIf`` chunks of these orientations before its ``IDAT`` and after it."""
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    data, pos, parts = out.getvalue(), 8, [out.getvalue()[:8]]
    while pos < len(data):
        length, kind = int.from_bytes(data[pos : pos + 4], "big"), data[pos + 4 : pos + 8]
        if kind == b"IDAT" and pos and before is not None:
            parts += [chunk(b"eXIf", exif_block(o)) for o in before]
            before = None
        if kind == b"IEND":
            parts += [chunk(b"eXIf", exif_block(o)) for o in after]
        parts.append(data[pos : pos + 12 + length])
        pos += 12 + length
    return b"".join(parts)


def turned_png(pixels: np.ndarray, orientation: int, **where: bool) -> bytes:
    """``pixels`` (as displayed) stored turned, with the ``orientation`` that shows them upright."""
    stored = np.asarray(Image.fromarray(pixels).transpose(TURN[orientation]))
    return png_with_exif(stored, **{k: [orientation] for k in where})


def jpeg_with_exif(pixels: np.ndarray, *segments: tuple[str, int | None]) -> bytes:
    """A JPEG with EXIF APP1 segments ``("start" | "after-frame", orientation)``."""
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=95)
    data = out.getvalue()
    pos = 2
    while data[pos + 1] != 0xC0:  # to the end of the frame header
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    frame_end = pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")

    def app1(orientation):
        body = b"Exif\x00\x00" + exif_block(orientation)
        return b"\xff\xe1" + (len(body) + 2).to_bytes(2, "big") + body

    start = b"".join(app1(o) for where, o in segments if where == "start")
    late = b"".join(app1(o) for where, o in segments if where == "after-frame")
    return data[:2] + start + data[2:frame_end] + late + data[frame_end:]


def scene() -> tuple[np.ndarray, np.ndarray]:
    """A 40x24 image with a white rectangle, and its mask (class 3 in the rectangle, 1 elsewhere)."""
    image = np.zeros((24, 40, 3), np.uint8)
    image[3:9, 4:14] = 255
    mask = np.ones((24, 40), np.uint8)
    mask[3:9, 4:14] = 3
    return image, mask
