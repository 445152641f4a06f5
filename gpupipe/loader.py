"""The PyTorch-facing loader: a drop-in for ``torch.utils.data.DataLoader``.

It checks every argument before any work starts, decides each epoch's
order (the same on every backend), and hands ``(images, labels)`` batches
per the batch contract from whichever backend runs the pipeline.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from . import backends, presets
from .batch import Batch
from .batchaug import BatchMixer
from .ops import Op, Output
from .sampling import Shard, epoch_seed, per_rank, shard
from .scan import SkipLog, Skipped
from .sources import Shards, Source, as_source
from .spec import PipelineSpec, build_spec

logger = logging.getLogger(__name__)

DeviceArg = Union[None, str, int, torch.device]


class Loader:
    """Iterates ``(images, labels)`` batches of a source through a pipeline.

    Use :func:`gpupipe.loader` to build one. Batches follow the contract:
    ``images`` ``(B, 3, H, W)`` on :attr:`device` in the requested dtype
    (float normalised, or uint8), ``labels`` ``(B,)`` int64 on the same device.

    Attributes:
        source: where the samples come from.
        spec: the checked pipeline.
        backend: the backend's name (``"dali"``, ``"dali-cpu"``, ``"torchvision"``).
        device: where batches land.
        rank, world_size: this process's part of the data (see :mod:`gpupipe.sampling`).
        batch_size, drop_last, shuffle, seed: as given; ``batch_size`` is per rank.
    """

    def __init__(
        self,
        source: Source,
        spec: PipelineSpec,
        config: backends.RunConfig,
        *,
        backend: str,
        shuffle: bool,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.source = source
        self.spec = spec
        self.batch_size = config.batch_size
        self.drop_last = config.drop_last
        self.device = config.device
        self.on_error = config.on_error
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self._skip_log = config.skip_log
        self._backend = backends.create(backend, source, spec, config)
        self.backend = self._backend.name
        self._mixer = BatchMixer(spec.batch_ops, len(source.classes)) if spec.batch_ops else None
        self._epoch = 0
        self._epoch_pinned = False
        self._resume: Optional[Tuple[int, int, Optional[str]]] = None  # (epoch, batches, backend state)
        self._batches_done = 0

    # -- the DataLoader surface -------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        n = per_rank(len(self.source), self.world_size, self.drop_last)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def shard(self, epoch: Optional[int] = None) -> Shard:
        """This rank's sample indices for ``epoch`` (default: the next pass), with padding counts."""
        epoch = self._epoch if epoch is None else epoch
        order = self.source.epoch_order(seed=self.seed, epoch=epoch, shuffle=self.shuffle)
        return shard(order, rank=self.rank, world_size=self.world_size, drop_last=self.drop_last)

    def __iter__(self) -> Iterator[Batch]:
        epoch = self._epoch
        part = self.shard(epoch)
        if part.padded and self.rank == 0:
            logger.debug("epoch %d: %d samples repeated to give %d ranks equal shares", epoch, part.padded, self.world_size)
        skip, state = 0, None
        if self._resume is not None and self._resume[0] == epoch:
            _, skip, state = self._resume
        self._resume = None
        self._batches_done = skip
        random_seed = self._random_seed(epoch)
        batches = self._backend.iter_epoch(part.indices, random_seed, skip_batches=skip, state=state)
        for images, labels in batches:
            if self._mixer is not None:  # MixUp / CutMix: soft targets (B, num_classes)
                images, labels = self._mixer(images, labels, key=random_seed * 1_000_003 + self._batches_done)
            self._batches_done += 1
            yield images, labels
        # A full pass moves on to the next epoch unless set_epoch() drives the numbering.
        if not self._epoch_pinned:
            self._epoch = epoch + 1
        self._epoch_pinned = False
        self._batches_done = 0

    def _random_seed(self, epoch: int) -> int:
        """Seeds the epoch's augmentations; ranks differ so their streams do not repeat each other."""
        return (epoch_seed(self.seed, epoch) + self.rank * 1_000_000_007) % (2**63 - 1)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose order and augmentations the next pass uses.

        The order is a function of ``(seed, epoch)`` alone. Without calls to
        ``set_epoch`` each full pass moves on to the next epoch by itself,
        so a loop written for ``DataLoader`` still sees a new order each epoch.
        """
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"set_epoch: epoch must be an int >= 0, got {epoch!r}")
        self._epoch = epoch
        self._epoch_pinned = True
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None  # a resumed epoch that is not read any more

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass reads."""
        return self._epoch

    @property
    def skipped(self) -> List[Skipped]:
        """Every file left out (``on_error="skip"``), with the reason: found by the
        scan when the loader was built, or when decoding failed while loading."""
        return list(self._skip_log.entries)

    @property
    def classes(self) -> List[str]:
        return self.source.classes

    @property
    def class_to_idx(self) -> Dict[str, int]:
        return self.source.class_to_idx

    @property
    def mean(self) -> Tuple[float, float, float]:
        """The pipeline's normalisation mean, ``[0, 1]`` units (for uint8 output)."""
        return self.spec.mean

    @property
    def std(self) -> Tuple[float, float, float]:
        """The pipeline's normalisation std, ``[0, 1]`` units (for uint8 output)."""
        return self.spec.std

    # -- checkpointing ----------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Plain data to resume from, for ``torch.save``.

        Holds the epoch, the batches already taken in it, the seed, the
        world, and (DALI backends, mid-epoch) this rank's DALI checkpoint, a
        short base64 string that restores the reader and the random ops
        exactly. The state is per rank: in DDP save each rank's.
        """
        mid_epoch = 0 < self._batches_done < len(self)
        finished = self._batches_done >= len(self)  # the last batch is out; the pass has not closed yet
        return {
            "epoch": self._epoch + 1 if finished else self._epoch,
            "batches_done": self._batches_done if mid_epoch else 0,
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "backend": self.backend,
            "backend_state": self._backend.state() if mid_epoch else None,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from :meth:`state_dict`: the next pass gives exactly the batches that would have come next.

        Raises:
            ValueError: the state comes from a loader with another seed or
                world size, or is malformed.
        """
        try:
            epoch, done, seed = int(state["epoch"]), int(state["batches_done"]), int(state["seed"])
            world_size = int(state.get("world_size", 1))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"load_state_dict: not a gpupipe loader state: {state!r}") from err
        if seed != self.seed:
            raise ValueError(f"load_state_dict: state has seed {seed}, this loader seed {self.seed}")
        if world_size != self.world_size:
            raise ValueError(
                f"load_state_dict: state comes from world_size {world_size}, this loader has {self.world_size}; "
                "the order of an epoch depends on the world size"
            )
        if not 0 <= done <= len(self):
            raise ValueError(f"load_state_dict: batches_done {done} is outside 0..{len(self)}")
        backend_state = state.get("backend_state")
        if backend_state is not None and (state.get("backend") != self.backend or state.get("rank", 0) != self.rank):
            warnings.warn(
                f"load_state_dict: the state comes from backend {state.get('backend')!r} rank {state.get('rank', 0)}, "
                f"this loader is {self.backend!r} rank {self.rank}: the order resumes exactly, the random "
                "augmentations of the rest of the epoch are drawn anew",
                stacklevel=2,
            )
            backend_state = None
        self._epoch = epoch
        self._epoch_pinned = False  # after the resumed pass, the next epoch follows
        self._resume = (epoch, done, backend_state)

    def __repr__(self) -> str:
        return (
            f"gpupipe.Loader(backend={self.backend!r}, device={str(self.device)!r}, "
            f"batch_size={self.batch_size}, batches={len(self)}, source={self.source!r})"
        )


def _resolve_device(device: DeviceArg) -> Optional[torch.device]:
    if device is None:
        return None
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device: cannot parse {device!r}: {err}") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or a CUDA device, got {str(device)!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but CUDA is not available")
    return device


def _without_bad_files(source: Source, on_error: str, max_pixels: int, skip_log: SkipLog) -> Source:
    """Scans the source's files (not packed shards, checked when packed) and drops or reports the bad ones.

    Raises:
        ValueError: with ``on_error="raise"``, listing every bad file and why.
    """
    if isinstance(source, Shards):
        return source
    bad = source.bad_files(max_pixels)
    if not bad:
        return source
    if on_error == "raise":
        listing = "\n".join(f"  {source.samples[i].path}: {reason}" for i, reason in list(bad.items())[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise ValueError(
            f"{len(bad)} of {len(source)} files cannot be used (pass on_error='skip' to leave them out):\n"
            f"{listing}{more}"
        )
    for i, reason in bad.items():
        skip_log.add(source.samples[i].path, reason)
    keep = [i for i in range(len(source)) if i not in bad]
    if not keep:
        raise ValueError(f"none of the {len(source)} files can be used; see the log for the reasons")
    return source.subset(keep)


def _resolve_world(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """``(rank, world_size)`` from the arguments, else from torch.distributed, else ``(0, 1)``."""
    import torch.distributed as dist

    in_group = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if in_group else 1
    if rank is None:
        rank = dist.get_rank() if in_group else 0
    _positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}")
    return rank, world_size


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def loader(
    source: Union[Source, str, os.PathLike],
    pipeline: Union[str, Sequence[Op]] = "train",
    *,
    batch_size: int,
    backend: str = "auto",
    device: DeviceArg = None,
    shuffle: bool = True,
    drop_last: bool = False,
    seed: int = 0,
    num_threads: Optional[int] = None,
    dtype: Union[None, str, torch.dtype] = None,
    channels_last: Optional[bool] = None,
    prefetch: int = 2,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    on_error: str = "raise",
    max_pixels: int = 100_000_000,
) -> Loader:
    """Builds a loader: the drop-in replacement for a ``DataLoader``.

    Args:
        source: an image folder (``root/<class>/<image>``), a list file, or a
            :class:`~gpupipe.sources.Source`.
        pipeline: ``"train"`` or ``"val"`` (ImageNet presets at 224 px) or a
            list of ops starting with ``Decode()``.
        batch_size: samples per batch (per process).
        backend: ``"auto"``, ``"dali"``, ``"dali-cpu"`` or ``"torchvision"``.
        device: where batches land; by default the current CUDA device if
            there is one, else the CPU.
        shuffle: a new order every epoch (from ``seed`` and the epoch).
        drop_last: drop the last, partial batch.
        seed: seeds the order and the random augmentations.
        num_threads: DALI threads or DataLoader workers; by default the CPU
            cores this process may use.
        dtype: ``float32`` (default), ``float16``, ``bfloat16`` (normalised) or
            ``uint8`` (unnormalised), as a name or a ``torch.dtype``.
        channels_last: images in channels_last memory format.
        prefetch: batches prepared ahead (DALI queue depth, or DataLoader
            prefetch factor per worker).
        rank, world_size: this process's share of the data; by default
            taken from ``torch.distributed`` when a process group is
            initialised, else ``0`` and ``1``. Every rank reads a disjoint
            part and yields the same number of batches.
        on_error: what to do with a file that cannot be used: ``"raise"``
            (stop with an error naming it; bad files found by the scan are
            all listed when the loader is built) or ``"skip"`` (leave it out,
            log it once, list it in :attr:`Loader.skipped`).
        max_pixels: images with more pixels are refused, without decoding
            them (decompression bombs).

    Returns:
        A :class:`Loader`.

    Raises:
        ValueError: a bad argument, named, before any work starts.
        ImportError: the backend's library is missing (the message gives the pip command).
    """
    _positive_int("batch_size", batch_size)
    _positive_int("prefetch", prefetch)
    if num_threads is not None:
        _positive_int("num_threads", num_threads, minimum=0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    device = _resolve_device(device)
    backend = backends.resolve(backend, device)
    if device is None:
        device = torch.device("cuda" if backend == "dali" or torch.cuda.is_available() else "cpu")
    if backend == "dali" and (device.type != "cuda" or not torch.cuda.is_available()):
        raise ValueError(
            f"backend 'dali' needs a CUDA device, got device={str(device)!r}"
            f"{'' if torch.cuda.is_available() else ' and CUDA is not available'}; use 'dali-cpu'"
        )
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())

    ops = presets.get(pipeline) if isinstance(pipeline, str) else list(pipeline)
    base = ops.pop() if ops and isinstance(ops[-1], Output) else Output()
    output = Output(
        dtype=base.dtype if dtype is None else dtype,
        channels_last=base.channels_last if channels_last is None else channels_last,
    )
    spec = build_spec(ops, output)

    rank, world_size = _resolve_world(rank, world_size)
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    _positive_int("max_pixels", max_pixels)
    source = as_source(source)
    skip_log = SkipLog()
    source = _without_bad_files(source, on_error, max_pixels, skip_log)
    samples = per_rank(len(source), world_size, drop_last)
    if drop_last and batch_size > samples:
        where = "" if world_size == 1 else f" per rank ({world_size} ranks)"
        raise ValueError(
            f"batch_size {batch_size} is larger than the {samples} samples{where} of the dataset "
            f"({len(source)} samples) with drop_last=True: no batch would be produced"
        )
    if num_threads is None:
        num_threads = backends.default_threads()
    if num_threads == 0 and backend != "torchvision":
        raise ValueError(f"num_threads=0 (decode in the main process) is for the torchvision backend, not {backend!r}")

    config = backends.RunConfig(
        batch_size=batch_size, drop_last=drop_last, device=device, num_threads=num_threads, prefetch=prefetch,
        on_error=on_error, skip_log=skip_log,
    )
    return Loader(source, spec, config, backend=backend, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)
