"""The one meaning of "an RGB image" for files PIL opens, shared by the scan, the packer and the torchvision
fallback: ``headers`` reads what a file's first bytes say, ``refusals`` says which images every loader refuses
alike (``quirks``: those DALI reads other than PIL, told by their headers), ``pixels`` opens and decodes one to
8-bit RGB."""

from .headers import HEAD_BYTES, MAX_PNG_CHUNKS, NO_DECODER, PNG_TAIL_BYTES, Header, ReadAt, header_at, read_header
from .pixels import (
    ORIENTATION,
    ImageRefused,
    decode_rgb,
    exif_block_orientation,
    exif_orientation,
    open_checked,
    to_rgb8,
    upright,
)
from .refusals import LOADER_FORMATS, loader_refusal, no_one_reading

__all__ = [
    "HEAD_BYTES",
    "LOADER_FORMATS",
    "MAX_PNG_CHUNKS",
    "NO_DECODER",
    "ORIENTATION",
    "PNG_TAIL_BYTES",
    "Header",
    "ImageRefused",
    "ReadAt",
    "decode_rgb",
    "exif_block_orientation",
    "exif_orientation",
    "header_at",
    "loader_refusal",
    "no_one_reading",
    "open_checked",
    "read_header",
    "to_rgb8",
    "upright",
]
