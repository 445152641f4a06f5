"""``fallback="torchvision"``: a transform gpupipe cannot compile, run as it is on the torchvision backend.

The user's own transform object is applied, unchanged, to the PIL image of
each sample (as ``torchvision.datasets.ImageFolder`` applies it) in
DataLoader worker processes; gpupipe still decides the order, the ranks'
shares, the epochs and resumes, and moves the batches to the device. The
backend is registered as ``"torchvision-transform"``; the loader's ``spec``
then holds only ``Decode`` (the transform is not gpupipe ops), and
``dtype`` / ``channels_last`` are the transform's business.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from ..backends import REGISTRY, BackendInfo, EpochRead, Placement, forks
from ..errors import ErrorPolicy
from ..loading.config import LoaderConfig
from ..loading.transfer import to_device
from ..plan.seeding import SAMPLE, mix_int
from ..plan.spec import PipelineSpec
from ..sources import Source

logger = logging.getLogger("gpupipe.loader")

#: The backend's name (``loader.backend``).
NAME = "torchvision-transform"
#: What ``fallback`` may be.
FALLBACKS = (None, "torchvision")


def register_fallback(name: str, module: str, factory: str) -> None:
    """Registers a backend that ``fallback="torchvision"`` chooses (internal: not offered among the choices);
    its spec holds ``Decode`` only, so it takes the torchvision backend's lowerings."""
    REGISTRY.setdefault(
        name,
        BackendInfo(
            name,
            module,
            needs_cuda=False,
            main_process=True,
            factory=factory,
            lowerings="gpupipe.backends.torchvision.lowering",
            internal=True,
        ),
    )


register_fallback(NAME, "torchvision", "gpupipe.interop.fallback:TransformBackend")


class _Transformed:
    """``(transform(PIL image), index)`` of each sample: the image as ``ImageFolder`` gives it (the
    targets of a batch's indices come from the source's target handler)."""

    def __init__(self, source: Source, transform: Callable[[Any], Any]) -> None:
        self.source = source
        self.transform = transform

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        data = self.source.read_bytes(int(index)).tobytes()
        with Image.open(io.BytesIO(data)) as image:
            rgb = image.convert("RGB")
        return self.transform(rgb), int(index)

    def __len__(self) -> int:
        return len(self.source)


class _SeededBatches:
    """``items``, each batch read with the random generators (torch's, Python's, numpy's) seeded from the batch's
    own key, and given back as they were: a batch's random augmentations depend on the loader's seed, the epoch
    and where the batch lies in the order, not on which worker reads it, where the pass started (a resume) or the
    global RNGs. The batch sampler gives ``(key, index)`` pairs (torch's fetcher hands ``__getitems__`` a batch).
    """

    def __init__(self, items: Any) -> None:
        self.items = items

    def __getitems__(self, keyed: list[tuple[int, int]]) -> list[Any]:
        import random

        import numpy as np
        import torch

        key = keyed[0][0]
        saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
        torch.default_generator.manual_seed(key)  # the CPU generator only: CUDA's are left alone
        random.seed(key)
        np.random.seed(key % 2**32)
        try:
            return [self.items[index] for _, index in keyed]
        finally:
            torch.set_rng_state(saved[0])
            random.setstate(saved[1])
            np.random.set_state(saved[2])

    def __len__(self) -> int:
        return len(self.items)


class TransformBackend:
    """Runs ``source.user_transform`` on each sample in a torch ``DataLoader`` over gpupipe's order.

    Args:
        source: the samples, with the user's transform as ``user_transform``.
        spec, errors: unused (the transform is the pipeline; bad files were left out by the scan).
        config: batch size and prefetch.
        placement: the device and the worker processes (0: the main process).
    """

    name = NAME

    def __init__(
        self, source: Source, spec: PipelineSpec, config: LoaderConfig, placement: Placement, errors: ErrorPolicy
    ) -> None:
        self.source = source
        self.config = config
        self.device = placement.device
        self.threads = placement.threads
        self._kept: _Kept | None = None  # the DataLoader kept between passes (persistent_workers=True)

    def items(self) -> Any:
        """The map-style dataset the workers read: ``(transform(image), index)`` per sample."""
        return _Transformed(self.source, self.source.user_transform)  # type: ignore[attr-defined]

    def collate(self) -> Callable[[list], Any] | None:
        """The workers' ``collate_fn`` (``None``: torch's default)."""
        return None

    def batch(self, collated: Any) -> Any:
        """The loader's batch, on the host, from what ``collate`` made of a batch of ``items``.

        A transform that gives several views of an image (SimCLR's ``TwoCropTransform``, DINO's multi-crop: a
        list) gives them as torch's ``default_collate`` batches them, a list of ``(B, 3, H, W)`` batches; the
        loader then hands the batch over as it is (``batches_as_is``), the dataset's ``target_transform``
        applied here to the labels."""
        import torch

        images, indices = collated
        targets = self.source.target.batch(self.source, indices.numpy())  # labels or multi-hot
        if not isinstance(images, torch.Tensor):  # views: the loader's per-batch steps take one image tensor
            self.batches_as_is = True
            label_map = getattr(self.source, "label_map", None)
            if label_map is not None:
                targets = label_map(torch.as_tensor(targets))
        return images, targets

    def workers(self) -> int:
        """DataLoader worker processes (0: the main process): the loader's threads."""
        return self.threads

    def dataset_indices(self, read: EpochRead) -> list[int]:
        """This rank's share of ``read``, as indices into ``items()``."""
        return read.share.indices.tolist()

    def iter_epoch(
        self, read: EpochRead, start: int = 0, upcoming: Callable[[int], EpochRead] | None = None
    ) -> Iterator[Any]:
        import torch
        from torch.utils.data import DataLoader

        size = self.config.batch_size
        indices = self.dataset_indices(read)
        positions = read.share.positions
        # each batch keyed by (seed, epoch, its first slot): its draws are the same wherever the pass started
        batches = []
        for k in range(start, read.batches):
            key = mix_int(SAMPLE, self.config.seed, read.epoch, int(positions[k * size]))
            batches.append([(key, i) for i in indices[k * size : (k + 1) * size]])
        count = self.workers()
        persistent = bool(count and getattr(self.source, "user_persistent_workers", False))
        kept = self._kept if self._kept is not None and self._kept.owner == os.getpid() else None
        if kept is None or not persistent:
            # the workers' base seed (torch draws it from its generator), not drawn from the global RNG; each batch's
            # draws are seeded by its own key (_SeededBatches)
            seeded = torch.Generator().manual_seed(mix_int(SAMPLE, self.config.seed, read.epoch))
            kept = _Kept(batches)
            dataset: Any = _SeededBatches(self.items())  # map-style, as torch's DataLoader takes it
            kept.loader = DataLoader(
                dataset,
                batch_sampler=kept,
                num_workers=count,
                collate_fn=self.collate(),
                prefetch_factor=self.config.prefetch if count else None,
                persistent_workers=persistent,  # gpupipe.DataLoader's: the workers (and their state) last the run
                worker_init_fn=getattr(self.source, "user_worker_init_fn", None),  # gpupipe.DataLoader's
                multiprocessing_context=getattr(self.source, "user_multiprocessing_context", None) if count else None,
                generator=seeded,
            )
            self._kept = kept if persistent else None
        kept.batches = batches
        workers = forks.track(iter(kept.loader))  # persistent: the same workers, told to start a new pass
        try:
            for collated in forks.owned(workers):  # a forked child starts a pass of its own
                yield to_device(self.batch(collated), self.device)
        finally:  # a pass left or freed: its workers stop at once, even when a reference cycle held it
            if not persistent and hasattr(workers, "_shutdown_workers"):
                forks.shut_down(workers)

    def close(self) -> None:
        """Stops the workers kept between passes (``persistent_workers=True``); otherwise each pass's end with it."""
        kept, self._kept = self._kept, None
        iterator = getattr(getattr(kept, "loader", None), "_iterator", None)
        if kept is not None and kept.owner == os.getpid() and hasattr(iterator, "_shutdown_workers"):
            forks.shut_down(iterator)


class _Kept:
    """The batch sampler of a DataLoader kept from pass to pass (``persistent_workers=True``): torch's persistent
    workers read each pass's batches from it anew; ``owner`` is the process that started them (a forked child
    starts its own)."""

    def __init__(self, batches: list[list[tuple[int, int]]]) -> None:
        self.batches = batches
        self.owner = os.getpid()
        self.loader: Any = None

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def fall_back(source: Any, transform: Any, backend: str, reasons: str) -> tuple[Source, str]:
    """``(source, backend)`` that run ``transform`` unchanged; warns once that gpupipe does so.

    Raises:
        ValueError: a backend other than ``"auto"`` or ``"torchvision"`` was asked for, or a source
            whose targets move with the pixels (masks, boxes: the transform sees the image alone).
    """
    import warnings

    from ..sources import as_source

    if backend not in ("auto", "torchvision", NAME):
        raise ValueError(f"fallback='torchvision' runs your transform on the torchvision backend, not {backend!r}")
    source = as_source(source)
    if source.target.moves_with_pixels:  # the transform sees the image alone: the masks or boxes would be lost
        raise ValueError(
            f"fallback='torchvision' runs a transform on the image alone, for samples with class labels; this "
            f"{type(source).__name__} gives {source.target.title}, which it would not move with the image. "
            f"Write the pipeline with gpupipe ops, which move {source.target.title} with the image:\n{reasons}"
        )
    warnings.warn(
        "gpupipe cannot compile this transform, so fallback='torchvision' runs it as it is, on PIL images in "
        f"DataLoader workers (not on the GPU):\n{reasons}",
        stacklevel=4,
    )
    source.user_transform = transform  # type: ignore[attr-defined]
    return source, NAME


__all__ = ["TransformBackend", "fall_back", "NAME", "FALLBACKS"]
