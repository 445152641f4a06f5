"""Turning raw batches into the batch contract, shared by every backend.

The contract: ``images`` is ``(B, 3, H, W)`` in the spec's dtype (float
normalised, or uint8 unnormalised), channels_last when asked; the targets
(``(B,)`` int64 labels, ``(B, C)`` float32 multi-hot, ``(B, H, W)`` int64
masks, or a dict of padded boxes and labels) are on the same device.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ..errors import SkipLog
from ..plan.spec import PipelineSpec

Batch = tuple[torch.Tensor, Any]


def take_rows(images: torch.Tensor, targets: Any, rows: Sequence[int]) -> Batch:
    """The batch made of rows ``rows`` of ``(images, targets)`` (targets: a tensor or a dict of tensors)."""
    index = torch.as_tensor(list(rows), dtype=torch.int64, device=images.device)
    if isinstance(targets, dict):
        return images[index], {k: v[index.to(v.device)] for k, v in targets.items()}
    return images[index], targets[index.to(targets.device)]


def without_failed(
    images: torch.Tensor, targets: Any, indices: Sequence[int] | np.ndarray, names: Sequence[str], failed: SkipLog
) -> tuple[torch.Tensor, Any, int]:
    """Exact evaluation (``even_batches=False``): the batch without the samples (``indices``, named
    ``names[i]``) that failed to load (listed in ``failed``), and how many were dropped. A failed
    sample is never replaced by another there, which would count twice in the metrics."""
    keep = [k for k, i in enumerate(indices) if names[i] not in failed] if len(failed) else range(len(indices))
    if len(keep) == len(indices):
        return images, targets, 0
    images, targets = take_rows(images, targets, keep)
    return images, targets, len(indices) - len(keep)


@functools.lru_cache(maxsize=32)
def _constants(mean: tuple, std: tuple, device: torch.device, channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, shift)`` with ``x * scale - shift == (x / 255 - mean) / std``, made once per device."""
    shape = (1, 1, 1, 3) if channels_last else (1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(shape)
    mean_t = torch.tensor(mean, dtype=torch.float32).view(shape)
    scale, shift = 1.0 / (255.0 * std_t), mean_t / std_t
    return scale.to(device), shift.to(device)  # a blocking copy, once: safe on any stream afterwards


def normalize_uint8(images: torch.Tensor, spec: PipelineSpec, out: torch.Tensor | None = None) -> torch.Tensor:
    """Converts a uint8 batch to the spec's output, on the batch's device.

    Args:
        images: ``(B, 3, H, W)`` uint8, any strides; a permuted ``(B, H, W, 3)``
            tensor (channels_last strides) avoids a transposing copy when
            channels_last output is asked for.
        spec: gives the dtype, normalisation and memory format.
        out: optional float32 tensor with the result's shape and memory
            format to compute into (for example one in shared memory).

    Returns:
        ``(B, 3, H, W)`` in ``spec.output.torch_dtype``, channels_last when the
        spec asks; uint8 is passed through with only the memory format set.
    """
    channels_last = spec.output.channels_last
    dtype = spec.output.torch_dtype
    if dtype == torch.uint8:
        return images.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    scale, shift = _constants(tuple(spec.mean), tuple(spec.std), images.device, channels_last)
    # Channels-last work runs on the (B, H, W, 3) view, where broadcasting is fastest.
    source = images.permute(0, 2, 3, 1).contiguous() if channels_last else images.contiguous()
    target = None if out is None else (out.permute(0, 2, 3, 1) if channels_last else out)
    result = torch.mul(source, scale, out=target).sub_(shift)
    if channels_last:
        result = result.permute(0, 3, 1, 2)
    return result if dtype == torch.float32 else result.to(dtype)


def empty_like_output(images: torch.Tensor, spec: PipelineSpec, *, shared: bool) -> torch.Tensor | None:
    """A float32 tensor for ``normalize_uint8`` to fill, in shared memory when ``shared``.

    A DataLoader worker that fills shared memory directly saves the copy
    torch makes when sending an ordinary tensor to the main process. Returns
    ``None`` when no float32 buffer is needed.
    """
    if spec.output.torch_dtype != torch.float32:
        return None
    b, c, h, w = images.shape
    if shared:
        storage = torch.empty(0, dtype=torch.float32)._typed_storage()._new_shared(b * c * h * w)
        flat = torch.empty(0, dtype=torch.float32).set_(storage)
    else:
        flat = torch.empty(b * c * h * w, dtype=torch.float32)
    if spec.output.channels_last:
        return flat.view(b, h, w, c).permute(0, 3, 1, 2)
    return flat.view(b, c, h, w)


def to_device(value: Any, device: torch.device) -> Any:
    """Moves a tensor, or the tensors of a tuple / list / dict (nested), to ``device`` (pinned, non-blocking
    copies for CUDA); anything else (a string, a number: a dataset's own items) is returned as it is."""
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        moved = [to_device(v, device) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else type(value)(moved)  # a namedtuple: by field
    if not isinstance(value, torch.Tensor) or value.device == device:
        return value
    if device.type == "cuda" and not value.is_pinned():
        value = value.pin_memory()
    return value.to(device, non_blocking=True)


def record_stream(value: Any, stream: torch.cuda.Stream) -> None:
    """Marks every tensor of ``value`` as used on ``stream`` (for the caching allocator)."""
    if isinstance(value, dict):
        for v in value.values():
            record_stream(v, stream)
    elif isinstance(value, tuple):
        for v in value:
            record_stream(v, stream)
    else:
        value.record_stream(stream)


class CudaPrefetcher:
    """Copies host batches to the GPU on a side stream, one batch ahead.

    While the training step runs on batch ``i``, batch ``i + 1`` is copied
    (from pinned memory, non-blocking) and finished on a side stream, as
    timm's prefetch loader does.

    Args:
        batches: host batches; images ``(B, 3, H, W)`` uint8 or any dtype, pinned.
        device: the CUDA device.
        finish: applied to the images on the side stream (for example
            ``normalize_uint8``).
    """

    def __init__(self, batches: Iterable[Batch], device: torch.device, finish) -> None:
        self.batches = batches
        self.device = device
        self.finish = finish

    def __iter__(self) -> Iterator[Batch]:
        stream = torch.cuda.Stream(device=self.device)
        source = iter(self.batches)
        upcoming = self._preload(source, stream)
        while upcoming is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(stream)
            record_stream(upcoming, current)
            batch, upcoming = upcoming, self._preload(source, stream)
            yield batch

    def _preload(self, source: Iterator[Batch], stream: torch.cuda.Stream) -> Batch | None:
        try:
            images, targets = next(source)
        except StopIteration:
            return None
        with torch.cuda.stream(stream):
            images = self.finish(to_device(images, self.device))
            targets = to_device(targets, self.device)
        return images, targets
