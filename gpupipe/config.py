"""The loader's settings: one frozen :class:`LoaderConfig`, checked once when it is made, read by every layer.

:func:`gpupipe.loader` takes these as keyword arguments and builds the
config first, before any file is listed; the loader, its epoch bookkeeping
and the backends all read the same object (``loader.config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

import numpy as np

from .errors import OnError
from .fileio import DEFAULT_MAX_FILE_SIZE

#: ``preallocate``: ``"auto"``, ``None`` or ``(width, height)``.
Preallocate = Union[str, None, Tuple[int, int]]


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int, checked.

    Raises:
        ValueError: naming the argument, when ``value`` is not an int (a bool is not) ``>= minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class LoaderConfig:
    """How a loader reads its source (see :func:`gpupipe.loader` for each setting's meaning).

    Attributes:
        batch_size: samples per batch, per process.
        shuffle: a new order every epoch, from ``seed`` and the epoch.
        drop_last: drop the last, partial batch.
        even_batches: every rank reads as many samples (``False``: each sample once over all ranks).
        seed: seeds the order and the random augmentations.
        num_threads: DALI threads or DataLoader workers; ``None``: chosen for this host
            (:func:`gpupipe.env.default_threads`).
        prefetch: batches prepared ahead.
        on_error: ``raise`` or ``skip`` a sample that cannot be used (an :class:`~gpupipe.OnError` once made).
        max_pixels: images with more pixels are refused without decoding them.
        max_file_size: larger files are refused (bytes).
        hw_decoder_load: DALI on a GPU: the hardware JPEG decoder's share, or ``"auto"``.
        preallocate: DALI decoders' preallocation ``(width, height)``, ``"auto"`` or ``None``.
        log_every: log the statistics every this many batches (``None``: never).
        reduced_decode: torchvision: decode JPEGs at 1/2, 1/4 or 1/8 scale where a crop allows.

    Raises:
        ValueError: naming the first setting out of range, when the config is made.
    """

    batch_size: int
    shuffle: bool = True
    drop_last: bool = False
    even_batches: bool = True
    seed: int = 0
    num_threads: Optional[int] = None
    prefetch: int = 2
    on_error: Union[str, OnError] = OnError.RAISE
    max_pixels: int = 100_000_000
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    hw_decoder_load: Union[float, str] = "auto"
    preallocate: Preallocate = "auto"
    log_every: Optional[int] = None
    reduced_decode: bool = True

    def __post_init__(self) -> None:
        ints = {"batch_size": 1, "prefetch": 1, "max_pixels": 1, "max_file_size": 1, "seed": 0}
        for name, minimum in ints.items():
            object.__setattr__(self, name, positive_int(name, getattr(self, name), minimum))
        for name in ("num_threads", "log_every"):
            if getattr(self, name) is not None:
                object.__setattr__(
                    self, name, positive_int(name, getattr(self, name), 0 if name == "num_threads" else 1)
                )
        for name in ("shuffle", "drop_last", "even_batches", "reduced_decode"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        object.__setattr__(self, "on_error", OnError.parse(self.on_error))
        load = self.hw_decoder_load
        if load != "auto":
            if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0.0 <= load <= 1.0:
                raise ValueError(f"hw_decoder_load must be 'auto' or a number in [0, 1], got {load!r}")
            object.__setattr__(self, "hw_decoder_load", float(load))
        object.__setattr__(self, "preallocate", _preallocation(self.preallocate))


def _preallocate_error(value: Any) -> ValueError:
    return ValueError(f"preallocate must be 'auto', None or (width, height), got {value!r}")


def _preallocation(value: Any) -> Preallocate:
    if value is None or value == "auto":
        return value
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise _preallocate_error(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise _preallocate_error(value)
    return int(value[0]), int(value[1])


__all__ = ["LoaderConfig", "positive_int"]
