"""What ``gpupipe.loader`` does with a torchvision dataset or transform given as its source or pipeline."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..ops import CenterCrop, Decode, Op, PadTo
from ..sources import as_source
from .compile import UnsupportedTransform, from_torchvision
from .datasets import UnsupportedDataset, as_dataset_source, guard_of, is_dataset, refuse_dataset
from .fallback import FALLBACKS, fall_back
from .transforms import is_transform

logger = logging.getLogger("gpupipe.loader")


def resolve_inputs(
    source: Any,
    pipeline: Any,
    fallback: str | None = None,
    backend: str = "auto",
    *,
    max_pixels: int = 100_000_000,
    max_file_size: int | None = None,
) -> tuple[Any, Any, Any | None, str]:
    """``(source, pipeline, dataset, backend)`` for [`gpupipe.loader`][gpupipe.loader].

    A torchvision folder dataset (or a ``Subset`` of one) becomes its source, and
    its ``transform`` the pipeline when ``pipeline`` is ``None``; a torchvision or
    timm transform becomes its ops (``from_torchvision``);
    ``dataset`` is the user's dataset object (``None`` for a path or a source). With
    ``fallback="torchvision"`` a transform that cannot be compiled runs as it is
    (``gpupipe.interop.fallback``), and ``backend`` becomes that backend. ``max_pixels`` and
    ``max_file_size`` are the loader's: a transform that gives no one size reads the image sizes from the
    scan the loader then reuses (the same limits), not from a scan of its own.

    Raises:
        UnsupportedDataset: a dataset object gpupipe cannot read, or one without a transform
            when no pipeline is given.
        UnsupportedTransform: a transform that cannot be compiled, every problem named (without a fallback).
        ValueError: an unknown ``fallback``.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be None or 'torchvision', got {fallback!r}")
    dataset = None
    if is_dataset(source):
        dataset = source
        source, transform = as_dataset_source(source)
        if pipeline is None:
            if transform is None:
                raise UnsupportedDataset(
                    f"the {type(dataset).__name__} has no transform: pass pipeline= (a preset name, ops, or a "
                    "torchvision transform)"
                )
            pipeline = transform
        elif transform is not None:
            logger.info("gpupipe loader: the pipeline given replaces the dataset's own transform")
        # checked before every pass (gpupipe.loading.frameworks.follow_sampler): read once, changed later
        source.dataset_guard = guard_of(dataset, transform_compiled=pipeline is transform)  # type: ignore[attr-defined]
    elif not isinstance(source, (str, bytes)) and hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        raise refuse_dataset(source)
    if pipeline is None:
        pipeline = "train"
    if is_transform(pipeline) or (fallback and callable(pipeline)):
        try:
            ops = from_torchvision(pipeline)
            source, pipeline = _one_size(source, ops, max_pixels, max_file_size)
        except UnsupportedTransform as err:
            if fallback is None:
                raise
            source, backend = fall_back(source, pipeline, backend, err.listing)
            pipeline = [Decode(), PadTo(1)]  # a placeholder: the transform is not gpupipe ops
    return source, pipeline, dataset, backend


def _one_size(source: Any, ops: list[Op], max_pixels: int, max_file_size: int | None) -> tuple[Any, list[Op]]:
    """``(source, ops)``, the ops giving one size where a compiled transform has no resize or crop
    but every image has the same size (CIFAR's ``ToTensor()`` + ``Normalize()`` over 32 x 32 PNGs, which
    torch's default collate batches): a ``CenterCrop`` of that size, which changes no pixel, after ``Decode``.

    The sizes come from the source's scan with the loader's limits, the one the loader then reuses (a source
    keeps its scan per limits): every header is read once, and a file the loader refuses has no size here."""
    size = None
    for op in ops:
        size = op.output_size(size)
    if size is not None:
        return source, ops
    source = as_source(source)
    sizes = source.scan(max_pixels, max_file_size).sizes
    found = np.unique(sizes[sizes[:, 0] > 0], axis=0)  # (-1, -1): a bad file, left to the loader's on_error
    if len(found) != 1:
        return source, ops  # images of several sizes: refused when the loader is built, as torch's collate fails
    height, width = (int(v) for v in found[0])
    return source, [ops[0], CenterCrop((height, width)), *ops[1:]]


__all__ = ["resolve_inputs"]
