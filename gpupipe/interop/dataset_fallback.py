"""``fallback="torchvision"`` for a dataset gpupipe cannot read: the dataset, run as it is.

A map-style dataset whose files gpupipe cannot read itself (your own ``Dataset``,
``CIFAR10``, an ``ImageFolder`` subclass with its own ``__getitem__``, one with a
random ``target_transform`` ...) is read the way torch's ``DataLoader`` reads it:
``dataset[i]`` in DataLoader worker processes, batched by torch's collate (or the
``collate_fn`` given to ``gpupipe.DataLoader``). gpupipe still decides the order,
the ranks' shares, the epochs and resumes, and moves the batches to the device;
the batches are what torch's ``DataLoader`` would give. Nothing but the copy runs
on the GPU: the fallback keeps a script working with gpupipe's loader where its
data cannot be compiled. The backend is registered as ``"torch-dataset"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backends import EpochRead
from ..ops import Decode, Op, PadTo
from ..sources import Source
from ..sources.scan import ScanResult
from .datasets import UnsupportedDataset
from .fallback import NAME as TRANSFORM_FALLBACK
from .fallback import TransformBackend, register_fallback

#: The backend's name (``loader.backend``).
NAME = "torch-dataset"

register_fallback(NAME, "torch", "gpupipe.interop.dataset_fallback:DatasetBackend")


class LengthGuard:
    """Refuses a pass over a dataset whose ``len()`` changed since its loader was built: gpupipe planned the
    order over the samples then (torch's ``DataLoader`` reads the new length; gpupipe would leave samples out,
    or ask for indices past the end)."""

    def __init__(self, dataset: Any, count: int) -> None:
        self.dataset = dataset
        self.count = count

    def check(self) -> None:
        """Raises ``UnsupportedDataset`` naming both lengths when they differ."""
        now = len(self.dataset)
        if now != self.count:
            raise UnsupportedDataset(
                f"the {type(self.dataset).__name__} had {self.count} samples when the loader was built and has "
                f"now {now}; gpupipe planned the order over them then, once: build the loader again after the change"
            )


class DatasetItems(Source):
    """The samples of a dataset run as it is: ``len(dataset)`` of them, each named ``Type[i]`` in messages.

    There is no file to scan and no target to read: ``dataset[i]`` gives both. ``items`` is each sample's
    index in ``dataset`` (a subset keeps the dataset's own indices).
    """

    needs_scan = False
    columns = ("names", "labels", "items")

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        count = len(dataset)
        kind = type(dataset).__name__
        self.names = [f"{kind}[{i}]" for i in range(count)]
        self.labels = np.full(count, -1, np.int64)  # the targets are the dataset's own
        self.items = np.arange(count, dtype=np.int64)
        classes = getattr(dataset, "classes", None)
        self.classes = [str(c) for c in classes] if isinstance(classes, (list, tuple)) else []
        self.dataset_guard = LengthGuard(dataset, count)  # checked before every pass (frameworks.follow_sampler)

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        return ScanResult(bad={}, sizes=np.zeros((len(self), 2), np.int64))  # no file: nothing to refuse

    def read_bytes(self, index: int) -> np.ndarray:
        raise TypeError(f"{self.names[index]} is an item of a dataset run as it is: there is no file to read")


class _Items:
    """``dataset[i]``, with the sample named on an error raised by the dataset (as a note: the error keeps its
    type, as torch's ``DataLoader`` keeps it)."""

    def __init__(self, source: DatasetItems) -> None:
        self.dataset = source.dataset
        self.kind = type(source.dataset).__name__

    def __getitem__(self, index: int) -> Any:
        try:
            return self.dataset[index]
        except Exception as err:  # the user's dataset: any error, re-raised with the sample named
            if hasattr(err, "add_note"):  # Python 3.11+
                err.add_note(f"gpupipe: raised by {self.kind}[{index}] (fallback='torchvision' reads it as it is)")
            raise

    def __len__(self) -> int:
        return len(self.dataset)


class DatasetBackend(TransformBackend):
    """Reads ``source.dataset`` as torch's ``DataLoader`` would, over gpupipe's order (``TransformBackend``'s
    loop): each batch is the collated items, moved to the loader's device."""

    name = NAME
    batches_as_is = True  # the loader hands them over as the collate made them

    def items(self) -> Any:
        return _Items(self.source)  # type: ignore[arg-type]

    def collate(self) -> Callable[[list], Any] | None:
        return getattr(self.source, "user_collate_fn", None)  # gpupipe.DataLoader's collate_fn

    def workers(self) -> int:
        return getattr(self.source, "user_num_workers", self.threads)  # gpupipe.DataLoader's num_workers

    def batch(self, collated: Any) -> Any:
        return collated

    def dataset_indices(self, read: EpochRead) -> list[int]:
        return self.source.items[read.share.indices].tolist()  # type: ignore[attr-defined]


def fall_back_dataset(dataset: Any, pipeline: Any, backend: str, why: str) -> tuple[Source, list[Op], Any, str]:
    """``(source, placeholder ops, dataset, backend)`` that read ``dataset`` as it is (``resolve_inputs``'
    answer); warns once that gpupipe does so.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``) gpupipe cannot read itself.
        pipeline: must be ``None``: the dataset's items are what its own transforms make.
        backend: ``"auto"`` or ``"torchvision"``.
        why: why gpupipe cannot read it (the refusal it would otherwise raise).

    Raises:
        UnsupportedDataset: a dataset without ``len()`` (an ``IterableDataset``), or a ``pipeline`` given.
        ValueError: another backend asked for.
    """
    from torch.utils.data import IterableDataset

    kind = type(dataset).__name__
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
        raise UnsupportedDataset(
            f"{why}\nfallback='torchvision' reads a map-style dataset (dataset[i] and len(dataset)); a {kind} "
            "gives its samples as a stream, in an order of its own: keep torch.utils.data.DataLoader for it"
        )
    if pipeline is not None:
        raise UnsupportedDataset(
            f"{why}\nfallback='torchvision' reads the {kind} as it is, with its own transforms; a pipeline= "
            "cannot be applied to what it returns: leave pipeline out, or give gpupipe a source it reads itself"
        )
    if backend not in ("auto", "torchvision", NAME, TRANSFORM_FALLBACK):
        raise ValueError(f"fallback='torchvision' reads the {kind} as it is, on the CPU, not on backend {backend!r}")
    first = why.splitlines()[0].split("; it takes ")[0]  # the refusal's reason, without its advice
    warnings.warn(
        f"{first}, so fallback='torchvision' reads the {kind} as it is: dataset[i] in DataLoader workers, not on "
        "the GPU (gpupipe keeps the order, the ranks' shares and resuming)",
        stacklevel=4,
    )
    return DatasetItems(dataset), [Decode(), PadTo(1)], dataset, NAME


__all__ = ["DatasetBackend", "DatasetItems", "fall_back_dataset", "NAME"]
