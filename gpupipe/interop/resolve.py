"""What ``gpupipe.loader`` does with a torchvision dataset or transform given as its source or pipeline."""

from __future__ import annotations

import logging
from typing import Any

from ..ops import Decode, PadTo
from .compile import UnsupportedTransform, from_torchvision
from .datasets import ACCEPTED, UnsupportedDataset, as_dataset_source, is_dataset
from .fallback import FALLBACKS, fall_back
from .transforms import is_transform

logger = logging.getLogger("gpupipe.loader")


def resolve_inputs(
    source: Any, pipeline: Any, fallback: str | None = None, backend: str = "auto"
) -> tuple[Any, Any, Any | None, str]:
    """``(source, pipeline, dataset, backend)`` for [`gpupipe.loader`][gpupipe.loader].

    A torchvision folder dataset (or a ``Subset`` of one) becomes its source, and
    its ``transform`` the pipeline when ``pipeline`` is ``None``; a torchvision or
    timm transform becomes its ops (``from_torchvision``);
    ``dataset`` is the user's dataset object (``None`` for a path or a source). With
    ``fallback="torchvision"`` a transform that cannot be compiled runs as it is
    (``gpupipe.interop.fallback``), and ``backend`` becomes that backend.

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
    elif not isinstance(source, (str, bytes)) and hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        raise UnsupportedDataset(f"gpupipe cannot read a {type(source).__name__}; it takes {ACCEPTED}")
    if pipeline is None:
        pipeline = "train"
    if is_transform(pipeline) or (fallback and callable(pipeline)):
        try:
            pipeline = from_torchvision(pipeline)
        except UnsupportedTransform as err:
            if fallback is None:
                raise
            source, backend = fall_back(source, pipeline, backend, "\n".join(str(err).splitlines()[1:-1]))
            pipeline = [Decode(), PadTo(1)]  # a placeholder: the transform is not gpupipe ops
    return source, pipeline, dataset, backend


__all__ = ["resolve_inputs"]
