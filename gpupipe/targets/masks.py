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
from ..fileio import UnreadableFile, read_file
from ..images import ImageRefused
from .base import Indices, SampleSource, Target
from .kinds import TargetKind
from .maskfiles import decode_mask, gray_png


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
        torchvision's ``VOCSegmentation`` gives a mask; the source's ``mask_map`` applied, EXIF upright)."""
        from PIL import Image

        return Image.fromarray(decode_mask(source.read_mask(index).tobytes()), "L")

    # -- packing ------------------------------------------------------------------------------

    def pack_input(self, source: SampleSource, index: int) -> Any:
        """The mask's path, or ``(path, MaskMap)`` where the source maps its values (``mask_map``)."""
        table = getattr(source, "mask_map", None)
        return source.mask_names[index] if table is None else (source.mask_names[index], table)

    def describe(self, value: Any) -> str:
        return value if isinstance(value, str) else f"{value[0]} through {value[1]!r}"

    def pack(self, value: Any, before: tuple[int, int], after: tuple[int, int], settings: Any) -> tuple[bytes, None]:
        """The mask file ``value`` (a path, or ``(path, MaskMap)``) as a gray PNG of its class ids at the
        packed image's size (shrunk nearest-neighbour)."""
        value, table = (value, None) if isinstance(value, str) else value
        try:
            data = read_file(value, settings.max_file_size)
            mask = decode_mask(data) if table is None else table.apply(data)
        except UnreadableFile as err:
            raise ImageRefused(f"mask {value}: {err.reason}") from None
        except (OSError, ValueError, SyntaxError) as err:
            raise ImageRefused(f"mask {value}: {err}") from None
        if (mask.shape[1], mask.shape[0]) != tuple(before):
            raise ImageRefused(f"mask {value} is {mask.shape[1]}x{mask.shape[0]}, the image {before[0]}x{before[1]}")
        if tuple(after) != tuple(before):
            from PIL import Image

            mask = np.asarray(Image.fromarray(mask, "L").resize(after, Image.Resampling.NEAREST))
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
