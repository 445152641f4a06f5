"""The torchvision backend: ``torchvision.io`` decoding and ``transforms.v2`` kernels in DataLoader workers.

The main process plans each batch (every random parameter, from the
samples' keys) and sends ``(index, parameters)`` keys to the workers, which
decode and transform uint8 ``(3, H, W)`` tensors (and masks and boxes).
For a CPU target the workers also normalise, so the main process only
receives finished batches; for a CUDA target the uint8 batch is pinned,
copied with ``non_blocking=True`` on a side stream and normalised on the
GPU while the previous step computes (``CudaPrefetcher``).
A sample that fails in a worker is replaced in the main process by the
rule of ``BadSamples``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np
from torch.utils.data import DataLoader, Sampler

from ...errors import ErrorPolicy
from ...loading.batchsteps import finisher
from ...loading.config import LoaderConfig
from ...loading.transfer import Batch, CudaPrefetcher
from ...plan import Planner
from ...plan.spec import PipelineSpec
from ...sources import Source
from .. import forks
from ..base import EpochRead, Placement
from ..common import BadSamples, batch_slots
from .dataset import DecodedSamples, collate, finish_one

logger = logging.getLogger(__name__)


class _BatchKeys(Sampler):
    """The current pass's batches of keys; replaced before each pass."""

    def __init__(self) -> None:
        self.make: Callable[[], Iterator[list]] = lambda: iter(())

    def __iter__(self):
        return self.make()

    def __len__(self) -> int:  # not used for batching: the generator decides
        return 0


class TorchvisionBackend:
    """Runs a spec with ``torchvision.io`` + ``transforms.v2`` kernels in a DataLoader.

    Args:
        source: the samples.
        spec: the checked pipeline.
        config: the loader's settings (batch size, prefetch, seed, reduced decoding).
        placement: the device, and the worker processes (0 decodes in the main process).
        errors: the loader's ``on_error`` policy.
    """

    name = "torchvision"

    def __init__(
        self, source: Source, spec: PipelineSpec, config: LoaderConfig, placement: Placement, errors: ErrorPolicy
    ) -> None:
        self.source = source
        self.spec = spec
        self.config = config
        self.device = placement.device
        self.target = source.target
        self.planner = Planner(spec, config.seed)
        self.sizes = source.sizes()
        self.bad = BadSamples(source, errors)
        self.on_cuda = self.device.type == "cuda"
        self.dataset = DecodedSamples(source, spec, config.reduced_decode)
        self._keys = _BatchKeys()
        workers = placement.threads
        self._owner = os.getpid()  # the process whose workers the DataLoader holds (forks)
        self.dataloader = DataLoader(
            self.dataset,
            batch_sampler=self._keys,
            num_workers=workers,
            collate_fn=functools.partial(collate, spec=spec, target=self.dataset.target, finish=not self.on_cuda),
            pin_memory=self.on_cuda,
            persistent_workers=workers > 0,
            prefetch_factor=config.prefetch if workers > 0 else None,
        )

    def _plan(self, read: EpochRead, batch: int):
        bs = self.config.batch_size
        self.source.will_read(read.share.indices, batch * bs)
        indices, positions = batch_slots(read.share, batch, bs)
        indices = self.bad.replace(indices, read.share, batch * bs)
        plan = self.planner.plan(
            read.epoch, positions, self.sizes[indices], self.target.planning_boxes(self.source, indices)
        )
        return indices, positions, plan, [(int(i), plan.sample(k)) for k, i in enumerate(indices)]

    def iter_epoch(self, read: EpochRead, start: int = 0, upcoming: Callable | None = None) -> Iterator[Batch]:
        """Yields batches ``start ..`` of ``read``, in order."""
        pending: deque = deque()

        def keys():
            for b in range(start, read.batches):
                indices, positions, plan, batch_keys = self._plan(read, b)
                pending.append((b, indices, positions, plan))
                yield batch_keys

        self._keys.make = keys
        if os.getpid() != self._owner:  # a forked child: the workers are the parent's (forks), it starts its own
            self.dataloader._iterator, self._owner = None, os.getpid()
        workers = getattr(self.dataloader._iterator, "_workers", ())
        if any(not worker.is_alive() for worker in workers):  # one died between passes (torch raised it then)
            self.close()
        batches = self._finish(forks.track(iter(self.dataloader)), pending, read)
        if self.on_cuda:
            return iter(CudaPrefetcher(batches, self.device, finisher(self.spec)))
        return batches

    def _finish(self, loaded: Iterator, pending: deque, read: EpochRead) -> Iterator[Batch]:
        for images, part, failures in self._guarded(loaded):
            b, indices, positions, plan = pending.popleft()
            content = self.planner.content_sizes(plan)
            if failures:
                indices, part = self._refill(images, part, content, failures, indices, positions, read, b)
            yield images, self.dataset.target.complete(part, self.source, indices, content)

    def _guarded(self, loaded: Iterator) -> Iterator:
        """``loaded``; an error or interrupt while waiting on the workers (a worker killed, say by the OOM
        killer; Ctrl-C in the middle of a read) shuts the persistent workers down before it goes on, so the
        next pass starts new ones rather than fail for good on a dead worker or a half-read queue. Read on in
        a forked child, the pass is refused (``forks.owned``)."""
        loaded = forks.owned(loaded)
        while True:
            try:
                item = next(loaded)
            except StopIteration:
                return
            except (Exception, KeyboardInterrupt):
                self.close()
                raise
            yield item

    def _refill(self, images, part, content, failures, indices, positions, read: EpochRead, batch: int):
        """Replaces the samples that failed in a worker, decoding their replacements here (``content``,
        the content sizes, is updated in place); returns the batch's indices and target part with them."""
        indices = np.array(indices)
        self.bad.report((int(indices[k]), reason) for k, reason in failures)
        start = batch * self.config.batch_size
        for k, _ in failures:
            while True:
                replacement = int(self.bad.replace(indices[k : k + 1], read.share, start + k)[0])
                plan = self.planner.plan(
                    read.epoch,
                    positions[k : k + 1],
                    self.sizes[[replacement]],
                    self.target.planning_boxes(self.source, [replacement]),
                )
                image, target, reason = self.dataset[(replacement, plan.sample(0))]
                if reason is None:
                    break
                self.bad.report([(replacement, reason)])
            indices[k] = replacement
            content[k] = self.planner.content_sizes(plan)[0]
            images[k] = finish_one(image, self.spec, not self.on_cuda)
            part = self.dataset.target.replace(part, k, target)
        return indices, part

    def close(self) -> None:
        if os.getpid() != self._owner:  # a forked child: the workers are the parent's (forks)
            self.dataloader._iterator = None
            return
        iterator = getattr(self.dataloader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            forks.shut_down(iterator)
        self.dataloader._iterator = None


__all__ = ["TorchvisionBackend"]
