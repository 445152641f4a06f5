"""Headers: what an image file's first bytes say (format, size, EXIF orientation, JPEG process), read without
decoding a pixel (JPEG and PNG natively, other formats with PIL)."""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from PIL import Image

from .pixels import ImageRefused, exif_block_orientation, exif_orientation, open_checked
from .quirks import apng_unlike, unlike_pil


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
        unlike: why the loaders refuse a file DALI's decoders read other than PIL does (or one of them fails on),
            where its header shows it (``""``: as far as it shows, alike); see ``quirks``.
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
    unlike: str = ""

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
        orientation, frame = _png_walk(_reader(read_at, head), size)
        header = Header("PNG", width, height, orientation, unlike=apng_unlike(frame, width, height))
    else:
        fh = open_file()
        fh.seek(0)
        with open_checked(fh, max_pixels) as img:
            orientation = exif_orientation(img) if img.format == "WEBP" else 1
            frames = _pages(img) if img.format == "TIFF" else 1
            unlike = unlike_pil(img, head)
            header = Header(img.format or "?", img.width, img.height, orientation, -1, img.mode, frames, unlike=unlike)
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
                orientations.append(exif_block_orientation(segment))
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


def _png_walk(at: ReadAt, size: int | None) -> tuple[int, bytes | None]:
    """``(orientation, frame)``: the EXIF orientation of a PNG's ``eXIf`` chunks (1 when there is none), and
    an animated PNG's first frame control before its pixels (the ``fcTL`` chunk's width, height, x, y: 16 bytes;
    ``b""``: animated, its default image not a frame; ``None``: not animated).

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
    seen: set[bytes] = set()
    frame = b""
    for count, (pos, kind, length) in enumerate(_png_chunks(at, 8)):
        if kind == b"IDAT":
            pixels = pos
            break
        if count == MAX_PNG_CHUNKS:
            raise ImageRefused(f"unreadable image header: more than {MAX_PNG_CHUNKS:,} PNG chunks before its pixels")
        if kind == b"eXIf":
            orientations.append(_exif_chunk(at, pos, length))
        if kind == b"fcTL" and kind not in seen:
            frame = at(pos + 12, 16)
        seen.add(kind)
    if pixels is not None and size is None:
        orientations += [_exif_chunk(at, pos, n) for pos, kind, n in _png_chunks(at, pixels) if kind == b"eXIf"]
    elif pixels is not None and size is not None:
        start = max(pixels, size - PNG_TAIL_BYTES)
        orientations += _exif_chunks_in(at(start, size - start))
    return _one_orientation(orientations, "eXIf chunks"), frame if b"acTL" in seen else None


def _exif_chunk(at: ReadAt, pos: int, length: int) -> int:
    """The orientation in the ``eXIf`` chunk at ``pos`` of ``length`` bytes."""
    return exif_block_orientation(b"Exif\x00\x00" + at(pos + 8, min(length, 1 << 16)))


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
            found.append(exif_block_orientation(b"Exif\x00\x00" + body[: 1 << 16]))
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


__all__ = [
    "HEAD_BYTES",
    "MAX_PNG_CHUNKS",
    "NO_DECODER",
    "PNG_TAIL_BYTES",
    "Header",
    "ReadAt",
    "header_at",
    "read_header",
]
