"""Segmentation masks: a class-id image per sample; a batch is ``(B, H, W)`` int64, aligned with the images.

A mask follows its image through every geometric op: the op's own pixel
kernel, sampled nearest-neighbour (class ids are never blended), with
``ignore_index`` wherever no image pixel maps (padding, rotation corners).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import DecodeError, first_line
from ..fileio import UnreadableFile, read_file
from ..images import ImageRefused
from .base import Indices, Kernel, Params, Target, is_int
from .kinds import TargetKind
from .maskfiles import decode_mask, gray_png, mask_for_dali

if TYPE_CHECKING:
    from ..plan.spec import PipelineSpec
    from ..sources import Source


class Masks(Target):
    """Masks, read with the source's ``read_mask()``: gray or palette PNGs of any bit depth whose
    values (palette indices) are the class ids (``maskfiles``)."""

    kind = TargetKind.MASK
    moves_with_pixels = True
    member = "png"
    dali_feeds = 1
    read_from_tar = True
    sources = "a segmentation source: SegmentationFolder, or a pack of one"

    def read(self, source: Source, index: int) -> np.ndarray:
        return source.read_mask(index)

    # -- torchvision --------------------------------------------------------------------------

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> torch.Tensor:
        """``(1, H, W)`` uint8 class ids, checked against the image's ``size``."""
        try:
            mask = decode_mask(source.read_mask(index).tobytes())
        except (OSError, ValueError, SyntaxError) as err:  # UnreadableFile is a ValueError
            raise DecodeError(path, f"mask: {first_line(err)}") from err
        if mask.shape != tuple(size):
            raise DecodeError(path, f"mask is {mask.shape[1]}x{mask.shape[0]}, the image {size[1]}x{size[0]}")
        return torch.from_numpy(mask.copy())[None]

    def move(self, state: torch.Tensor, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec):
        return kernel(state, fill=spec.ignore_index, nearest=True)

    def finish(self, state: torch.Tensor, spec: PipelineSpec) -> torch.Tensor:
        return state[0]

    def stack(self, parts: Sequence[torch.Tensor | None], spec: PipelineSpec) -> torch.Tensor:
        h, w = spec.size
        return torch.stack(
            [p if p is not None else torch.full((h, w), spec.ignore_index, dtype=torch.uint8) for p in parts]
        )

    def replace(self, part: torch.Tensor, row: int, value: torch.Tensor) -> torch.Tensor:
        part[row] = value
        return part

    def complete(self, part: torch.Tensor, source: Source, indices: Indices, content_sizes) -> torch.Tensor:
        return part.long()

    # -- DALI ---------------------------------------------------------------------------------

    def dali_feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        """The encoded masks, each an 8-bit gray PNG of its class ids (``maskfiles.mask_for_dali``:
        DALI would give a palette's colours and scale low bit depths). A file that cannot be read or
        whose values cannot be kept gives no bytes (the decoder fails and the probe names the file and
        the reason) unless ``strict``."""
        return [[self._encoded(source, int(i), strict) for i in indices]]

    @staticmethod
    def _encoded(source: Source, index: int, strict: bool) -> np.ndarray:
        try:
            data = mask_for_dali(source.read_mask(index).tobytes())
        except UnreadableFile:
            if strict:
                raise
            return np.zeros(0, np.uint8)
        except (OSError, ValueError, SyntaxError) as err:
            if strict:
                raise UnreadableFile(f"mask: {first_line(err)}") from None
            return np.zeros(0, np.uint8)
        return np.frombuffer(data, np.uint8)

    def dali_start(self, inputs: list[Any], *, gpu: bool) -> Any:
        from nvidia.dali import fn, types

        mask = fn.decoders.image(inputs[0], device="cpu", output_type=types.ANY_DATA)
        return mask.gpu() if gpu else mask

    def dali_move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        return kernel(state, fill=spec.ignore_index, nearest=True)

    def dali_outputs(self, state: Any, spec: PipelineSpec) -> list[Any]:
        return [state]

    def from_dali(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> torch.Tensor:
        return outputs[0][:count, :, :, 0].long()

    # -- packing ------------------------------------------------------------------------------

    def pack_input(self, source: Source, index: int) -> str:
        return source.mask_names[index]

    def pack(self, value: Any, before: tuple[int, int], after: tuple[int, int], settings: Any) -> tuple[bytes, None]:
        """The mask file ``value`` as a gray PNG of the packed image's size (shrunk nearest-neighbour)."""
        try:
            mask = decode_mask(read_file(value, settings.max_file_size))
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

    def manifest_extra(self, source: Source) -> dict[str, Any]:
        return {"ignore_index": source.ignore_index}

    def rows_problem(self, shard: dict, count: int) -> tuple[str, Any, str] | None:
        rows = shard.get("labels")  # optional for masks; ints when present
        if rows is None or (isinstance(rows, list) and len(rows) == count and all(is_int(v) for v in rows)):
            return None
        return "labels", rows, f"{count} ints"
