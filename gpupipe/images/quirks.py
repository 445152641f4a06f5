"""Quirks: what in an image file's header makes DALI's decoders read it other than PIL does (or fail on it
where PIL reads it), measured on DALI 2.4; the scan refuses such files on every backend alike."""

from __future__ import annotations

import re

from PIL import Image

#: What a refusal of a file PIL reads (and the packer converts) ends with.
CONVERTS = "python -m gpupipe.pack converts it as PIL reads it"
#: An animated PNG's default image (its ``IDAT``) is not one of its frames when no ``fcTL`` chunk comes before it.
APNG_APART = (
    "an animated PNG whose default image is not one of its frames: PIL and torchvision read the default image, "
    f"DALI the first frame; {CONVERTS}"
)
#: An animated PNG whose first frame, its default image, does not cover the image (against the APNG standard).
APNG_PARTIAL = (
    "an animated PNG whose first frame is not the whole image (against the standard): PIL fails on it, DALI reads "
    "it; save it again as a PNG"
)
#: TIFF tag ``BitsPerSample`` (1 by default: PIL writes none for a bilevel image).
BITS_PER_SAMPLE = 258
#: TIFF tag ``PlanarConfiguration``: 2 stores each colour plane apart (``RRR...GGG...BBB``).
PLANAR_CONFIGURATION = 284
#: A BMP's compression field: 2 is RLE4 (run-length coded 4-bit palette indices).
BMP_RLE4 = 2
#: The PNM maxvals DALI scales as PIL does (8 bits as they are, 16 bits by 255 / 65535).
PNM_MAXVALS = (255, 65535)
#: A PNM header up to its maxval: magic, width, height, maxval, each after blanks and ``#`` comments.
_PNM = re.compile(rb"P[2356](?:(?:\s|#[^\n\r]*)+(\d+)){3}")


def apng_unlike(frame: bytes | None, width: int, height: int) -> str:
    """Why DALI reads a PNG of ``width`` x ``height`` other than PIL does, by its first ``fcTL`` chunk before its
    pixels (``frame``: its width, height, x, y; ``b""``: none though animated; ``None``: not animated), or ``""``."""
    if frame is None:
        return ""
    if not frame:
        return APNG_APART
    if frame != b"".join(v.to_bytes(4, "big") for v in (width, height, 0, 0)):
        return APNG_PARTIAL
    return ""


def _tiff_unlike(img: Image.Image) -> str:
    """Why DALI reads a TIFF other than PIL does, by its first page's tags, or ``""``."""
    tags = getattr(img, "tag_v2", {})
    found = tags.get(BITS_PER_SAMPLE)
    bits = found if isinstance(found, tuple) else (found,)
    if img.mode == "1" and found is None:
        return f"a bilevel (1-bit) TIFF without a BitsPerSample tag: DALI's decoder fails on it; {CONVERTS}"
    odd = sorted({b for b in bits if isinstance(b, int) and b < 8})  # (deeper ones: ``refusals.no_one_reading``)
    if img.mode != "1" and odd:
        return f"a TIFF of {odd[0]}-bit samples: DALI's decoder fails on it; {CONVERTS}"
    if tags.get(PLANAR_CONFIGURATION, 1) == 2 and len(bits) > 1:
        return f"a TIFF of colour planes stored apart (PlanarConfiguration 2): DALI's decoder mixes them up; {CONVERTS}"
    return ""


def unlike_pil(img: Image.Image, head: bytes) -> str:
    """Why DALI reads ``img`` (opened by PIL, the format's own header read; ``head``: the file's first bytes)
    other than PIL does, or ``""``: a bilevel TIFF without ``BitsPerSample``, a TIFF of 2- or 4-bit samples (DALI
    fails), a TIFF of colour planes stored apart (255 levels apart), a 16-bit or RLE4 BMP
    (fails, or 5-bit channels scaled otherwise: 7 levels apart), a PNM whose maxval is neither 255 nor 65535
    (DALI does not scale it: up to 240 levels apart)."""
    if img.format == "TIFF":
        return _tiff_unlike(img)
    if img.format == "BMP" and len(head) >= 34:
        core = int.from_bytes(head[14:18], "little") == 12  # OS/2's header: 16-bit fields, no compression
        bits = int.from_bytes(head[24:26] if core else head[28:30], "little")
        compression = 0 if core else int.from_bytes(head[30:34], "little")
        if bits == 16 or compression == BMP_RLE4:
            what = "16-bit" if bits == 16 else "run-length coded (RLE4)"
            return f"a {what} BMP: DALI's decoder reads it other than PIL does; {CONVERTS}"
    if img.format == "PPM":
        found = _PNM.match(head)
        if found and int(found.group(1)) not in PNM_MAXVALS:
            return f"a PNM of maxval {int(found.group(1))}: DALI's decoder does not scale it as PIL does; {CONVERTS}"
    return ""


__all__ = ["CONVERTS", "APNG_APART", "APNG_PARTIAL", "apng_unlike", "BITS_PER_SAMPLE", "PNM_MAXVALS", "unlike_pil"]
