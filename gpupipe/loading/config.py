"""The loader's settings: one frozen ``LoaderConfig``, checked once when it is made, read by every layer.

[`gpupipe.loader`][gpupipe.loader] takes these as keyword arguments and builds the
config first, before any file is listed; the loader, its epoch bookkeeping
and the backends all read the same object (``loader.config``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks import positive_int
from ..errors import OnError
from ..fileio import DEFAULT_MAX_FILE_SIZE

#: ``preallocate``: ``"auto"``, ``None`` or ``(width, height)``.
Preallocate = str | None | tuple[int, int]
#: The largest seed: seeds are hashed as unsigned 64-bit words (``gpupipe.plan.seeding``).
MAX_SEED = 2**64 - 1
#: The largest epoch (``set_epoch``, a loaded state). Epochs travel as signed 64-bit ints on every
#: backend, and a DALI run reads ahead into the epochs after the one asked for: this leaves them room.
MAX_EPOCH = 2**62 - 1


def check_epoch(epoch: Any, where: str = "set_epoch") -> int:
    """An epoch, checked against the one bound every backend can take (``MAX_EPOCH``).

    Raises:
        ValueError: naming ``epoch`` and ``where`` it came from.
    """
    return positive_int(f"{where}: epoch", epoch, 0, MAX_EPOCH)


#: Bounds of the int settings: ``name -> (minimum, maximum)``. The maxima are what the layers below
#: take (DALI's 32-bit batch size and thread count, 64-bit sizes) and what a host can hold in flight.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "batch_size": (1, 2**31 - 1),
    "prefetch": (1, 1024),
    "max_pixels": (1, 2**62),
    "max_file_size": (1, 2**62),
    "seed": (0, MAX_SEED),
    "num_threads": (0, 1024),
    "log_every": (1, 2**62),
}


@dataclass(frozen=True)
class LoaderConfig:
    """How a loader reads its source (see [`gpupipe.loader`][gpupipe.loader] for each setting's meaning).

    Attributes:
        batch_size: samples per batch, per process.
        shuffle: a new order every epoch, from ``seed`` and the epoch.
        drop_last: drop the last, partial batch.
        even_batches: every rank reads as many samples (``False``: each sample once over all ranks).
        seed: seeds the order and the random augmentations (``0 .. 2**64 - 1``).
        num_threads: DALI threads or DataLoader workers; ``None``: chosen for this host
            (``gpupipe.env.default_threads``).
        prefetch: batches prepared ahead.
        on_error: ``raise`` or ``skip`` a sample that cannot be used (an [`OnError`][gpupipe.OnError] once made).
        max_pixels: images with more pixels are refused without decoding them.
        max_file_size: larger files are refused (bytes).
        hw_decoder_load: DALI on a GPU: the hardware JPEG decoder's share, or ``"auto"``.
        preallocate: DALI decoders' preallocation ``(width, height)``, ``"auto"`` or ``None``.
        log_every: log the statistics every this many batches (``None``: never).
        reduced_decode: torchvision: decode JPEGs at 1/2, 1/4 or 1/8 scale where a crop allows.

    Raises:
        ValueError: naming the first setting out of range (``INT_BOUNDS`` for the ints), when the
            config is made.
    """

    batch_size: int
    shuffle: bool = True
    drop_last: bool = False
    even_batches: bool = True
    seed: int = 0
    num_threads: int | None = None
    prefetch: int = 2
    on_error: str | OnError = OnError.RAISE
    max_pixels: int = 100_000_000
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    hw_decoder_load: float | str = "auto"
    preallocate: Preallocate = "auto"
    log_every: int | None = None
    reduced_decode: bool = True

    def __post_init__(self) -> None:
        for name, (minimum, maximum) in INT_BOUNDS.items():
            if getattr(self, name) is not None or name not in ("num_threads", "log_every"):
                object.__setattr__(self, name, positive_int(name, getattr(self, name), minimum, maximum))
        for name in ("shuffle", "drop_last", "even_batches", "reduced_decode"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        object.__setattr__(self, "on_error", OnError.parse(self.on_error))
        load = self.hw_decoder_load
        if load != "auto":  # a numpy float too; not a bool, NaN or a string
            if isinstance(load, (bool, np.bool_)) or not isinstance(load, numbers.Real) or not 0.0 <= load <= 1.0:
                raise ValueError(f"hw_decoder_load must be 'auto' or a number in [0, 1], got {load!r}")
            object.__setattr__(self, "hw_decoder_load", float(load))
        object.__setattr__(self, "preallocate", _preallocation(self.preallocate, self.max_pixels))


def _preallocation(value: Any, max_pixels: int) -> Preallocate:
    """``preallocate`` checked: ``(width, height)`` of ints >= 0 whose area is at most ``max_pixels``."""
    if value is None or value == "auto":
        return value
    try:  # ints (numpy ints too) >= 0
        width, height = (positive_int("preallocate", v, 0) for v in value)
        if width * height > max_pixels:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(
            f"preallocate must be 'auto', None or (width, height) of at most max_pixels={max_pixels} pixels, "
            f"got {value!r}"
        ) from None
    return width, height


__all__ = ["LoaderConfig", "positive_int", "check_epoch", "MAX_SEED", "MAX_EPOCH", "INT_BOUNDS"]
