"""What training frameworks look for on a data loader, answered for a [`Loader`][gpupipe.Loader].

- ``loader.sampler`` and ``loader.batch_sampler.sampler``: where Lightning
  (and ``DistributedSampler`` habits) call ``set_epoch(e)``; both are one
  ``EpochSampler``, which forwards the epoch to the loader, so a loader
  rebuilt every epoch reads epoch ``e``'s order, as gpupipe's own epochs do.
  Lightning's fit loop, restarted where ``max_steps`` stopped an epoch,
  sets the next epoch while it goes on with the stopped one: a loaded state
  of the stopped epoch is kept then (``LIGHTNING_EPOCH``).
- Accelerate's gradient state: while a pass runs, the loader is
  Accelerate's active data loader (``AccelerateEnd``), which says when
  the batch handed out is the epoch's last (gradient accumulation steps
  there) and how many samples of the last batch gathered over all ranks are
  real (``gather_for_metrics`` drops the padding).

Accelerate's ``prepare()`` hands a gpupipe loader back unchanged. Its
``skip_first_batches`` would rebuild a ``torch.utils.data.DataLoader`` over
``loader.dataset`` (decoding with PIL, without gpupipe's pipeline): reading
``loader.dataset`` from there fails at once (``refuse_rebuild``) with
``NO_DATASET``, which points to ``loader.skip(n)`` (also through ``DetectionLists``);
``accelerator.prepare_data_loader(loader)``, which would rebuild and shard it
again, likewise (``NO_PREPARE_DATA_LOADER``).

Under Lightning, an ``even_batches=False`` loader that leaves a rank without
batches is refused on every rank (``refuse_empty_rank``): Lightning skips its
loop on that rank and the others hang in its epoch-end reductions. A loader is
not pickled (Lightning's ``ddp_spawn``): ``NO_PICKLE`` says where to build it.

One loader object that Lightning both trains and validates (or predicts) on is read in the evaluation loop as
torch's per-use sampler reads it, unshuffled (``framework_config``), and aside (``evaluates_trained``): the
training epoch and state stay as they were; Lightning's ``iter()`` that only checks a loader (``PROBES``) ends no pass.

A ``DistributedSampler`` given to ``gpupipe.DataLoader`` is the loader's
``sampler``: its ``set_epoch`` decides the epoch each pass reads
(``follow_sampler``), as it does for a torch ``DataLoader``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any, Protocol

from ..env import lightning_trainer as _lightning_trainer
from ..errors import Error
from .accelerating import AccelerateEnd, begin_pass, end_pass, gradient_state
from .draws import epoch_samples
from .lightning_loops import aside_pass, asking_loop, evaluates_trained, in_fit, probing, reads_in_order
from .sampling import batches_per_epoch, per_rank

NO_DATASET = (
    "a gpupipe Loader is not a torch DataLoader: Accelerate's skip_first_batches would rebuild a torch "
    "DataLoader over loader.dataset, without gpupipe's pipeline; call loader.skip(n) instead (the next pass "
    "starts at batch n), or register the loader with accelerator.register_for_checkpointing(loader) so that "
    "load_state() resumes it exactly"
)

NO_PICKLE = (
    "a gpupipe Loader cannot be pickled and sent to another process (it holds decoding pipelines and threads): "
    "Lightning's strategy='ddp_spawn' and torch.multiprocessing.spawn pickle what they are given; build the loader "
    "in the process that reads it, e.g. in LightningDataModule.train_dataloader(), which runs in every process, "
    "or use strategy='ddp'"
)

NO_PREPARE_DATA_LOADER = (
    "a gpupipe Loader is not a torch DataLoader: Accelerate's prepare_data_loader would rebuild a torch DataLoader "
    "over loader.dataset, without gpupipe's pipeline, and shard it a second time; pass the loader to "
    "accelerator.prepare(...), which hands it back as it is (it shards itself), or use it without preparing"
)

#: ``(module, function)`` of the callers that rebuild a torch ``DataLoader`` from ``loader.dataset``, and what
#: the refusal says to each.
REBUILDERS = {
    ("accelerate.data_loader", "skip_first_batches"): NO_DATASET,
    ("accelerate.data_loader", "prepare_data_loader"): NO_PREPARE_DATA_LOADER,
}

#: ``(module, function)`` of the callers through which Lightning's fit loop sets the sampler's epoch: restarted
#: from a checkpoint written when ``max_steps`` stopped an epoch, it sets the next epoch while its loop goes on
#: with the stopped one (``EpochCursor.set_epoch(loop_continues=True)``).
LIGHTNING_EPOCH = (
    ("lightning.fabric.utilities.data", "_set_sampler_epoch"),
    ("lightning_fabric.utilities.data", "_set_sampler_epoch"),
)


def shards_torch_loaders() -> bool:
    """Whether this process runs under a framework that shards a torch ``DataLoader`` given without a sampler:
    an ``Accelerator`` exists (its ``prepare`` shards one), or Lightning's loops, with
    ``use_distributed_sampler``, are asking (they are on the call stack)."""
    if gradient_state() is not None:
        return True
    trainer = _lightning_trainer()
    return trainer is not None and bool(getattr(trainer._accelerator_connector, "use_distributed_sampler", True))


def framework_config(loader: Any, world: Any) -> Any:
    """The config of a ``gpupipe.DataLoader`` given without a sampler, for its share ``world``.

    Read as it was built where it reads everything (``"unsampled"``); where a framework shards it
    (``"framework"``, ``shards_torch_loaders``) the order is seeded alike on every rank, where
    ``torch.initial_seed()`` differs from process to process: under Accelerate by the loader's ``generator``
    or its sampler's own (seed it alike on every rank), else by the seed of the framework's own ``DistributedSampler``
    (Lightning's ``PL_GLOBAL_SEED``, from ``seed_everything``, else 0), as Lightning orders a torch
    ``DataLoader``, whose ``generator`` it ignores there; a training loader's share is shuffled there (``_trains``),
    as Lightning shuffles a torch one's. Lightning's ``predict`` reads each sample once,
    the shares unpadded (its ``UnrepeatedDistributedSampler``): ``even_batches=False`` then. With ``drop_last``,
    Lightning pads each rank's share and drops a partial batch only: where the padded share is whole batches
    (and a cut one is not), ``drop_last=False``, which reads that padded share, as many batches as torch's."""
    own = loader.__dict__.setdefault("_own_config", loader.config)  # as built
    seeded = getattr(loader, "generator", None) is not None or getattr(loader, "_seeded_by_sampler", False)
    if world.origin != "framework":
        return own
    seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
    if gradient_state() is not None:  # Accelerate
        return own if seeded else dataclasses.replace(own, seed=seed)
    trainer = _lightning_trainer()
    predicting = bool(getattr(trainer, "predicting", False))
    # sharded for training: shuffled; read by validation or predict (the same object as val_dataloader()): not
    trains = _trains(trainer, loader) and not reads_in_order(asking_loop())
    shuffle = own.shuffle or trains
    # Lightning's DistributedSampler pads each rank to ceil(n / w) samples (its drop_last=False) and the DataLoader's
    # drop_last drops a partial batch only: where that share is whole batches, it is drop_last=False's, exactly
    n, ranks = epoch_samples(loader.source), world.world_size
    whole = own.drop_last and not predicting and n % ranks and -(-n // ranks) % own.batch_size == 0
    drop_last = own.drop_last and not whole
    even = own.even_batches and not predicting
    return dataclasses.replace(own, seed=seed, shuffle=shuffle, drop_last=drop_last, even_batches=even)


def _trains(trainer: Any, loader: Any) -> bool:
    """Whether ``loader`` is one of ``trainer``'s training loaders, which Lightning shuffles (not drawn ones)."""
    if getattr(loader.source, "draws", None) is not None:  # drawn by weight: a random order already
        return False
    return in_fit(trainer, loader)


class EmptyRank(Error, ValueError):
    """Under Lightning, an ``even_batches=False`` loader whose share leaves some rank without a batch."""


def refuse_empty_rank(config: Any, world: Any, samples: int) -> None:
    """Raises ``EmptyRank`` on every rank alike when, under Lightning's loops (fitting or validating, not
    predicting), an ``even_batches=False`` loader (``config``, an epoch of ``samples`` samples over all ranks)
    leaves some rank of ``world`` without a batch (fewer samples than ranks).

    Lightning skips its loop on such a rank, hooks and epoch-end reductions included (``sync_dist`` logging,
    a torchmetrics sync), so the other ranks wait in them for a rank that has gone on: a hang. Every rank
    decides from the same numbers (samples, world size, batch size), so every rank raises.
    """
    ranks = world.world_size
    if config.even_batches or ranks < 2:
        return

    def batches(rank: int) -> int:
        share = per_rank(samples, ranks, drop_last=config.drop_last, even_batches=False, rank=rank)
        return batches_per_epoch(share, config.batch_size, config.drop_last)

    if batches(ranks - 1) or getattr(_lightning_trainer(), "predicting", True):  # the last rank's is the least
        return
    empty = [rank for rank in range(ranks) if not batches(rank)]
    more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
    raise EmptyRank(
        f"even_batches=False leaves rank {empty[0]} of {ranks}{more} without a batch ({samples} "
        f"sample{'s' if samples != 1 else ''}, batch_size {config.batch_size}): Lightning skips its loop on a rank "
        "without batches, and the other ranks then wait forever in its epoch-end reductions (sync_dist logging, "
        "metric syncs); use even_batches=True for this loader (a few samples are then read twice) or more samples "
        "than ranks"
    )


class RebuildRefused(Error, AttributeError):
    """A framework tried to rebuild a torch ``DataLoader`` over a gpupipe loader's ``dataset``."""


def refuse_rebuild() -> None:
    """Raises ``RebuildRefused`` (``NO_DATASET``, ...) when ``loader.dataset`` is read by a function
    of ``REBUILDERS`` (the caller of the ``dataset`` property), before it builds anything; also through
    gpupipe's wrappers that hand ``dataset`` on to their loader (``DetectionLists``): their frames are passed
    over."""
    frame: FrameType | None = sys._getframe(2)  # refuse_rebuild <- Loader.dataset <- the reader
    while frame is not None and frame.f_globals.get("__name__", "").startswith("gpupipe."):
        frame = frame.f_back
    caller = (frame.f_globals.get("__name__"), frame.f_code.co_name) if frame is not None else None
    if caller in REBUILDERS:
        raise RebuildRefused(REBUILDERS[caller])


class PassEnded(Error, RuntimeError):
    """A pass asked for more batches after a newer pass over the same loader ended it."""


class Pass:
    """One pass over a loader, what ``iter(loader)`` returns: the pass's batches, one by one.

    A torch ``DataLoader`` lets a second ``iter(loader)`` run beside the first (a script that peeks at a
    batch inside its loop over the loader); a gpupipe loader runs one pass at a time, and a new pass ends
    the previous one (``end``). Asking an ended pass for more raises ``PassEnded`` rather than end that
    loop early, silently. A pass that finished by itself, or was closed, stops as a generator does.
    """

    def __init__(self, batches: Iterator[Any]) -> None:
        self._batches = batches
        self._ended = False
        self._finished = False
        self._by_validation = False  # ended by Lightning's validation loop (the same loader in both)

    def __iter__(self) -> Pass:
        return self

    def __next__(self) -> Any:
        if self._ended and self._by_validation:
            raise PassEnded(
                "Lightning's validation loop began a pass over this loader while its training pass was under way "
                "(train_dataloader() and val_dataloader() return the same loader, and validation runs mid-epoch: "
                "val_check_interval): gpupipe runs one pass per loader at a time, where torch's DataLoader runs "
                "both; return a second loader from val_dataloader() (built alike), or validate at epochs' ends"
            )
        if self._ended:
            raise PassEnded(
                "a new pass over this loader began (iter(loader) again, e.g. next(iter(loader)) inside "
                "`for batch in loader`) and ended this one: gpupipe runs one pass per loader at a time, where "
                "torch's DataLoader runs both; keep the batch you need from this pass, or build a second loader"
            )
        try:
            return next(self._batches)
        except StopIteration:
            self._finished = True
            raise

    def end(self) -> None:
        """Ends the pass for a new one; asking it for more batches then raises ``PassEnded``. Lightning's check that
        a loader is iterable (``PROBES``: an ``iter()`` it never reads) ends nothing."""
        if probing():
            return
        self._ended = not self._finished
        self._by_validation = reads_in_order(asking_loop())
        self.close()

    def close(self) -> None:
        """Ends the pass and frees what it holds; it then stops, as a closed generator does."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


class Loader(Protocol):
    """What these answers read from a gpupipe ``Loader`` (typed here, so this module needs not import it)."""

    sampler: Any
    source: Any
    batch_size: int
    drop_last: bool
    _cursor: Any  # the loader's EpochCursor

    def set_epoch(self, epoch: int) -> None: ...

    def rank_share(self) -> Any: ...

    def __len__(self) -> int: ...


def follow_sampler(loader: Loader) -> None:
    """Before a pass: a user's sampler given to ``gpupipe.DataLoader`` (a ``DistributedSampler``)
    decides the epoch, as in a torch ``DataLoader`` (its ``set_epoch``, else epoch 0 every pass); a
    torchvision dataset changed since the loader was built is refused (``interop.datasets.DatasetGuard``)."""
    guard = getattr(loader.source, "dataset_guard", None)
    if guard is not None:
        guard.check()
    if loader._cursor.aside is None:  # asked as each pass begins: Lightning validates on its training loader
        loader._cursor.aside = functools.partial(aside_pass, weakref.ref(loader))
    sampler = loader.sampler
    if evaluates_trained(loader) or isinstance(sampler, EpochSampler) or not hasattr(sampler, "epoch"):
        return
    loader.set_epoch(int(sampler.epoch))  # a loaded state of that epoch is kept (EpochCursor.set_epoch)


class EpochSampler:
    """The loader's order as a sampler: ``set_epoch`` where frameworks call it, and the rank's samples.

    Iterating gives the sample indices this rank reads in the epoch the
    loader is at (see ``Loader.rank_share``).
    """

    def __init__(self, loader: Loader) -> None:
        self._loader = weakref.ref(loader)

    def __reduce__(self) -> Any:
        """Refuses pickling with ``NO_PICKLE``: a loader is pickled with its sampler (it failed on the weak
        reference here, naming neither gpupipe nor a remedy)."""
        raise TypeError(NO_PICKLE)

    def __deepcopy__(self, memo: dict) -> EpochSampler:
        """The sampler of the loader's copy (``copy.deepcopy`` of a loader), not of the loader copied."""
        loader = self.loader
        return EpochSampler(memo.get(id(loader), loader))

    @property
    def loader(self) -> Loader:
        loader = self._loader()
        if loader is None:
            raise ReferenceError("the gpupipe loader of this sampler is gone")
        return loader

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the loader's next pass reads (``Loader.set_epoch``); called by Lightning's fit loop
        (``LIGHTNING_EPOCH``), the next epoch after a loaded state of a stopped epoch keeps that state."""
        frame = sys._getframe(1)
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) in LIGHTNING_EPOCH:
            if evaluates_trained(self.loader):  # its training epoch is the fit loop's to set
                return
            self.loader._cursor.set_epoch(epoch, loop_continues=True)
        else:
            self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(self.loader.rank_share().indices.tolist())

    def __len__(self) -> int:
        return len(self.loader.rank_share())


class EpochBatchSampler:
    """The loader's batches as lists of sample indices; its ``sampler`` is the ``EpochSampler``."""

    def __init__(self, sampler: EpochSampler) -> None:
        self.sampler = sampler

    @property
    def batch_size(self) -> int:
        return self.sampler.loader.batch_size

    @property
    def drop_last(self) -> bool:
        return self.sampler.loader.drop_last

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(self.sampler)[: len(self) * self.batch_size]
        return iter([indices[k : k + self.batch_size] for k in range(0, len(indices), self.batch_size)])

    def __len__(self) -> int:
        return len(self.sampler.loader)


__all__ = [
    "EpochSampler",
    "EpochBatchSampler",
    "AccelerateEnd",
    "begin_pass",
    "end_pass",
    "NO_DATASET",
    "NO_PICKLE",
    "NO_PREPARE_DATA_LOADER",
    "RebuildRefused",
    "refuse_rebuild",
    "EmptyRank",
    "refuse_empty_rank",
    "follow_sampler",
    "shards_torch_loaders",
    "framework_config",
]
