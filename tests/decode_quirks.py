"""Files with the decoding quirks of photos from phones and the web (``test_redteam_decode.py``)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from exif_helpers import chunk
from PIL import Image, PngImagePlugin

H, W = 48, 64
#: The transpose that stores a displayed image so that its EXIF orientation shows it upright again.
_TURNS = ("FLIP_LEFT_RIGHT", "ROTATE_180", "FLIP_TOP_BOTTOM", "TRANSPOSE", "ROTATE_90", "TRANSVERSE", "ROTATE_270")
STORED = {o: Image.Transpose[name] for o, name in zip(range(2, 9), _TURNS)}


def encoded(img: Image.Image, fmt: str, **save) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **save)
    return out.getvalue()


def exif(orientation: int) -> Image.Exif:
    tags = Image.Exif()
    tags[0x0112] = orientation
    return tags


def png16(values: np.ndarray) -> bytes:
    """A 16-bit PNG (gray ``(H, W)`` or RGB ``(H, W, 3)`` uint16), written by hand (PIL writes no 16-bit RGB)."""
    colour = 2 if values.ndim == 3 else 0
    rows = values.reshape(values.shape[0], -1).astype(">u2")
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)
    ihdr = struct.pack(">IIBBBBB", values.shape[1], values.shape[0], 16, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def ycck(rgb: np.ndarray) -> bytes:
    """A YCCK JPEG (Photoshop's CMYK export: Adobe transform 2) that PIL decodes as ``rgb`` in CMYK."""
    stored = 255 - np.asarray(Image.fromarray(rgb).convert("CMYK")).astype(np.float64)  # the file's CMYK samples
    to_ycc = np.array([[0.299, -0.168736, 0.5], [0.587, -0.331264, -0.418688], [0.114, 0.5, -0.081312]])
    planes = np.dstack([(255 - stored[..., :3]) @ to_ycc + [0, 128, 128], stored[..., 3]])  # JFIF's YCbCr, and K
    data = bytearray(
        encoded(Image.fromarray(255 - np.clip(planes.round(), 0, 255).astype(np.uint8), "CMYK"), "JPEG", quality=95)
    )
    data[data.find(b"Adobe") + 11] = 2  # the transform flag: YCCK
    return bytes(data)


def top_down(bmp: bytes) -> bytes:
    """A 24-bit BMP stored top row first (a negative height), as some writers store it."""
    data = bytearray(bmp)
    start, stride = int.from_bytes(data[10:14], "little"), (W * 3 + 3) & ~3
    rows = [data[start + r * stride : start + (r + 1) * stride] for r in range(H)]
    data[22:26] = (-H).to_bytes(4, "little", signed=True)
    data[start:] = b"".join(reversed(rows))
    return bytes(data)


def without_adobe_marker(jpeg: bytes) -> bytes:
    """A JPEG without its Adobe ``APP14`` segment (which says how its CMYK is stored)."""
    at = jpeg.find(b"\xff\xee\x00\x0eAdobe")
    assert at > 0
    return jpeg[:at] + jpeg[at + 16 :]


def long_orientation(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with a big-endian EXIF block whose orientation is a 32-bit number (the standard says 16-bit)."""
    entry = b"\x01\x12\x00\x04\x00\x00\x00\x01" + orientation.to_bytes(4, "big")  # tag, LONG, 1 value
    body = b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x01" + entry + bytes(4)
    return jpeg[:2] + b"\xff\xe1" + (len(body) + 2).to_bytes(2, "big") + body + jpeg[2:]


#: An XMP packet that says "turned" (``tiff:Orientation``), as photo editors write one beside the EXIF block.
XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6"/></rdf:RDF></x:xmpmeta>'
)


def png_xmp():
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", XMP.decode())
    return info
