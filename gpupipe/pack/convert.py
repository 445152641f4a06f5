"""Checking and normalising one input (image and target) into the members of one packed sample.

Every image is decoded fully once (which finds truncated files), EXIF
orientation is applied, any mode (grayscale, palette, RGBA, CMYK/YCCK,
16-bit) becomes 8-bit RGB, float and deep-integer images the loaders refuse
(a TIFF of 16- or 32-bit integers, float pixels) have their own range
stretched to 0..255 (``stretch``), other formats are re-encoded as JPEG, and
``max_size`` shrinks the shorter side (never enlarges). A JPEG that is
already clean RGB, upright and small enough is copied byte for byte (up to
its end-of-image marker: data after it, a motion photo's video, is left out). The
target follows the image's geometry: a mask is checked (single channel,
the image's size) and shrunk with nearest-neighbour sampling, boxes are scaled
(each kind's handler packs it: ``gpupipe.targets.base.Target.pack``).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from .. import targets
from ..checks import positive_int
from ..fileio import DEFAULT_MAX_FILE_SIZE, UnreadableFile, read_file
from ..images import (
    NO_DECODER,
    ImageRefused,
    exif_orientation,
    no_one_reading,
    open_checked,
    read_header,
    to_rgb8,
    upright,
)
from ..shards import format as shardfmt
from ..sources.scan import truncation
from ..targets import TargetKind

#: The longest side a JPEG written by libjpeg may have.
JPEG_MAX_SIDE = 65_500


@dataclass(frozen=True)
class ConvertSettings:
    """How inputs are normalised.

    Attributes:
        max_size: shorter side at most this many pixels (``None``: keep the size).
        quality: JPEG quality of re-encoded images.
        max_pixels: refuse images with more pixels (decompression bombs).
        max_file_size: refuse larger files.
    """

    max_size: int | None = None
    quality: int = 90
    max_pixels: int = 100_000_000
    max_file_size: int = DEFAULT_MAX_FILE_SIZE

    def __post_init__(self) -> None:  # max_size=0 would pack every image as 1x1 pixels
        if self.max_size is not None:
            positive_int("ConvertSettings.max_size", self.max_size)
        positive_int("ConvertSettings.quality", self.quality, maximum=100)
        positive_int("ConvertSettings.max_pixels", self.max_pixels)
        positive_int("ConvertSettings.max_file_size", self.max_file_size)


@dataclass(frozen=True)
class Task:
    """One input: its position in the write order, its file, and its target as its handler packs it
    (``pack_input``)."""

    position: int
    path: str
    kind: TargetKind
    target: Any
    #: why the target is unusable, known before reading (a malformed annotation).
    problem: str = ""
    #: ``(h, w)`` the annotations were made on (boxes), checked against the image.
    annotated_size: tuple[int, int] | None = None
    #: how its source reads the image (``Source.decode_as``): ``"stored"`` packs it as stored, EXIF orientation not
    #: applied (the swap of a torchvision dataset), ``"upright"`` turned upright.
    decode_as: str = "upright"


@dataclass(frozen=True)
class Converted:
    """The outcome for one input.

    Attributes:
        members: extension -> payload (``jpg`` and the target's member), or ``None`` when skipped.
        reason: why the input was skipped.
        bytes_in: bytes read.
        copied: the JPEG was copied byte for byte.
        size: ``(h, w)`` of the packed image.
        target: the target as the manifest records it (label, labels, or boxes and labels).
    """

    members: dict[str, bytes] | None
    reason: str | None
    bytes_in: int
    copied: bool = False
    size: tuple[int, int] = (0, 0)
    target: Any = None


def target_size(width: int, height: int, max_size: int | None) -> tuple[int, int]:
    """``(w, h)`` with the shorter side at most ``max_size`` (aspect kept, never enlarged)."""
    short = min(width, height)
    if max_size is None or short <= max_size:
        return width, height
    scale = max_size / short
    return max(1, round(width * scale)), max(1, round(height * scale))


def convert_image(
    data: bytes, settings: ConvertSettings, decode_as: str = "upright"
) -> tuple[bytes, tuple[int, int], tuple[int, int], bool]:
    """One encoded image as a clean RGB JPEG, without EXIF orientation: turned upright, or with
    ``decode_as="stored"`` its pixels as stored (as torchvision's PIL loader reads them; never copied with its tag).

    Returns:
        ``(jpeg, (w, h) decoded, (w, h) written, copied)``; sizes as ``decode_as`` reads the image.

    Raises:
        ImageRefused: not an image, too many pixels, or it fails to decode.
    """
    if not data:
        raise ImageRefused("empty file (0 bytes)")
    if data[:3] == b"\xff\xd8\xff":
        undecodable_jpeg(data, settings.max_pixels)
    img = open_checked(io.BytesIO(data), settings.max_pixels)
    width, height = img.size
    scan_at, lossless = -1, False
    if img.format in ("JPEG", "PNG"):  # the scan's rule (every EXIF block, wherever it lies; refused if they differ)
        header = read_header(io.BytesIO(data), settings.max_pixels)
        orientation, scan_at, lossless = header.orientation, header.scan_at, header.lossless
    elif img.format == "TIFF":
        orientation = 1  # PIL turns a TIFF upright itself as it opens it (its size is already as displayed)
    else:
        orientation = exif_orientation(img)
    size = target_size(width, height, settings.max_size)
    if max(size) > JPEG_MAX_SIDE:
        raise ImageRefused(
            f"too long for a JPEG: {size[0]}x{size[1]} pixels (as packed), and a JPEG side holds at most "
            f"{JPEG_MAX_SIDE}"
        )
    kind = img.format or "?"
    deep = no_one_reading(kind, img.mode, 1) is not None  # float or deep-integer pixels: stretched below
    refusal = no_one_reading(kind, "L", getattr(img, "n_frames", 1) if kind == "TIFF" else 1)
    if refusal:  # the loaders' words: a TIFF of several pages
        raise ImageRefused(refusal)
    clean = img.format == "JPEG" and img.mode == "RGB" and orientation == 1 and size == (width, height)
    clean = clean and not lossless  # which the loaders' decoders do not read: re-encoded
    if img.format == "JPEG" and size != (width, height):
        # Let libjpeg decode at 1/2, 1/4 or 1/8 scale when that still covers the target.
        img.draft("RGB", size)  # stored (pre-rotation) coordinates, like ``size``
    try:
        img.load()  # the full decode, once: finds truncated and corrupt files
    except (OSError, SyntaxError, ValueError) as err:  # a cut file gets the scan's reason, as the loader gives it
        raise ImageRefused(truncation(img.format, data) or f"cannot decode: {err}") from None
    turn = orientation if decode_as == "upright" else 1  # "stored": re-encoded below without its tag
    shown = (height, width) if turn in (5, 6, 7, 8) else (width, height)
    if clean:
        return image_only(data, scan_at), shown, shown, True
    img = to_rgb8(stretch(upright(img, turn)) if deep else upright(img, turn), img.format)
    size = target_size(*shown, settings.max_size)
    if size != img.size:
        img = img.resize(size, Image.Resampling.BICUBIC, reducing_gap=3.0)
    out = io.BytesIO()
    try:
        img.save(out, "JPEG", quality=settings.quality)
    except (OSError, ValueError) as err:  # in memory: the encoder refused this image, nothing else failed
        raise ImageRefused(f"cannot encode as JPEG: {err}") from None
    return out.getvalue(), shown, size, False


def undecodable_jpeg(data: bytes, max_pixels: int) -> None:
    """Refuses a JPEG that no decoder reads (12-bit, hierarchical) with the scan's reason, which PIL would give as
    ``not an image`` or a decoding error; other faults of its header are left for PIL to name.

    Raises:
        ImageRefused: the JPEG's frame header says a process or sample precision no decoder reads.
    """
    try:
        read_header(io.BytesIO(data), max_pixels)
    except ImageRefused as refused:
        if refused.reason.endswith(NO_DECODER):
            raise


def stretch(img: Image.Image) -> Image.Image:
    """A single-channel image of float or deep-integer pixels (``F``, ``I``, ``I;16``...) as 8-bit gray: its own
    min..max (finite values) stretched linearly to 0..255, rounded; NaN and -inf become 0, +inf 255, and an image
    of one value 0. Per image, as a viewer shows it: a 12-bit camera's frames in 16-bit files use the whole range."""
    values = np.asarray(img, dtype=np.float64)
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    with warnings.catch_warnings():  # inf - inf, where every value is infinite
        warnings.simplefilter("ignore", RuntimeWarning)
        scaled = (values - low) * (255.0 / (high - low)) if high > low else np.where(values == np.inf, 255.0, 0.0)
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=255.0, neginf=0.0)
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), "L")


def image_only(jpeg: bytes, scan_at: int) -> bytes:
    """A decoded JPEG without the data after its image (a phone's motion photo appends a video): up to the
    first end-of-image marker after its scan starts (``scan_at``), where the last bytes hold none; as it is
    otherwise."""
    if scan_at < 0 or truncation("JPEG", jpeg) is None:
        return jpeg
    end = jpeg.find(b"\xff\xd9", scan_at)
    return jpeg if end < 0 else jpeg[: end + 2]


def convert(task: Task, settings: ConvertSettings) -> Converted:
    """Reads, checks and converts one input (image and target), or says why not."""
    if task.problem:
        return Converted(None, task.problem, 0)
    try:
        data = read_file(task.path, settings.max_file_size)
        jpeg, before, after, copied = convert_image(data, settings, task.decode_as)
        if task.annotated_size is not None and tuple(task.annotated_size) != (before[1], before[0]):
            h, w = task.annotated_size
            raise ImageRefused(
                f"the image is {before[0]}x{before[1]}, its annotations say {w}x{h} (EXIF orientation applied)"
            )
        handler = targets.handler(task.kind)
        payload, target = handler.pack(task.target, before, after, settings)
        members = {shardfmt.IMAGE_EXT: jpeg, handler.member: payload}
    except UnreadableFile as err:
        return Converted(None, err.reason, 0)
    except ImageRefused as refused:
        return Converted(None, refused.reason, len(data) if "data" in locals() else 0)
    return Converted(members, None, len(data), copied=copied, size=(after[1], after[0]), target=target)
