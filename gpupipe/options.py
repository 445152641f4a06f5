"""The loader's arguments, checked before any work, and the steps that turn them into parts.

:func:`gpupipe.loader` reads as a short list of steps: check every cheap
argument (:func:`check_arguments`), choose device and backend
(:func:`choose_device_and_backend`), check the pipeline's structure, list
the source, check that the pipeline and backend carry its targets, scan
the files (:func:`without_bad_files`), then build the backend.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

import numpy as np
import torch

from . import backends, env
from .errors import OnError, SkipLog, Skipped, listing, plural
from .ops import Output
from .sampling import per_rank
from .sources import Source

logger = logging.getLogger("gpupipe.loader")

DeviceArg = Union[None, str, int, torch.device]


@dataclass(frozen=True)
class Arguments:
    """The loader's checked arguments (see :func:`gpupipe.loader`)."""

    batch_size: int
    shuffle: bool
    drop_last: bool
    even_batches: bool
    seed: int
    num_threads: Optional[int]
    prefetch: int
    on_error: OnError
    max_pixels: int
    max_file_size: int
    hw_decoder_load: Union[float, str]
    preallocate: Union[str, None, Tuple[int, int]]
    log_every: Optional[int]
    reduced_decode: bool = True


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_arguments(*, batch_size, shuffle, drop_last, even_batches, seed, num_threads, prefetch, on_error,
                    max_pixels, max_file_size, hw_decoder_load, preallocate, log_every, reduced_decode=True) -> Arguments:
    """Checks every argument that needs no file and no library.

    Raises:
        ValueError: naming the argument and the value.
    """
    positive_int("batch_size", batch_size)
    positive_int("prefetch", prefetch)
    positive_int("max_pixels", max_pixels)
    positive_int("max_file_size", max_file_size)
    if num_threads is not None:
        positive_int("num_threads", num_threads, minimum=0)
    positive_int("seed", seed, minimum=0)
    if log_every is not None:
        positive_int("log_every", log_every)
    for name, flag in (("shuffle", shuffle), ("drop_last", drop_last), ("even_batches", even_batches),
                       ("reduced_decode", reduced_decode)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    if hw_decoder_load != "auto" and (isinstance(hw_decoder_load, bool) or
                                      not isinstance(hw_decoder_load, (int, float)) or
                                      not 0.0 <= hw_decoder_load <= 1.0):
        raise ValueError(f"hw_decoder_load must be 'auto' or a number in [0, 1], got {hw_decoder_load!r}")
    if not (preallocate is None or preallocate == "auto" or (
            isinstance(preallocate, (tuple, list)) and len(preallocate) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in preallocate))):
        raise ValueError(f"preallocate must be 'auto', None or (width, height), got {preallocate!r}")
    return Arguments(
        batch_size=int(batch_size), shuffle=shuffle, drop_last=drop_last, even_batches=even_batches, seed=int(seed),
        num_threads=num_threads, prefetch=int(prefetch), on_error=OnError.parse(on_error), max_pixels=int(max_pixels),
        max_file_size=int(max_file_size), hw_decoder_load=hw_decoder_load if hw_decoder_load == "auto" else float(hw_decoder_load),
        preallocate=tuple(preallocate) if isinstance(preallocate, list) else preallocate, log_every=log_every,
        reduced_decode=reduced_decode,
    )


def resolve_device(device: DeviceArg) -> Optional[torch.device]:
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


def choose_device_and_backend(device: DeviceArg, backend: str, num_threads: Optional[int]) -> Tuple[torch.device, str, str]:
    """``(device, backend, why)``: the device batches land on and the backend that makes them.

    Raises:
        ValueError: an unknown backend, a device that does not exist, a backend
            that cannot run on it, or ``num_threads=0`` for a backend that cannot decode in the main process.
        ImportError: the backend's package is missing (naming the pip command).
    """
    wanted = resolve_device(device)
    name, why = backends.resolve(backend, wanted)
    backends.require(name)
    info = backends.REGISTRY[name]
    if wanted is None:
        wanted = torch.device("cuda" if info.needs_cuda or torch.cuda.is_available() else "cpu")
    if info.needs_cuda and (wanted.type != "cuda" or not torch.cuda.is_available()):
        got = "no device (and CUDA is not available)" if device is None else f"device={str(wanted)!r}"
        raise ValueError(f"backend {name!r} needs a CUDA device, got {got}; use 'dali-cpu'")
    if num_threads == 0 and not info.main_process:
        raise ValueError(f"num_threads=0 (decode in the main process) is for the torchvision backend, not {name!r}")
    if wanted.type == "cuda" and wanted.index is None:
        wanted = torch.device("cuda", torch.cuda.current_device())
    return wanted, name, why


@dataclass(frozen=True)
class World:
    """This process's share of the data: ``rank`` of ``world_size``, and where it came from.

    Attributes:
        rank, world_size: the share.
        origin: ``"argument"`` (given to :func:`gpupipe.loader`), ``"group"`` (an
            initialised process group), or ``"launcher"`` (``RANK`` / ``WORLD_SIZE``, or
            ``(0, 1)``, before any group existed: replaced by the group's once there is one).
    """

    rank: int
    world_size: int
    origin: str

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.world_size}"


def resolve_world(rank: Optional[int], world_size: Optional[int]) -> World:
    """The share from the arguments, else from torch.distributed, else from the launcher, else ``(0, 1)``.

    Raises:
        ValueError: a rank outside ``[0, world_size)`` or a world size below 1.
    """
    group = env.process_group()
    default_rank, default_world = group if group is not None else env.rank_and_world()
    origin = "argument" if rank is not None or world_size is not None else "group" if group is not None else "launcher"
    world_size = default_world if world_size is None else world_size
    rank = (default_rank if default_rank < world_size else 0) if rank is None else rank
    positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}")
    return World(rank, int(world_size), origin)


def settle_world(world: World, group: Optional[Tuple[int, int]]) -> World:
    """The share to read once an initialised process group says ``group`` (``(rank, world_size)``, or ``None``).

    A launcher's share gives way to the group's; an explicit ``world_size=1``
    (this process reads everything, as asked) stands; any other share that
    disagrees with the group is refused, since each rank would read the wrong part.

    Raises:
        ValueError: one line naming both shares.
    """
    if group is None:
        return world
    if group == (world.rank, world.world_size) or world.origin == "launcher":
        return World(group[0], group[1], "group" if world.origin == "launcher" else world.origin)
    if world.origin == "argument" and world.world_size == 1:
        return world
    how = "was given" if world.origin == "argument" else "took from torch.distributed when it was built"
    raise ValueError(f"this gpupipe loader {how} {world}, but the initialised process group has rank {group[0]} "
                     f"of {group[1]}: its ranks would read the wrong shares; build the loader with the group's rank "
                     f"and world size (or leave both out)")


def output_of(pipeline_output: Optional[Output], dtype, channels_last) -> Output:
    """The loader's ``dtype`` / ``channels_last`` applied over the pipeline's own ``Output`` (if any)."""
    base = pipeline_output or Output()
    return Output(base.dtype if dtype is None else dtype,
                  channels_last=base.channels_last if channels_last is None else channels_last)


def without_bad_files(source: Source, args: Arguments, skip_log: SkipLog) -> Source:
    """Scans the source and drops or reports the samples that cannot be used.

    Raises:
        ValueError: with ``on_error="raise"``, listing every bad sample and why;
            with ``"skip"``, when no sample is left.
    """
    result = source.scan(args.max_pixels, args.max_file_size)
    problems = list(source.problems)
    if not result.bad and not problems:
        return source
    entries = [_skipped(source, i, reason) for i, reason in sorted(result.bad.items())]
    if args.on_error is OnError.RAISE:
        counted = f"{len(result.bad)} of {plural(len(source), 'file')} cannot be used" if entries else ""
        unmatched = source.problem_summary() if problems else ""
        raise ValueError(f"{', and '.join(x for x in (counted, unmatched) if x)} (pass on_error='skip' to leave them "
                         f"out):\n{listing(entries + problems)}")
    for entry in entries + problems:
        skip_log.add(entry)
    if not result.bad:
        return source
    keep = np.setdiff1d(np.arange(len(source)), np.fromiter(result.bad, np.int64, len(result.bad)))
    if not len(keep):
        raise ValueError(f"none of the {plural(len(source), 'file')} can be used; see the log for the reasons")
    return source.subset(keep)


def _skipped(source: Source, index: int, reason: str) -> Skipped:
    return Skipped(source.names[index], reason)


def check_batch_fits(source: Source, args: Arguments, world_size: int) -> None:
    """``drop_last=True`` with fewer samples per rank than a batch would yield nothing.

    ``args`` may be anything with ``batch_size``, ``drop_last`` and ``even_batches`` (a loader, when its
    world is settled after it was built).

    Raises:
        ValueError: naming the batch size and the samples per rank.
    """
    samples = per_rank(len(source), world_size, drop_last=args.drop_last, even_batches=args.even_batches,
                       rank=world_size - 1)
    if args.drop_last and args.batch_size > samples:
        where = "" if world_size == 1 else f" per rank ({world_size} ranks)"
        total = "" if world_size == 1 else f" ({plural(len(source), 'sample')} in all)"
        raise ValueError(
            f"batch_size {args.batch_size} is larger than the {plural(samples, 'sample')}{where} of the dataset"
            f"{total} with drop_last=True: no batch would be produced"
        )


def decoder_settings(args: Arguments, source: Source) -> backends.DecoderSettings:
    """DALI decoder settings; ``preallocate="auto"`` takes the 99th percentile of the scanned image sizes."""
    if args.preallocate is None:
        width = height = 0
    elif args.preallocate == "auto":
        sizes = source.sizes()
        sizes = sizes[sizes[:, 0] > 0]
        height, width = (int(v) for v in np.percentile(sizes, 99, axis=0)) if len(sizes) else (0, 0)
    else:
        width, height = args.preallocate
    return backends.DecoderSettings(hw_decoder_load=args.hw_decoder_load, width_hint=width, height_hint=height)


__all__ = ["Arguments", "check_arguments", "choose_device_and_backend", "World", "resolve_world", "settle_world",
           "output_of", "without_bad_files", "check_batch_fits", "decoder_settings"]
