"""Segmentation masks: a class-id image per sample; a batch is ``(B, H, W)`` int64, aligned with the images.

A mask follows its image through every geometric op (each backend's target
lowering): the op's own pixel kernel, sampled nearest-neighbour (class ids are
never blended), with ``ignore_index`` wherever no image pixel maps (padding,
rotation corners).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..checks import is_int
from ..errors import first_line
from ..fileio import UnreadableFile, read_file
from ..images import ImageRefused
from .base import Indices, SampleSource, Target
from .kinds import TargetKind
from .maskfiles import decode_mask, gray_png, ids_problem, packed_problem


def in_pack(source: SampleSource) -> bool:
    """Whether ``source``'s masks are pack members that DALI's reader reads with the images as they are
    (``target_ext``): each must be what the packer writes (``maskfiles.packed_problem``), on every backend."""
    return getattr(source, "target_ext", None) is not None


def mask_reason(source: SampleSource, index: int, err: BaseException) -> str:
    """A bad mask's reason: ``"mask <file>: <why>"`` where ``source`` names its mask files (the sample is
    named by its image, which may be fine), else ``"mask: <why>"`` (a pack's member)."""
    text = first_line(err)
    names = getattr(source, "mask_names", None)
    if names is None:
        return f"mask: {text}"
    if text.startswith("a mask "):  # decode_mask's: "a mask is damaged: ..."
        return f"mask {names[index]} {text[len('a mask ') :]}"
    return f"mask {text}" if text.startswith(names[index]) else f"mask {names[index]}: {text}"


class Masks(Target):
    """Masks, read with the source's ``read_mask()``: gray or palette PNGs of any bit depth whose
    values (palette indices) are the class ids (``maskfiles``)."""

    kind = TargetKind.MASK
    moves_with_pixels = True
    member = "png"
    read_from_tar = True
    sources = "a segmentation source: SegmentationFolder, or a pack of one"

    def read(self, source: SampleSource, index: int) -> np.ndarray:
        return source.read_mask(index)

    # -- loader.dataset ---------------------------------------------------------------------------

    def listed(self, source: SampleSource, indices: Indices) -> list[Any]:
        """Each sample's mask file (``loader.dataset.targets``; ``samples`` pairs it with its image), or
        ``None`` where the mask is a member of a pack."""
        names = getattr(source, "mask_names", None)
        return [None if names is None else names[i] for i in indices]

    def item(self, source: SampleSource, index: int) -> Any:
        """The sample's mask as ``loader.dataset[index]`` gives it: a PIL ``L`` image of its class ids (as
        torchvision's ``VOCSegmentation`` gives a mask; the source's ``mask_map`` applied, EXIF upright).

        Raises:
            ValueError: a mask the batches refuse too, naming it.
        """
        from PIL import Image

        data = source.read_mask(index).tobytes()
        try:  # refused as the batches refuse it, naming the mask
            if in_pack(source) and packed_problem(data):
                raise ValueError(f"a mask {packed_problem(data)}")
            return Image.fromarray(decode_mask(data), "L")
        except (OSError, ValueError, SyntaxError) as err:
            raise ValueError(mask_reason(source, index, err)) from None

    # -- packing ------------------------------------------------------------------------------

    def pack_input(self, source: SampleSource, index: int) -> Any:
        """The mask's path; ``(path, MaskMap)`` where the source maps its values (``mask_map``, whose ids
        were checked against the classes when the source was made); ``(path, None, classes, ignore_index)``
        where the source names its classes: the packer checks the ids as reading the source does."""
        table = getattr(source, "mask_map", None)
        path = source.mask_names[index]
        if table is not None:
            return path, table
        return (path, None, len(source.classes), source.ignore_index) if source.classes else path

    def describe(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        return value[0] if value[1] is None else f"{value[0]} through {value[1]!r}"

    def pack(self, value: Any, before: tuple[int, int], after: tuple[int, int], settings: Any) -> tuple[bytes, None]:
        """The mask file ``value`` (``pack_input``'s) as a gray PNG of its class ids at the packed image's
        size (shrunk nearest-neighbour, output pixel ``j`` reading ``(2j + 1) * in // (2 * out)``)."""
        value, table, classes, ignore_index = (value, None, 0, 0) if isinstance(value, str) else (*value, 0, 0)[:4]
        try:
            data = read_file(value, settings.max_file_size)
            mask = decode_mask(data) if table is None else table.apply(data)
        except UnreadableFile as err:
            raise ImageRefused(f"mask {value}: {err.reason}") from None
        except (OSError, ValueError, SyntaxError) as err:
            raise ImageRefused(f"mask {value}: {err}") from None
        problem = ids_problem(mask, classes, ignore_index)  # as reading the folder refuses it
        if problem:
            raise ImageRefused(f"mask {value} {problem}")
        if (mask.shape[1], mask.shape[0]) != tuple(before):
            raise ImageRefused(f"mask {value} is {mask.shape[1]}x{mask.shape[0]}, the image {before[0]}x{before[1]}")
        if tuple(after) != tuple(before):  # at pixel centres, in integers, as every backend resizes a mask
            (w, h), (in_w, in_h) = after, before
            rows, cols = ((np.arange(n) * 2 + 1) * m // (2 * n) for m, n in ((in_h, h), (in_w, w)))
            mask = np.ascontiguousarray(mask[rows][:, cols])
        return gray_png(mask, level=6), None

    def manifest_rows(self, values: Sequence[Any]) -> dict[str, list]:
        return {}

    def manifest_extra(self, source: SampleSource) -> dict[str, Any]:
        return {"ignore_index": source.ignore_index}

    def rows_problem(self, shard: dict, count: int) -> tuple[str, Any, str] | None:
        rows = shard.get("labels")  # optional for masks; ints when present
        if rows is None or (isinstance(rows, list) and len(rows) == count and all(is_int(v) for v in rows)):
            return None
        return "labels", rows, f"{count} ints"
