"""The steps ``gpupipe.loader`` takes after checking its settings (``LoaderConfig``).

Choose device and backend (``choose_device_and_backend``), apply the
loader's ``dtype`` / ``channels_last`` to the pipeline's output
(``output_of``), scan the files and leave out or refuse the bad ones
(``without_bad_files``), and check that a batch fits the data
(``check_batch_fits``).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import torch

from .. import backends, env
from ..errors import ErrorPolicy, Skipped, plural
from ..ops import Output
from ..sources import Source
from . import agreement
from .config import LoaderConfig
from .draws import Draws, epoch_samples
from .sampling import per_rank

logger = logging.getLogger("gpupipe.loader")

DeviceArg = None | str | int | torch.device


def resolve_device(device: DeviceArg) -> torch.device | None:
    if device is None:
        return None
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        said = device.strip().lower() if isinstance(device, str) else ""
        if said.split(":")[0] in ("gpu", "cuda", "nvidia", "cpu"):  # 'gpu', 'gpu:1', ' CUDA', 'CPU'
            rest = said.partition(":")[2]
            meant = "cpu" if said.startswith("cpu") else "cuda" + (f":{rest}" if rest else "")
            raise ValueError(f"device: cannot parse {device!r}: did you mean {meant!r}? (a torch.device)") from None
        raise ValueError(f"device: cannot parse {device!r}: {err}") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or a CUDA device, got {str(device)!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but CUDA is not available")
    return device


def choose_device_and_backend(
    device: DeviceArg, backend: str, num_threads: int | None
) -> tuple[torch.device, str, str]:
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


def output_of(pipeline_output: Output | None, dtype, channels_last) -> Output:
    """The loader's ``dtype`` / ``channels_last`` applied over the pipeline's own ``Output`` (if any)."""
    base = pipeline_output or Output()
    dtype = base.dtype if dtype is None else dtype
    channels_last = base.channels_last if channels_last is None else channels_last
    Output.checked(dtype, channels_last, where="loader")  # in the user's terms: the loader's arguments
    return Output(dtype, channels_last=channels_last)


def without_bad_files(
    source: Source,
    config: LoaderConfig,
    errors: ErrorPolicy,
    world: env.World | None = None,
    agreed: dict[str, Any] | None = None,
) -> Source:
    """Scans the source and drops or refuses (by ``errors``, the ``on_error`` policy) the samples that
    cannot be used, with the source's own problems (an image without its mask, ...).

    When ``world`` is the process group's own share, the ranks first compare their listings,
    settings and ``agreed`` (classes, labels, pipeline, backend: ``gpupipe.loading.identity.agreed``),
    then split the scan among them (``gpupipe.loading.agreement``); otherwise this process joins no
    collective.

    Raises:
        RanksDisagree: the ranks listed different files or were given different settings.
        SampleError: with ``on_error="raise"``, listing every bad sample and why.
        ValueError: with ``"skip"``, when no sample is left.
    """
    group = agreement.exchange_group(world) if world is not None else None
    agreement.check_ranks_agree(source.names, config, group, source.draws, agreed)
    with agreement.shared_by(group):
        result = source.scan(config.max_pixels, config.max_file_size)
    problems = list(source.problems)
    if not result.bad and not problems:
        return source
    entries = [Skipped(source.names[i], reason) for i, reason in sorted(result.bad.items())]
    counted = f"{len(result.bad)} of {plural(len(source), 'file')} cannot be used" if entries else ""
    unmatched = source.problem_summary() if problems else ""
    errors.apply(entries + problems, ", and ".join(x for x in (counted, unmatched) if x))
    if not result.bad:
        return source
    keep = np.setdiff1d(np.arange(len(source)), np.fromiter(result.bad, np.int64, len(result.bad)))
    if not len(keep):
        raise ValueError(f"none of the {plural(len(source), 'file')} can be used; see the log for the reasons")
    return source.subset(keep)


def with_draws(source: Source, weights: Any, num_samples: Any, replacement: Any) -> Source:
    """The source with its epochs drawn by ``weights`` (``gpupipe.loading.draws``), or without draws (those of
    another loader's source, given as ``loader.dataset``, left behind).

    Raises:
        ValueError: ``num_samples`` or ``replacement`` without ``weights``, a source of tars (read one tar at a
            time, in an order of its own; draws would read every tar for each batch), or bad ``weights``
            (``Draws.checked``), named.
    """
    if weights is None:
        if num_samples is not None or replacement is not True:
            raise ValueError("num_samples= and replacement= go with weights= (epochs drawn by weight)")
        if source.draws is None:
            return source
        source = copy.copy(source)  # another loader's source (its ``dataset``): its samples, not its draws
        source.draws = None
        return source
    if type(source).epoch_order is not Source.epoch_order:  # packed shards, WebDataset: an order of tars
        raise ValueError(
            f"weights=: epochs drawn by weight read loose files (a folder, a file list, annotations, a torchvision "
            f"dataset, or one read as it is); {type(source).__name__} reads tars one at a time, which draws would "
            "give up"
        )
    drawn = copy.copy(source)
    drawn.draws = Draws.checked(weights, num_samples, replacement, len(source))
    return drawn


#: The most pixels an image the pipeline makes may have (each op's output): 3 GiB of uint8 per image.
MAX_OUTPUT_PIXELS = 2**30


def check_sizes(spec: Any) -> None:
    """Every size the pipeline ``spec`` gives an image (each op's output, ``(h, w)``) within ``MAX_OUTPUT_PIXELS``: a
    larger one is allocated for every image of every batch, or overflows the tensor's size, at the first batch.

    Raises:
        ValueError: naming the op and its size.
    """
    for op, size in zip(spec.ops, spec.sizes):
        if size is not None and size[0] * size[1] > MAX_OUTPUT_PIXELS:
            raise ValueError(
                f"{op!r}: an output of {size[0]} x {size[1]} pixels is more than an image may have "
                f"({MAX_OUTPUT_PIXELS:,} pixels, 3 GiB of uint8 for each image of each batch); give a smaller size"
            )


def check_batch_fits(source: Source, config: LoaderConfig, world_size: int) -> None:
    """``drop_last=True`` with fewer samples per rank than a batch would yield nothing.

    Raises:
        ValueError: naming the batch size and the samples per rank.
    """
    samples = per_rank(
        epoch_samples(source),
        world_size,
        drop_last=config.drop_last,
        even_batches=config.even_batches,
        rank=world_size - 1,
    )
    if config.drop_last and config.batch_size > samples:
        where = "" if world_size == 1 else f" per rank ({world_size} ranks)"
        total = "" if world_size == 1 else f" ({plural(epoch_samples(source), 'sample')} in all)"
        raise ValueError(
            f"batch_size {config.batch_size} is larger than the {plural(samples, 'sample')}{where} of the dataset"
            f"{total} with drop_last=True: no batch would be produced"
        )


__all__ = [
    "choose_device_and_backend",
    "output_of",
    "without_bad_files",
    "check_batch_fits",
    "check_sizes",
    "with_draws",
]
