"""Turning raw batches into the batch contract, shared by every backend.

The contract: ``images`` is ``(B, 3, H, W)`` in the spec's dtype (float
normalised, or uint8 unnormalised), channels_last when asked; ``labels`` is
``(B,)`` int64 on the same device.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Tuple

import torch

from .spec import PipelineSpec

Batch = Tuple[torch.Tensor, torch.Tensor]


def normalize_uint8(images: torch.Tensor, spec: PipelineSpec, out: Optional[torch.Tensor] = None) -> torch.Tensor:
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
    # (x / 255 - mean) / std == x * (1 / (255 std)) - mean / std: one pass to float, one in place.
    shape = (1, 1, 1, 3) if channels_last else (1, 3, 1, 1)
    std = torch.tensor(spec.std, dtype=torch.float32, device=images.device).view(shape)
    mean = torch.tensor(spec.mean, dtype=torch.float32, device=images.device).view(shape)
    # Channels-last work runs on the (B, H, W, 3) view, where broadcasting is fastest.
    source = images.permute(0, 2, 3, 1).contiguous() if channels_last else images.contiguous()
    target = None if out is None else (out.permute(0, 2, 3, 1) if channels_last else out)
    result = torch.mul(source, 1.0 / (255.0 * std), out=target).sub_(mean / std)
    if channels_last:
        result = result.permute(0, 3, 1, 2)
    return result if dtype == torch.float32 else result.to(dtype)


def empty_like_output(images: torch.Tensor, spec: PipelineSpec, *, shared: bool) -> Optional[torch.Tensor]:
    """A float32 tensor for :func:`normalize_uint8` to fill, in shared memory when ``shared``.

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


def from_hwc_or_chw(images: torch.Tensor, *, hwc: bool, spec: PipelineSpec) -> torch.Tensor:
    """Gives a backend's ``(B, H, W, C)`` or ``(B, C, H, W)`` output the contract's layout and dtype.

    A ``(B, H, W, C)`` tensor permuted to ``(B, C, H, W)`` is channels_last
    without a copy; the dtype conversion keeps the memory format.
    """
    if hwc:
        images = images.permute(0, 3, 1, 2)
    dtype = spec.output.torch_dtype
    if images.dtype != dtype:
        images = images.to(dtype)
    return images


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Moves a host batch to ``device`` (pinned, non-blocking copies for CUDA)."""
    images, labels = batch
    if images.device == device:
        return images, labels.to(device)
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
    return images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


class CudaPrefetcher:
    """Copies host batches to the GPU on a side stream, one batch ahead.

    While the training step runs on batch ``i``, batch ``i + 1`` is copied
    (from pinned memory, non-blocking) and finished on a side stream, as
    timm's prefetch loader does.

    Args:
        batches: host batches; images ``(B, 3, H, W)`` uint8 or any dtype, pinned.
        device: the CUDA device.
        finish: applied to the images on the side stream (for example
            :func:`normalize_uint8`).
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
            images, labels = upcoming
            images.record_stream(current)
            labels.record_stream(current)
            upcoming = self._preload(source, stream)
            yield images, labels

    def _preload(self, source: Iterator[Batch], stream: "torch.cuda.Stream") -> Optional[Batch]:
        try:
            images, labels = next(source)
        except StopIteration:
            return None
        with torch.cuda.stream(stream):
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            images = self.finish(images)
        return images, labels
