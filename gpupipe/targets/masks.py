"""Segmentation masks: a class-id image per sample; a batch is ``(B, H, W)`` int64, aligned with the images.

A mask follows its image through every geometric op: the op's own pixel
kernel, sampled nearest-neighbour (class ids are never blended), with
``ignore_index`` wherever no image pixel maps (padding, rotation corners).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import DecodeError, first_line
from ..fileio import UnreadableFile, read_file
from ..images import ImageRefused, decode_mask, palette_as_gray_png
from .base import Indices, Kernel, Params, Target, is_int
from .kinds import TargetKind

if TYPE_CHECKING:
    from ..sources import Source
    from ..spec import PipelineSpec


class Masks(Target):
    """Masks, read with the source's ``read_mask()`` (8-bit gray or palette PNGs: the indices are the ids)."""

    kind = TargetKind.MASK
    moves_with_pixels = True
    member = "png"
    dali_feeds = 1
    read_from_tar = True
    sources = "a segmentation source: SegmentationFolder, or a pack of one"

    def read(self, source: "Source", index: int) -> np.ndarray:
        return source.read_mask(index)

    # -- torchvision --------------------------------------------------------------------------

    def load(self, source: "Source", index: int, size: Tuple[int, int], path: str) -> torch.Tensor:
        """``(1, H, W)`` uint8 class ids, checked against the image's ``size``."""
        try:
            mask = decode_mask(source.read_mask(index).tobytes())
        except (OSError, ValueError, SyntaxError) as err:  # UnreadableFile is a ValueError
            raise DecodeError(path, f"mask: {first_line(err)}") from err
        if mask.shape != tuple(size):
            raise DecodeError(path, f"mask is {mask.shape[1]}x{mask.shape[0]}, the image {size[1]}x{size[0]}")
        return torch.from_numpy(mask.copy())[None]

    def move(self, state: torch.Tensor, kernel: Kernel, params: Params, op: Any, spec: "PipelineSpec"):
        return kernel(state, fill=spec.ignore_index, nearest=True)

    def finish(self, state: torch.Tensor, spec: "PipelineSpec") -> torch.Tensor:
        return state[0]

    def stack(self, parts: Sequence[Optional[torch.Tensor]], spec: "PipelineSpec") -> torch.Tensor:
        h, w = spec.size
        return torch.stack(
            [p if p is not None else torch.full((h, w), spec.ignore_index, dtype=torch.uint8) for p in parts]
        )

    def replace(self, part: torch.Tensor, row: int, value: torch.Tensor) -> torch.Tensor:
        part[row] = value
        return part

    def complete(self, part: torch.Tensor, source: "Source", indices: Indices, content_sizes) -> torch.Tensor:
        return part.long()

    # -- DALI ---------------------------------------------------------------------------------

    def dali_feed(self, source: "Source", indices: Indices, *, strict: bool = False) -> List[List[np.ndarray]]:
        """The encoded masks; a palette PNG as a gray PNG of its indices (DALI would give its colours). An
        unreadable file gives no bytes (the decoder fails and the probe names the file) unless ``strict``."""
        return [[self._encoded(source, int(i), strict) for i in indices]]

    @staticmethod
    def _encoded(source: "Source", index: int, strict: bool) -> np.ndarray:
        try:
            data = source.read_mask(index).tobytes()
        except UnreadableFile:
            if strict:
                raise
            return np.zeros(0, np.uint8)
        return np.frombuffer(palette_as_gray_png(data), np.uint8)

    def dali_start(self, inputs: List[Any], *, gpu: bool) -> Any:
        from nvidia.dali import fn, types

        mask = fn.decoders.image(inputs[0], device="cpu", output_type=types.ANY_DATA)
        return mask.gpu() if gpu else mask

    def dali_move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: "PipelineSpec") -> Any:
        return kernel(state, fill=spec.ignore_index, nearest=True)

    def dali_outputs(self, state: Any, spec: "PipelineSpec") -> List[Any]:
        return [state]

    def from_dali(self, outputs: List[torch.Tensor], count: int, content_sizes: np.ndarray) -> torch.Tensor:
        return outputs[0][:count, :, :, 0].long()

    # -- packing ------------------------------------------------------------------------------

    def pack_input(self, source: "Source", index: int) -> str:
        return source.mask_names[index]

    def pack(self, value: Any, before: Tuple[int, int], after: Tuple[int, int], settings: Any) -> Tuple[bytes, None]:
        """The mask file ``value`` as a gray PNG of the packed image's size (shrunk nearest-neighbour)."""
        from PIL import Image

        try:
            mask = decode_mask(read_file(value, settings.max_file_size))
        except UnreadableFile as err:
            raise ImageRefused(f"mask {value}: {err.reason}") from None
        except (OSError, ValueError, SyntaxError) as err:
            raise ImageRefused(f"mask {value}: {err}") from None
        if (mask.shape[1], mask.shape[0]) != tuple(before):
            raise ImageRefused(f"mask {value} is {mask.shape[1]}x{mask.shape[0]}, the image {before[0]}x{before[1]}")
        img = Image.fromarray(mask, "L")
        if tuple(after) != tuple(before):
            img = img.resize(after, Image.Resampling.NEAREST)
        out = io.BytesIO()
        img.save(out, "PNG")
        return out.getvalue(), None

    def manifest_rows(self, values: Sequence[Any]) -> Dict[str, list]:
        return {}

    def manifest_extra(self, source: "Source") -> Dict[str, Any]:
        return {"ignore_index": source.ignore_index}

    def rows_problem(self, shard: Dict, count: int) -> Optional[Tuple[str, Any, str]]:
        rows = shard.get("labels")  # optional for masks; ints when present
        if rows is None or (isinstance(rows, list) and len(rows) == count and all(is_int(v) for v in rows)):
            return None
        return "labels", rows, f"{count} ints"
