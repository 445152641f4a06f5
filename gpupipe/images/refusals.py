"""Refusals: the images every loader backend refuses alike, each with the reason it names."""

from __future__ import annotations

from .headers import Header
from .quirks import CONVERTS

#: Formats (PIL's names) every loader backend decodes alike: DALI's decoders read these and no other.
LOADER_FORMATS = ("JPEG", "PNG", "BMP", "WEBP", "TIFF", "PPM", "JPEG2000")
#: PIL's modes of the TIFFs DALI's decoder reads as PIL does (1: with its BitsPerSample tag; P within a level).
TIFF_MODES = frozenset({"RGB", "RGBA", "L", "P", "CMYK", "1"})


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
    would: GIF, ICO, TGA...; a file's name need not say it, ``suffix`` is its ending), no one 8-bit reading, or one
    DALI reads other than PIL (``Header.unlike``; a TIFF mode outside ``TIFF_MODES``). Refused on every backend
    alike, so that no backend delivers what another fails on, nor other pixels."""
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
    deep = no_one_reading(header.kind, header.mode, header.frames)
    if deep or header.unlike:
        return deep or header.unlike
    if header.kind == "TIFF" and header.mode not in TIFF_MODES:
        return f"a TIFF of {header.mode} pixels: DALI's decoder reads it other than PIL does; {CONVERTS}"
    return None


__all__ = ["LOADER_FORMATS", "TIFF_MODES", "loader_refusal", "no_one_reading"]
