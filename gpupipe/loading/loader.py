"""The PyTorch-facing loader: a drop-in for ``torch.utils.data.DataLoader``.

[`gpupipe.loader`][gpupipe.loader] (``gpupipe.loading.factory``) checks every argument before any work starts
and builds a [`Loader`][gpupipe.Loader], which decides each epoch's order (the same on every backend), keeps the
epoch bookkeeping (``gpupipe.loading.epochs``), keeps its share in step with ``torch.distributed`` and hands
``(images, targets)`` batches per the batch contract from whichever backend runs the pipeline.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from .. import backends, checks, env
from ..backends import EpochRead, Placement
from ..errors import ErrorPolicy, Skipped
from ..plan.seeding import batch_key
from ..plan.spec import PipelineSpec
from ..sources import Source
from . import agreement, frameworks, identity, resplit, steps
from .batchsteps import BatchSteps
from .config import LoaderConfig
from .draws import epoch_samples
from .epochs import EpochCursor
from .sampling import RankShare, batches_per_epoch, per_rank, split
from .stats import LoadStats, StatsSummary
from .transfer import Batch, without_failed

logger = logging.getLogger("gpupipe.loader")


def _setting(name: str) -> property:
    """A loader attribute that reads ``loader.config.<name>``."""
    return property(lambda self: getattr(self.config, name), doc=f"``config.{name}``.")


class Loader:
    """Iterates ``(images, targets)`` batches of a source through a pipeline.

    Use [`gpupipe.loader`][gpupipe.loader] to build one. Batches follow the contract:
    ``images`` ``(B, 3, H, W)`` on ``device`` in the requested dtype
    (float normalised, or uint8), targets on the same device: ``(B,)`` int64
    labels, ``(B, C)`` float32 multi-hot or soft targets, ``(B, H, W)`` int64
    masks, or a dict of padded ``boxes`` and ``labels``.

    Attributes:
        source: where the samples come from (bad files already left out).
        spec: the checked pipeline.
        config: the loader's settings ([`LoaderConfig`][gpupipe.LoaderConfig]); ``batch_size``,
            ``drop_last``, ``even_batches``, ``shuffle``, ``seed`` and ``on_error`` read it
            (``batch_size`` is per rank).
        backend: the backend's name (``"dali"``, ``"dali-cpu"``, ``"torchvision"``).
        backend_reason: why ``backend="auto"`` chose it.
        device: where batches land.
        num_threads: DALI threads or DataLoader workers.
        rank, world_size: this process's part of the data (see ``gpupipe.loading.sampling``); a share not
            given is taken again from ``torch.distributed`` when iteration starts (see ``__iter__``).
        sampler, batch_sampler: where frameworks call ``set_epoch`` (see ``gpupipe.loading.frameworks``).
    """

    def __init__(
        self,
        source: Source,
        spec: PipelineSpec,
        config: LoaderConfig,
        *,
        backend: str,
        placement: Placement,
        errors: ErrorPolicy | None = None,
        world: env.World | None = None,
        backend_reason: str = "",
        auto_device: bool = False,
        dataset: Any = None,
    ) -> None:
        self.source = source
        self._dataset = dataset
        self.spec = spec
        self.config = config
        self._placement = placement
        self._errors = errors if errors is not None else ErrorPolicy(config.on_error)
        self._world = world or env.World(0, 1, "argument")
        self._settled = False  # threads not yet fitted to a process group
        self._auto_device = auto_device
        self.backend_reason = backend_reason
        self._dropped = 0
        self.sampler = frameworks.EpochSampler(self)
        self.batch_sampler = frameworks.EpochBatchSampler(self.sampler)
        self._steps = BatchSteps(spec, len(source.classes))  # a batch op without a step is refused here
        self._label_map = getattr(source, "label_map", None)  # a dataset's target_transform (interop.target_map)
        self._backend = backends.create(backend, source, spec, config, placement, self._errors)
        self.backend = self._backend.name
        self._cursor = EpochCursor()
        self._stats = LoadStats(self.backend, self.device.type == "cuda", config.log_every, source=source)
        self._live: weakref.ref | None = None
        prepare = getattr(self._backend, "prepare", None)
        if prepare is not None and len(self):
            prepare(self._read(self._cursor.epoch), self._read)

    # -- settings, read from the config -----------------------------------------------------

    batch_size = _setting("batch_size")
    drop_last = _setting("drop_last")
    even_batches = _setting("even_batches")
    shuffle = _setting("shuffle")
    seed = _setting("seed")
    on_error = _setting("on_error")
    #: each batch's type: ``(images, targets)``; ``gpupipe.DataLoader``'s are lists, as torch's default collate gives
    batch_type: type = tuple

    @property
    def device(self) -> torch.device:
        return self._placement.device

    @property
    def num_threads(self) -> int:
        return self._placement.threads

    # -- the DataLoader surface -------------------------------------------------

    @property
    def rank(self) -> int:
        return self._settle().rank

    @property
    def world_size(self) -> int:
        return self._settle().world_size

    @property
    def dataset(self):
        """The torchvision dataset given, else a ``SourceDataset`` view of the source (``len()``, ``classes``,
        ``samples``...); refused to Accelerate's ``skip_first_batches`` (``frameworks.refuse_rebuild``)."""
        frameworks.refuse_rebuild()
        from ..interop.datasets import SourceDataset

        self._dataset = self._dataset if self._dataset is not None else SourceDataset(self.source)
        return self._dataset

    def _settle(self) -> env.World:
        """The share, checked against ``torch.distributed`` as it is now (see ``gpupipe.env.settle_world``).

        A share taken before the process group existed gives way to the
        group's, and what was left to gpupipe (``num_threads``, the CUDA device) is
        chosen again once, for the processes of this host (``_refit``).
        """
        group = env.process_group()
        world = env.settle_world(self._world, group, frameworks.shards_torch_loaders)
        if world.origin in ("framework", "unsampled"):  # gpupipe.DataLoader without a sampler, as torch's
            self.config = frameworks.framework_config(self, world)
        if world != self._world:
            if (world.rank, world.world_size) != (self._world.rank, self._world.world_size):
                logger.info("gpupipe loader: %s from torch.distributed (%s)", world, world.origin)
                steps.check_batch_fits(self.source, self.config, world.world_size)
            self._world = world
        if group is not None and not self._settled:
            self._settled = self._refit()
        return world

    def _refit(self) -> bool:
        """Threads and CUDA device left to gpupipe, chosen again once the framework has set up its
        processes (the backend is rebuilt, between passes only); whether that is done."""
        if self._cursor.current is not None or "_backend" not in self.__dict__:
            return False  # a pass is under way (at the next, then), or the loader is closed
        device = self.device
        if self._auto_device and device.type == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())  # the framework has chosen this rank's GPU
        placement = Placement.chosen(device, self.config.num_threads)
        if placement == self._placement:
            return True
        logger.info(
            "gpupipe loader: %d threads (%d processes on this host), device %s",
            placement.threads,
            env.local_world_size(),
            device,
        )
        self._backend.close()
        self._backend = backends.create(self.backend, self.source, self.spec, self.config, placement, self._errors)
        self._placement = placement
        return True

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank unless ``even_batches=False``)."""
        world, drop_last = self._settle(), self.drop_last
        n = epoch_samples(self.source)
        frameworks.refuse_empty_rank(self.config, world, n)  # under Lightning, a rank without batches hangs the rest
        n -= resplit.left_out(self._cursor.offset(self._cursor.epoch))  # the rest of an epoch (resplit)
        samples = per_rank(n, world.world_size, drop_last=drop_last, even_batches=self.even_batches, rank=world.rank)
        return batches_per_epoch(samples, self.batch_size, drop_last)

    def rank_share(self, epoch: int | None = None) -> RankShare:
        """This rank's samples for ``epoch`` (default: the next or current pass), with padding counts."""
        epoch = self._cursor.epoch if epoch is None else epoch
        world = self._settle()
        order = self.source.epoch_order(seed=self.seed, epoch=epoch, shuffle=self.shuffle)
        return split(
            order,
            rank=world.rank,
            world_size=world.world_size,
            drop_last=self.drop_last,
            even_batches=self.even_batches,
            start=self._cursor.offset(epoch),
        )

    def shard(self, epoch: int | None = None) -> RankShare:
        """Deprecated name of ``rank_share``."""
        warnings.warn("Loader.shard() is now Loader.rank_share()", DeprecationWarning, stacklevel=2)
        return self.rank_share(epoch)

    def _read(self, epoch: int) -> EpochRead:
        share = self.rank_share(epoch)
        return EpochRead(epoch, share, batches_per_epoch(len(share), self.batch_size, self.drop_last))

    def __iter__(self) -> Iterator[Batch]:
        """Starts a pass over the next epoch (ending any pass still under way).

        Raises:
            ValueError: the loader's share disagrees with the initialised process group (see ``_settle``).
        """
        live = self._live() if self._live is not None else None
        if live is not None:
            live.end()  # a new pass ends the previous one, which says so if asked for more (frameworks.Pass)
        frameworks.follow_sampler(self)  # a user's DistributedSampler (gpupipe.DataLoader) sets the epoch
        self._settle()
        generator = frameworks.Pass(self._pass())
        if live is None or not frameworks.probing():  # Lightning's check that it iterates: the live pass goes on
            self._live = weakref.ref(generator)  # weak: the pass refers to the loader, not the other way round
        return generator

    def _pass(self) -> Iterator[Batch]:
        current = self._cursor.begin(len(self), ranks_shuffled=self.shuffle and self._world.world_size > 1)
        read = self._read(current.epoch)
        current.total = read.batches  # len() under Lightning counts a rest of an epoch whole (resplit.left_out)
        rank, world_size = self._world.rank, self._world.world_size
        padded = (read.share.padded, world_size)
        if read.share.padded and rank == 0:
            logger.debug("epoch %d: %d samples repeated to give %d ranks equal shares", current.epoch, *padded)
        batches = self._backend.iter_epoch(read, current.start, upcoming=self._read)
        self._stats.pass_started()
        accelerate = frameworks.begin_pass(
            read, samples=epoch_samples(self.source) - current.offset, batch_size=self.batch_size, world_size=world_size
        )
        try:
            while current.done < current.total:
                if not current.live:  # ended under its loop (load_state_dict, skip): not silently short
                    raise frameworks.PassEnded(current.ended())
                asked = self._stats.asking()
                try:
                    batch = next(batches)
                except StopIteration:
                    raise RuntimeError(
                        f"the {self.backend} backend ended epoch {current.epoch} after "
                        f"{current.done} of {current.total} batches"
                    ) from None
                slots = read.share.indices[current.done * self.batch_size : (current.done + 1) * self.batch_size]
                batch, count = self._finish(batch, slots, (self.seed, current.epoch, rank, current.done))
                current.done += 1
                self._stats.delivered(asked, count)
                if accelerate is not None:
                    accelerate.end_of_dataloader = current.done == current.total
                yield batch
        finally:
            current.live = False
            frameworks.end_pass(accelerate)
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _finish(self, batch: Any, slots: Any, key: tuple[int, int, int, int]) -> tuple[Any, int]:
        """``(batch, its sample count)``, exact evaluation's failed samples left out and the batch ops applied
        (``key``: ``batch_key``'s arguments); a backend's ``batches_as_is`` (a dataset read as it is) are its own."""
        if getattr(self._backend, "batches_as_is", False):
            return batch, len(slots)
        images, targets = batch
        if not self.even_batches:  # exact evaluation: a sample that failed is dropped, not stood in for
            images, targets, dropped = without_failed(images, targets, slots, self.source.names, self._errors.log)
            self._dropped += dropped
        if self._steps:  # the one point of batch ops (MixUp / CutMix: soft targets (B, num_classes))
            images, targets = self._steps(images, targets, batch_key(*key))
        if self._label_map is not None:
            targets = self._label_map(targets)
        return self.batch_type((images, targets)), int(images.shape[0])

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose order (a function of ``(seed, epoch)`` alone) and augmentations the next pass
        reads; without it each pass reads the epoch after the previous pass's (``gpupipe.loading.epochs``)."""
        self._cursor.set_epoch(epoch)  # checked there: 0 .. gpupipe.loading.config.MAX_EPOCH

    def skip(self, batches: int) -> Loader:
        """The next pass starts at batch ``batches`` of the epoch it reads (Accelerate's
        ``skip_first_batches``, without rebuilding anything); returns the loader.

        Not needed after ``load_state_dict`` (or Accelerate's ``load_state``): the state says where to continue.

        Raises:
            ValueError: ``batches`` outside ``0 .. len(loader)``, or not where a loaded state resumes.
        """
        most = max(len(self), self._cursor.counted())  # a loaded state's own count too (Accelerate's docs skip it)
        if (count := checks.int_or_none(batches)) is None or not 0 <= count <= most:  # as set_epoch takes
            raise ValueError(f"skip: batches must be an int in 0..{len(self)}, got {batches!r}")
        self._cursor.skip(count)
        return self

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way, else the epoch the next pass reads."""
        return self._cursor.epoch

    @property
    def skipped(self) -> list[Skipped]:
        """Every sample left out (``on_error="skip"``), with the reason: found by the
        scan when the loader was built, or when it failed while loading."""
        return list(self._errors.log.entries)

    @property
    def classes(self) -> list[str]:
        return self.source.classes

    @property
    def class_to_idx(self) -> dict[str, int]:
        return self.source.class_to_idx

    @property
    def mean(self) -> tuple[float, float, float]:
        """The pipeline's normalisation mean, ``[0, 1]`` units (for uint8 output)."""
        return self.spec.mean

    @property
    def std(self) -> tuple[float, float, float]:
        """The pipeline's normalisation std, ``[0, 1]`` units (for uint8 output)."""
        return self.spec.std

    def stats(self, reset: bool = False) -> StatsSummary:
        """Batches, images/s, the share of time the consumer waited for data and the bench's verdict
        (``"input-bound"`` when at least 10 % of it is spent waiting), with a suggestion; ``reset``: count
        afresh after this call."""
        summary = dataclasses.replace(self._stats.summary(), dropped=self._dropped)
        if reset:
            self._stats.reset()
            self._dropped = 0
        return summary

    # -- checkpointing ----------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain data to resume from, for ``torch.save``: the epoch, the batches taken in it, and what decides
        the samples that follow (``gpupipe.loading.identity.recorded``). Augmentations are drawn from
        ``(seed, epoch, slot)``, so a resume repeats the rest of the epoch exactly, on any backend. Per rank."""
        world = self._settle()
        match = identity.recorded(self, world.world_size)  # with the classes, labels and pipeline (digests)
        return self._cursor.state_dict(rank=world.rank, backend=self.backend, match=match)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from ``state_dict``: the next pass gives exactly the batches that would have come next.

        Raises:
            ValueError: a field that decides the samples, classes or labels differs, a malformed state (named).
        """
        world, samples = self._settle(), epoch_samples(self.source)
        match = identity.recorded(self, world.world_size)  # each field checked, then compared: identity.checked
        load = lambda: identity.load(self._cursor, state, match, samples=samples, rank=world.rank)  # noqa: E731
        agreement.load_alike(load, agreement.exchange_group(world))

    # -- lifetime ----------------------------------------------------------------

    def close(self) -> None:
        """Ends any pass and frees the backend (pipelines, worker processes). The loader cannot be used after."""
        live = self._live() if self._live is not None else None
        if live is not None:
            live.close()
        self._live = None
        backend = self.__dict__.pop("_backend", None)
        if backend is not None:
            backend.close()

    def __enter__(self) -> Loader:
        return self

    def __del__(self) -> None:
        backend = self.__dict__.get("_backend")
        if backend is not None:
            try:
                backend.close()
            except (RuntimeError, OSError, AttributeError, TypeError):  # at interpreter shutdown
                pass

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"gpupipe.Loader(backend={self.backend!r}, device={str(self.device)!r}, "
            f"batch_size={self.batch_size}, batches={len(self)}, source={self.source!r})"
        )
