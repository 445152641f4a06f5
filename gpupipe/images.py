"""The one meaning of "an RGB image" for files PIL opens, shared by the packer and the torchvision fallback.

EXIF orientation applied; grayscale, palette, alpha, CMYK/YCCK and 16-bit
images become 8-bit RGB (16-bit gray scaled by 255 / 65535, colour keeps its high byte; alpha dropped),
which is also what DALI's and torchvision's decoders give.
"""

from __future__ import annotations

import io
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import Error

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
    return _exif_orientation(block if block.startswith(b"Exif\x00\x00") else b"Exif\x00\x00" + block)


@dataclass(frozen=True)
class Header:
    """What an image file's header says.

    Attributes:
        kind: ``"JPEG"``, ``"PNG"`` or PIL's format name.
        width, height: as stored.
        orientation: the EXIF orientation (1 upright; 5-8 swap width and height when applied).
        scan_at: a JPEG's offset of its image's scan (``SOS``), where its coded data starts; ``-1`` unknown.
        mode: PIL's mode, for formats other than JPEG and PNG; a JPEG's ``"L"``, ``"RGB"`` (YCbCr too) or
            ``"CMYK"`` (YCCK too) by its components (``""``: not read).
        frames: a TIFF's pages (1 for other formats).
        adobe: a JPEG holds an Adobe ``APP14`` segment (which says how its CMYK is stored).
        lossless: a JPEG coded losslessly (frame markers ``SOF3``, ``SOF7``, ``SOF11``, ``SOF15``).
    """

    kind: str
    width: int
    height: int
    orientation: int = 1
    scan_at: int = -1
    mode: str = ""
    frames: int = 1
    adobe: bool = False
    lossless: bool = False

    @property
    def oriented(self) -> tuple[int, int]:
        """``(h, w)`` of the decoded image, EXIF orientation applied."""
        return (self.width, self.height) if self.orientation in (5, 6, 7, 8) else (self.height, self.width)


def _pages(img: Image.Image) -> int:
    """A TIFF's page count (its chain of directories, read without decoding a pixel)."""
    try:
        return int(getattr(img, "n_frames", 1))
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise ImageRefused(f"unreadable image header: {err}") from None


#: Formats (PIL's names) every loader backend decodes alike: DALI's decoders read these and no other.
LOADER_FORMATS = ("JPEG", "PNG", "BMP", "WEBP", "TIFF", "PPM", "JPEG2000")


def no_one_reading(kind: str, mode: str, pages: int) -> str | None:
    """Why the loaders refuse an image as having no one 8-bit RGB reading, or ``None``: float pixels or a TIFF of
    integer pixels over 8 bits (the packer stretches each one's own range), a TIFF of several ``pages`` (which?)."""
    if mode == "F" or (kind == "TIFF" and mode.startswith("I")):
        return (
            f"a {kind} of {mode} pixels (not 8-bit): the loaders read 8-bit images only; python -m gpupipe.pack "
            "converts it (each image's own min..max stretched to 0..255)"
        )
    if kind == "TIFF" and pages > 1:
        return f"a TIFF of {pages} pages: which one to read is the user's call; split it first"
    return None


def loader_refusal(header: Header, suffix: str = "") -> str | None:
    """Why the loaders refuse an image they could open, or ``None``: a format DALI does not decode (PIL
    would: GIF, ICO, TGA...; a file's name need not say it, ``suffix`` is its ending), or no one 8-bit reading.
    Refused on every backend alike, so that no backend delivers what another fails on."""
    if header.kind not in LOADER_FORMATS:
        named = f", named {suffix}" if suffix else ""
        return (
            f"an image in {header.kind} format{named}: the loaders read only JPEG, PNG, BMP, WebP, TIFF, PNM "
            "and JPEG 2000 (DALI decodes no other); python -m gpupipe.pack converts it"
        )
    if header.kind == "JPEG" and header.mode == "CMYK" and not header.adobe:
        return (
            "a CMYK JPEG without an Adobe marker: decoders disagree on its colours (DALI inverts its inks, "
            "libjpeg-turbo and PIL do not); python -m gpupipe.pack converts it as PIL reads it"
        )
    if header.lossless:  # PIL reads it; DALI and torchvision.io refuse it
        return "a lossless JPEG: the loaders' decoders do not read it; python -m gpupipe.pack converts it"
    return no_one_reading(header.kind, header.mode, header.frames)


_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_HIERARCHICAL = frozenset({0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF})  # frame markers of hierarchical JPEGs
NO_DECODER = "no decoder gpupipe or PIL uses reads it; convert it to an 8-bit JPEG or a PNG"  # 12-bit, hierarchical
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

    return header_at(read_at, lambda: fh, max_pixels, fh.seek(0, io.SEEK_END))


def header_at(read_at: ReadAt, open_file: Callable[[], BinaryIO], max_pixels: int, size: int | None = None) -> Header:
    """``read_header`` over ``read_at(offset, size)``; ``open_file()`` gives PIL a file for other formats;
    ``size``: the file's length, which spares a PNG's scan its every chunk (``None``: unknown)."""
    head = read_at(0, HEAD_BYTES)
    if head[:3] == b"\xff\xd8\xff":
        header = _jpeg_header(read_at, head)
    elif head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        header = Header("PNG", width, height, _png_orientation(_reader(read_at, head), size))
    else:
        fh = open_file()
        fh.seek(0)
        with open_checked(fh, max_pixels) as img:
            orientation = exif_orientation(img) if img.format == "WEBP" else 1
            frames = _pages(img) if img.format == "TIFF" else 1
            header = Header(img.format or "?", img.width, img.height, orientation, mode=img.mode, frames=frames)
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
    """Walks the JPEG marker segments up to the scan, noting the frame header and every EXIF orientation
    (an ``APP1`` may follow the frame header: every decoder reads it there too)."""
    at = _reader(read_at, head)
    pos, frame, orientations, scan_at, adobe, process = 2, b"", list[int](), -1, False, 0
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
        if kind == 0xDA:
            scan_at = pos
            break
        if kind == 0xD9 or len(marker) < 4:
            break
        length = int.from_bytes(marker[2:4], "big")
        if length < 2:
            break
        if kind in _SOF and not frame:
            frame, process = at(pos + 4, 6), kind
            if len(frame) < 5:
                break
        if kind == 0xEE:
            adobe = adobe or at(pos + 4, 5) == b"Adobe"
        if kind == 0xE1:
            segment = at(pos + 4, min(length - 2, 1 << 16))
            if segment[:6] == b"Exif\x00\x00":  # (an APP1 may hold XMP instead)
                orientations.append(_exif_orientation(segment))
        pos += 2 + length
    if len(frame) < 5:
        raise ImageRefused("unreadable image header: no JPEG frame header")
    if process in _HIERARCHICAL or frame[0] != 8:  # libjpeg's 8-bit decoders (PIL's, DALI's) refuse these
        what = f"a hierarchical JPEG (frame marker 0x{process:X})" if frame[0] == 8 else f"a {frame[0]}-bit JPEG"
        raise ImageRefused(f"{what}: {NO_DECODER}")
    width, height = int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big")
    mode = {1: "L", 3: "RGB", 4: "CMYK"}.get(frame[5] if len(frame) > 5 else 0, "")
    orientation = _one_orientation(orientations, "EXIF segments")
    return Header("JPEG", width, height, orientation, scan_at, mode=mode, adobe=adobe, lossless=process & 3 == 3)


def _reader(read_at: ReadAt, head: bytes) -> ReadAt:
    """``read_at`` that serves what lies inside ``head`` (the file's first bytes) from it."""

    def at(offset: int, size: int) -> bytes:
        if offset + size <= len(head):
            return head[offset : offset + size]
        return read_at(offset, size)

    return at


#: Chunk headers walked at most before a PNG's pixels (its ``IDAT`` chunks).
MAX_PNG_CHUNKS = 1_000
#: Bytes read at a PNG's end for the chunks after its pixels (where writers put an ``eXIf`` chunk that follows
#: them: metadata appended last, before ``IEND``).
PNG_TAIL_BYTES = 1 << 16


def _png_orientation(at: ReadAt, size: int | None) -> int:
    """The EXIF orientation of a PNG's ``eXIf`` chunks, 1 when there is none.

    The chunks before the pixels are walked; after them, an ``eXIf`` chunk is allowed (PNG's third edition)
    and PIL and DALI both turn the image by it there. A photo's pixels come in hundreds of ``IDAT``
    chunks, and walking their headers would cost the scan a read each (the whole file, on cold storage):
    so the file's last ``PNG_TAIL_BYTES`` (``size``: the file's length; unknown, every chunk is walked) are
    searched for ``eXIf`` chunks, each recognised by its length and CRC.

    Raises:
        ImageRefused: more than ``MAX_PNG_CHUNKS`` chunks before the pixels, or ``eXIf`` chunks that disagree.
    """
    orientations: list[int] = []
    pixels = None
    for count, (pos, kind, length) in enumerate(_png_chunks(at, 8)):
        if kind == b"IDAT":
            pixels = pos
            break
        if count == MAX_PNG_CHUNKS:
            raise ImageRefused(f"unreadable image header: more than {MAX_PNG_CHUNKS:,} PNG chunks before its pixels")
        if kind == b"eXIf":
            orientations.append(_exif_chunk(at, pos, length))
    if pixels is not None and size is None:
        orientations += [_exif_chunk(at, pos, n) for pos, kind, n in _png_chunks(at, pixels) if kind == b"eXIf"]
    elif pixels is not None and size is not None:
        start = max(pixels, size - PNG_TAIL_BYTES)
        orientations += _exif_chunks_in(at(start, size - start))
    return _one_orientation(orientations, "eXIf chunks")


def _exif_chunk(at: ReadAt, pos: int, length: int) -> int:
    """The orientation in the ``eXIf`` chunk at ``pos`` of ``length`` bytes."""
    return _exif_orientation(b"Exif\x00\x00" + at(pos + 8, min(length, 1 << 16)))


def _png_chunks(at: ReadAt, pos: int) -> Iterator[tuple[int, bytes, int]]:
    """``(offset, type, length)`` of a PNG's chunks from ``pos`` (a chunk's start) up to ``IEND`` or the end."""
    while True:
        chunk = at(pos, 8)
        if len(chunk) < 8 or chunk[4:8] == b"IEND":
            return
        length = int.from_bytes(chunk[:4], "big")
        yield pos, chunk[4:8], length
        pos += 12 + length


def _exif_chunks_in(data: bytes) -> list[int]:
    """The orientations of the whole ``eXIf`` chunks in ``data`` (a PNG's end): its type, with a length before it
    that fits and a CRC after that matches (compressed pixels holding the four letters are not taken for one)."""
    found: list[int] = []
    k = data.find(b"eXIf", 4)
    while k >= 0:
        length = int.from_bytes(data[k - 4 : k], "big")
        body, crc = data[k + 4 : k + 4 + length], data[k + 4 + length : k + 8 + length]
        if len(body) == length and len(crc) == 4 and zlib.crc32(b"eXIf" + body) == int.from_bytes(crc, "big"):
            found.append(_exif_orientation(b"Exif\x00\x00" + body[: 1 << 16]))
        k = data.find(b"eXIf", k + 4)
    return found


def _one_orientation(orientations: list[int], what: str) -> int:
    """The one EXIF orientation of a file (1 when it has none).

    Raises:
        ImageRefused: when its EXIF blocks disagree: decoders differ on which one applies (PIL takes
            the first or the last, DALI gives pixels turned by one and laid out by another).
    """
    if len(set(orientations)) > 1:
        found = ", ".join(map(str, orientations))
        raise ImageRefused(
            f"{len(orientations)} {what} with different EXIF orientations ({found}): decoders differ on which applies"
        )
    return orientations[0] if orientations else 1


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
        if int.from_bytes(entry[:2], order) == ORIENTATION:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return 1
