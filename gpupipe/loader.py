"""The PyTorch-facing loader: a drop-in for ``torch.utils.data.DataLoader``.

:func:`loader` checks every argument before any work starts (see
:mod:`gpupipe.options`); :class:`Loader` decides each epoch's order (the
same on every backend), keeps the epoch bookkeeping (:mod:`gpupipe.epochs`)
and hands ``(images, targets)`` batches per the batch contract from
whichever backend runs the pipeline.
"""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from . import backends, options, presets
from .backends import EpochRead
from .batch import Batch
from .batchaug import BatchMixer
from .epochs import EpochCursor
from .errors import Skipped, SkipLog
from .fileio import DEFAULT_MAX_FILE_SIZE
from .ops import Op, Output
from .sampling import RankShare, batches_per_epoch, per_rank, split
from .seeding import batch_key
from .sources import Source, as_source
from .spec import PipelineSpec, build_spec
from .stats import LoadStats, StatsSummary

logger = logging.getLogger(__name__)

#: The loader state format (``state_dict()["format"]``).
STATE_FORMAT = 2


class Loader:
    """Iterates ``(images, targets)`` batches of a source through a pipeline.

    Use :func:`gpupipe.loader` to build one. Batches follow the contract:
    ``images`` ``(B, 3, H, W)`` on :attr:`device` in the requested dtype
    (float normalised, or uint8), targets on the same device: ``(B,)`` int64
    labels, ``(B, C)`` float32 multi-hot or soft targets, ``(B, H, W)`` int64
    masks, or a dict of padded ``boxes`` and ``labels``.

    Attributes:
        source: where the samples come from (bad files already left out).
        spec: the checked pipeline.
        backend: the backend's name (``"dali"``, ``"dali-cpu"``, ``"torchvision"``).
        backend_reason: why ``backend="auto"`` chose it.
        device: where batches land.
        rank, world_size: this process's part of the data (see :mod:`gpupipe.sampling`).
        batch_size, drop_last, even_batches, shuffle, seed: as given; ``batch_size`` is per rank.
    """

    def __init__(self, source: Source, spec: PipelineSpec, config: backends.RunConfig, *, backend: str,
                 shuffle: bool, rank: int = 0, world_size: int = 1, even_batches: bool = True,
                 backend_reason: str = "", log_every: Optional[int] = None) -> None:
        self.source = source
        self.spec = spec
        self.batch_size = config.batch_size
        self.drop_last = config.drop_last
        self.device = config.device
        self.on_error = config.on_error
        self.shuffle = shuffle
        self.seed = config.seed
        self.rank = rank
        self.world_size = world_size
        self.even_batches = even_batches
        self.backend_reason = backend_reason
        self._skip_log = config.skip_log
        self._backend = backends.create(backend, source, spec, config)
        self.backend = self._backend.name
        self._mixer = BatchMixer(spec.batch_ops, len(source.classes)) if spec.batch_ops else None
        self._cursor = EpochCursor()
        self._stats = LoadStats(self.backend, self.device.type == "cuda", log_every)
        self._live: Optional[weakref.ref] = None
        prepare = getattr(self._backend, "prepare", None)
        if prepare is not None and len(self):
            prepare(self._read(self._cursor.epoch), self._read)

    # -- the DataLoader surface -------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank unless ``even_batches=False``)."""
        samples = per_rank(len(self.source), self.world_size, drop_last=self.drop_last,
                           even_batches=self.even_batches, rank=self.rank)
        return batches_per_epoch(samples, self.batch_size, self.drop_last)

    def rank_share(self, epoch: Optional[int] = None) -> RankShare:
        """This rank's samples for ``epoch`` (default: the next or current pass), with padding counts."""
        epoch = self._cursor.epoch if epoch is None else epoch
        order = self.source.epoch_order(seed=self.seed, epoch=epoch, shuffle=self.shuffle)
        return split(order, rank=self.rank, world_size=self.world_size, drop_last=self.drop_last,
                     even_batches=self.even_batches)

    def shard(self, epoch: Optional[int] = None) -> RankShare:
        """Deprecated name of :meth:`rank_share`."""
        warnings.warn("Loader.shard() is now Loader.rank_share()", DeprecationWarning, stacklevel=2)
        return self.rank_share(epoch)

    def _read(self, epoch: int) -> EpochRead:
        return EpochRead(epoch=epoch, share=self.rank_share(epoch), batches=len(self))

    def __iter__(self) -> Iterator[Batch]:
        live = self._live() if self._live is not None else None
        if live is not None:
            live.close()  # a new pass ends the previous one
        generator = self._pass()
        self._live = weakref.ref(generator)  # weak: the pass refers to the loader, not the other way round
        return generator

    def _pass(self) -> Iterator[Batch]:
        current = self._cursor.begin(len(self))
        read = self._read(current.epoch)
        if read.share.padded and self.rank == 0:
            logger.debug("epoch %d: %d samples repeated to give %d ranks equal shares",
                         current.epoch, read.share.padded, self.world_size)
        batches = self._backend.iter_epoch(read, current.start, upcoming=self._read)
        self._stats.pass_started()
        try:
            while current.live and current.done < current.total:
                asked = self._stats.asking()
                try:
                    images, targets = next(batches)
                except StopIteration:
                    raise RuntimeError(f"the {self.backend} backend ended epoch {current.epoch} after "
                                       f"{current.done} of {current.total} batches") from None
                if self._mixer is not None:  # MixUp / CutMix: soft targets (B, num_classes)
                    images, targets = self._mixer(images, targets, key=batch_key(
                        self.seed, current.epoch, self.rank, current.done))
                current.done += 1
                self._stats.delivered(asked, int(images.shape[0]))
                yield images, targets
        finally:
            current.live = False
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose order and augmentations the next pass reads.

        The order is a function of ``(seed, epoch)`` alone. Without calls to
        ``set_epoch`` each pass reads the epoch after the previous pass's
        (see :mod:`gpupipe.epochs` for the whole rule).
        """
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"set_epoch: epoch must be an int >= 0, got {epoch!r}")
        self._cursor.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way, else the epoch the next pass reads."""
        return self._cursor.epoch

    @property
    def skipped(self) -> List[Skipped]:
        """Every sample left out (``on_error="skip"``), with the reason: found by the
        scan when the loader was built, or when it failed while loading."""
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

    def stats(self, reset: bool = False) -> StatsSummary:
        """How long the consumer waited for batches and how long it worked between them.

        Args:
            reset: start counting afresh after this call.

        Returns:
            Batches, images/s, the share of time spent waiting for data and
            the verdict the bench would give (``"input-bound"`` when at least
            10 % of the time is spent waiting), with a suggestion.
        """
        summary = self._stats.summary()
        if reset:
            self._stats.reset()
        return summary

    # -- checkpointing ----------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Plain data to resume from, for ``torch.save``: where the next batch comes from.

        Holds the epoch and the batches already taken in it (see
        :mod:`gpupipe.epochs`), the seed and the world. Augmentations are
        drawn from ``(seed, epoch, slot)``, so this is all a resume needs to
        repeat the rest of the epoch exactly, on any backend. The state is
        per rank: in DDP save each rank's.
        """
        epoch, done = self._cursor.state()
        return {"format": STATE_FORMAT, "epoch": epoch, "batches_done": done, "seed": self.seed, "rank": self.rank,
                "world_size": self.world_size, "backend": self.backend}

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
        if epoch < 0 or not 0 <= done <= len(self):
            raise ValueError(f"load_state_dict: batches_done {done} is outside 0..{len(self)} (epoch {epoch})")
        self._cursor.load(epoch, done)

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

    def __enter__(self) -> "Loader":
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
        return (f"gpupipe.Loader(backend={self.backend!r}, device={str(self.device)!r}, "
                f"batch_size={self.batch_size}, batches={len(self)}, source={self.source!r})")


def loader(
    source: Union[Source, str, os.PathLike],
    pipeline: Union[str, Sequence[Op]] = "train",
    *,
    batch_size: int,
    backend: str = "auto",
    device: options.DeviceArg = None,
    shuffle: bool = True,
    drop_last: bool = False,
    even_batches: bool = True,
    seed: int = 0,
    num_threads: Optional[int] = None,
    dtype: Union[None, str, torch.dtype] = None,
    channels_last: Optional[bool] = None,
    prefetch: int = 2,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    on_error: str = "raise",
    max_pixels: int = 100_000_000,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    hw_decoder_load: float = 0.65,
    preallocate: Union[str, None, Tuple[int, int]] = "auto",
    log_every: Optional[int] = None,
    reduced_decode: bool = True,
) -> Loader:
    """Builds a loader: the drop-in replacement for a ``DataLoader``.

    Args:
        source: an image folder (``root/<class>/<image>``), a list file, a
            packed folder, or a :class:`~gpupipe.sources.Source`.
        pipeline: ``"train"`` or ``"val"`` (ImageNet presets at 224 px) or a
            list of ops starting with ``Decode()``.
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
            cores this process may use, divided by ``LOCAL_WORLD_SIZE`` under torchrun.
        dtype: ``float32`` (default), ``float16``, ``bfloat16`` (normalised) or
            ``uint8`` (unnormalised), as a name or a ``torch.dtype``.
        channels_last: images in channels_last memory format.
        prefetch: batches prepared ahead (DALI queue depth, or DataLoader
            prefetch factor per worker).
        rank, world_size: this process's share of the data; by default
            taken from ``torch.distributed`` when a process group is
            initialised, else ``0`` and ``1``.
        on_error: what to do with a sample that cannot be used: ``"raise"``
            (stop with an error naming it; bad files found by the scan are
            all listed when the loader is built) or ``"skip"`` (leave it out,
            log it once, list it in :attr:`Loader.skipped`).
        max_pixels: images with more pixels are refused, without decoding
            them (decompression bombs).
        max_file_size: larger files are refused (bytes, default 1 GiB).
        hw_decoder_load: DALI on a GPU: share of JPEGs given to the hardware decoder.
        preallocate: DALI decoders' preallocation ``(width, height)``;
            ``"auto"`` takes the 99th percentile of the scanned image sizes,
            ``None`` grows buffers at run time.
        log_every: log the loader's statistics every this many batches (logger ``gpupipe.stats``).
        reduced_decode: torchvision backend: when a ``RandomResizedCrop`` right after ``Decode``
            has a window at least 2, 4 or 8 times its output size, decode the JPEG at 1/2, 1/4 or
            1/8 scale in the DCT domain (faster, itself an area-averaging downscale; pixels differ
            slightly from a full decode). ``False`` decodes every pixel.

    Returns:
        A :class:`Loader`.

    Raises:
        ValueError: a bad argument, named, before any work starts.
        ImportError: the backend's library is missing (the message gives the pip command).
    """
    args = options.check_arguments(
        batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, even_batches=even_batches, seed=seed,
        num_threads=num_threads, prefetch=prefetch, on_error=on_error, max_pixels=max_pixels,
        max_file_size=max_file_size, hw_decoder_load=hw_decoder_load, preallocate=preallocate, log_every=log_every,
        reduced_decode=reduced_decode)
    device, backend, why = options.choose_device_and_backend(device, backend, num_threads)
    rank, world_size = options.resolve_world(rank, world_size)
    ops = presets.get(pipeline) if isinstance(pipeline, str) else list(pipeline)
    own_output = ops.pop() if ops and isinstance(ops[-1], Output) else None
    output = options.output_of(own_output, dtype, channels_last)
    build_spec(ops, output, target=None)  # the structure, before the source is listed

    source = as_source(source)
    spec = build_spec(ops, output, target=source.kind, ignore_index=source.ignore_index)
    backends.check_lowerings(backend, spec)
    skip_log = SkipLog()
    source = options.without_bad_files(source, args, skip_log)
    options.check_batch_fits(source, args, world_size)

    config = backends.RunConfig(
        batch_size=args.batch_size, drop_last=args.drop_last, device=device,
        num_threads=backends.default_threads() if args.num_threads is None else args.num_threads, seed=args.seed,
        prefetch=args.prefetch, on_error=args.on_error, skip_log=skip_log,
        decoder=options.decoder_settings(args, source), reduced_decode=args.reduced_decode,
    )
    return Loader(source, spec, config, backend=backend, shuffle=args.shuffle, rank=rank, world_size=world_size,
                  even_batches=args.even_batches, backend_reason=why, log_every=args.log_every)
