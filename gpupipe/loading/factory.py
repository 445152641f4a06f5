"""Builds a loader: [`loader`][gpupipe.loader], the drop-in replacement for a ``DataLoader``.

It reads as a short list of steps (see ``gpupipe.loading.steps``): check every
setting (one [`LoaderConfig`][gpupipe.LoaderConfig]), choose device and
backend, check the pipeline's structure, list the source, check that the
pipeline and backend carry its targets, scan the files, then build the
[`Loader`][gpupipe.Loader].
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from .. import backends, env, presets
from ..checks import explained_keywords
from ..errors import ErrorPolicy
from ..fileio import DEFAULT_MAX_FILE_SIZE
from ..interop.resolve import resolve_inputs
from ..ops import Op, Output
from ..plan.spec import build_spec
from ..sources import Source, as_source
from . import identity, steps
from .config import LoaderConfig
from .loader import Loader

#: torch ``DataLoader`` arguments a newcomer gives ``gpupipe.loader``, and what it takes instead.
DATALOADER_HINTS = {
    name: f"that is torch DataLoader's argument; {instead} (gpupipe.DataLoader takes DataLoader's arguments)"
    for name, instead in {
        "num_workers": "gpupipe chooses its threads, num_threads= sets them",
        "prefetch_factor": "prefetch= sets the batches prepared ahead",
        "pin_memory": "batches land on the loader's device already",
        "persistent_workers": "gpupipe keeps its workers from epoch to epoch",
        "sampler": "rank= / world_size= (or torch.distributed) and shuffle= decide the order; weights= draws by weight",
        "collate_fn": "gpupipe makes the batches",
        "generator": "seed= seeds the order and the augmentations",
    }.items()
}


@explained_keywords(DATALOADER_HINTS)
def loader(
    source: Source | str | os.PathLike | Any,
    pipeline: None | str | Sequence[Op] | Any = None,
    *,
    batch_size: int,
    backend: str = "auto",
    device: steps.DeviceArg = None,
    shuffle: bool = True,
    drop_last: bool = False,
    even_batches: bool = True,
    seed: int = 0,
    num_threads: int | None = None,
    dtype: None | str | torch.dtype = None,
    channels_last: bool | None = None,
    prefetch: int = 2,
    rank: int | None = None,
    world_size: int | None = None,
    on_error: str = "raise",
    max_pixels: int = 100_000_000,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    hw_decoder_load: float | str = "auto",
    preallocate: str | None | tuple[int, int] = "auto",
    log_every: int | None = None,
    reduced_decode: bool = True,
    fallback: str | None = None,
    weights: Sequence[float] | Any = None,
    num_samples: int | None = None,
    replacement: bool = True,
) -> Loader:
    """Builds a loader: the drop-in replacement for a ``DataLoader``.

    Args:
        source: an image folder (``root/<class>/<image>``), a list file, a
            packed folder, a ``Source``, or a
            ``torchvision.datasets.ImageFolder`` / ``DatasetFolder`` (or a ``Subset`` or
            ``ConcatDataset`` of those; see ``gpupipe.interop``), kept as [`Loader.dataset`][gpupipe.Loader.dataset].
        pipeline: a preset name: ``"train"`` or ``"val"`` (ImageNet classification
            at 224 px), ``"segmentation-train"`` or ``"segmentation-val"``,
            ``"detection-ssd"`` or ``"detection-val"`` (see [`presets`][gpupipe.presets]); a
            list of ops starting with ``Decode()``; or a torchvision / timm transform
            (compiled by ``gpupipe.from_torchvision``); ``None`` (default): the
            dataset's own ``transform`` for a torchvision dataset, else ``"train"``.
        batch_size: samples per batch (per process).
        backend: ``"auto"``, ``"dali"``, ``"dali-cpu"`` or ``"torchvision"``.
        device: where batches land; by default the current CUDA device if
            there is one, else the CPU.
        shuffle: a new order every epoch (from ``seed`` and the epoch).
        drop_last: drop the last, partial batch.
        even_batches: every rank reads as many samples (padding repeats a few,
            as ``DistributedSampler``); ``False`` reads each sample exactly once
            over all ranks, and ranks may differ by one batch (exact evaluation).
        seed: seeds the order and the random augmentations.
        num_threads: DALI threads or DataLoader workers; by default the CPU
            cores this process may use, divided among the processes of this job
            on this host, from any launcher (``gpupipe.env.local_world_size``;
            fitted again when a process group appears after the loader was built).
        dtype: ``float32`` (default), ``float16``, ``bfloat16`` (normalised) or
            ``uint8`` (unnormalised), as a name or a ``torch.dtype``.
        channels_last: images in channels_last memory format.
        prefetch: batches prepared ahead (DALI queue depth, or DataLoader
            prefetch factor per worker).
        rank, world_size: this process's share of the data; by default
            taken from ``torch.distributed`` when a process group is
            initialised, else from the launcher (``RANK``, ``WORLD_SIZE``), else
            ``0`` and ``1``; a share not given is taken again from a process
            group initialised later (a loader built before ``Trainer.fit`` or
            ``Accelerator()``), at the first ``len()`` or ``iter()``. A share
            that disagrees with the group is refused then (``world_size=1``
            given explicitly stands: this process reads everything).
        on_error: what to do with a sample that cannot be used: ``"raise"``
            (stop with an error naming it; bad files found by the scan are
            all listed when the loader is built) or ``"skip"`` (leave it out,
            log it once, list it in [`Loader.skipped`][gpupipe.Loader.skipped]).
        max_pixels: images with more pixels are refused, without decoding
            them (decompression bombs).
        max_file_size: larger files are refused (bytes, default 1 GiB).
        hw_decoder_load: DALI on a GPU: share of JPEGs given to the hardware decoder; ``"auto"``
            measures a few shares on the first batches and keeps the fastest (logged at INFO).
        preallocate: DALI decoders' preallocation ``(width, height)``;
            ``"auto"`` takes the 99th percentile of the scanned image sizes,
            ``None`` grows buffers at run time.
        log_every: log the loader's statistics every this many batches (logger ``gpupipe.stats``).
        reduced_decode: torchvision backend: when a ``RandomResizedCrop`` right after ``Decode``
            has a window at least 2, 4 or 8 times its output size, decode the JPEG at 1/2, 1/4 or
            1/8 scale in the DCT domain (faster, itself an area-averaging downscale; pixels differ
            slightly from a full decode). ``False`` decodes every pixel.
        fallback: ``"torchvision"``: a torchvision transform that cannot be compiled runs as it is,
            on PIL images in DataLoader workers (backend ``"torchvision-transform"``), and a dataset gpupipe
            cannot read is read as it is, ``dataset[i]`` batched as torch's ``DataLoader`` batches it (backend
            ``"torch-dataset"``, ``gpupipe.interop.dataset_fallback``); each with a warning.
        weights: one number >= 0 per sample of the source (a sequence, array or tensor): each epoch draws
            ``num_samples`` samples by weight, as ``torch.utils.data.WeightedRandomSampler`` (``shuffle`` is
            then without effect; a source of loose files: a folder, a list, annotations, a torchvision dataset).
        num_samples: samples drawn per epoch with ``weights`` (all ranks together); default: the source's.
        replacement: with ``weights``: draw with replacement (a sample may come several times in an epoch).

    Returns:
        A [`Loader`][gpupipe.Loader].

    Raises:
        ValueError: a bad argument, named, before any work starts.
        SampleError: with ``on_error="raise"``, the files the scan found bad, each named (a ``ValueError``).
        ImportError: the backend's library is missing (the message gives the pip command).
    """
    config = LoaderConfig(
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        even_batches=even_batches,
        seed=seed,
        num_threads=num_threads,
        prefetch=prefetch,
        on_error=on_error,
        max_pixels=max_pixels,
        max_file_size=max_file_size,
        hw_decoder_load=hw_decoder_load,
        preallocate=preallocate,
        log_every=log_every,
        reduced_decode=reduced_decode,
    )
    auto_device = device is None
    presets.refuse_swapped(source, pipeline)  # loader("train", "data/train")
    source, pipeline, dataset, backend = resolve_inputs(  # torchvision's
        source, pipeline, fallback, backend, max_pixels=config.max_pixels, max_file_size=config.max_file_size
    )
    device, backend, why = steps.choose_device_and_backend(device, backend, config.num_threads)
    world = env.resolve_world(rank, world_size)
    if not isinstance(pipeline, str) and not hasattr(pipeline, "__iter__"):
        raise ValueError(f"loader(pipeline=...) must be a preset name or a list of ops, got {pipeline!r}")
    ops = presets.get(pipeline) if isinstance(pipeline, str) else list(pipeline)
    own_output = ops[-1] if ops and isinstance(ops[-1], Output) else None
    if own_output is not None:
        ops.pop()
    output = steps.output_of(own_output, dtype, channels_last)
    steps.check_sizes(build_spec(ops, output, target=None))  # the structure, before the source is listed

    source = steps.with_draws(as_source(source), weights, num_samples, replacement)
    spec = build_spec(ops, output, target=source.kind, ignore_index=source.ignore_index)
    backend, why = _lowering_backend(backend, why, spec)
    if getattr(source, "label_map", None) is not None and spec.batch_ops:
        raise ValueError(
            f"the dataset's target_transform and {', '.join(op.name for op in spec.batch_ops)}: batch ops work on "
            "the class indices (MixUp and CutMix make soft targets over the classes), which the target_transform "
            "replaces; give the dataset no target_transform, or leave the batch ops out"
        )
    errors = ErrorPolicy(config.on_error)
    source = steps.without_bad_files(source, config, errors, world, identity.agreed(source, spec, backend))
    steps.check_batch_fits(source, config, world.world_size)
    placement = backends.Placement.chosen(device, config.num_threads)
    return Loader(
        source,
        spec,
        config,
        backend=backend,
        placement=placement,
        errors=errors,
        world=world,
        backend_reason=why,
        auto_device=auto_device,
        dataset=dataset,
    )


def _lowering_backend(backend: str, why: str, spec: Any) -> tuple[str, str]:
    """``(backend, why)``: the backend chosen, when it lowers every op of ``spec`` with its parameters; else, where
    ``"auto"`` chose it (``why`` is not ``"asked for"``), the torchvision backend when that one does, with a
    warning naming the op and the reason (a ``RandAugment(fill=[...])`` per channel, which DALI cannot fill).

    Raises:
        ValueError: the backend asked for (or every backend ``"auto"`` may take) cannot lower an op (naming it).
    """
    try:
        backends.check_lowerings(backend, spec)
    except ValueError as refused:
        if why == "asked for" or backend == "torchvision":
            raise
        try:
            backends.check_lowerings("torchvision", spec)
        except ValueError:
            raise refused from None
        warnings.warn(
            f"backend='auto' chose 'torchvision' (decoding and augmenting on CPU threads), not {backend!r}: "
            f"{refused}. Pass backend='torchvision' to choose it without this warning, or change the op",
            stacklevel=4,
        )
        return "torchvision", f"{backend!r} cannot lower the pipeline: {refused}"
    return backend, why


__all__ = ["loader"]
