"""Backends compile a :class:`~gpupipe.spec.PipelineSpec` and read one epoch at a time.

Each backend module imports its heavy library lazily, so ``import gpupipe``
works without DALI. ``"auto"`` picks ``dali`` on a CUDA device with DALI
installed, else ``dali-cpu`` where DALI imports, else ``torchvision``.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Protocol, Sequence

import torch

from ..batch import Batch
from ..scan import SkipLog
from ..sources import Source
from ..spec import PipelineSpec

logger = logging.getLogger(__name__)

BACKENDS = ("dali", "dali-cpu", "torchvision")

#: What each backend needs, and the pip command that installs it.
_REQUIREMENTS = {
    "dali": ("nvidia.dali", "pip install nvidia-dali-cuda120"),
    "dali-cpu": ("nvidia.dali", "pip install nvidia-dali-cuda120"),
    "torchvision": ("torchvision", "pip install torchvision"),
}


@dataclass(frozen=True)
class RunConfig:
    """How a backend runs, decided by the loader.

    Attributes:
        batch_size: samples per batch.
        drop_last: drop the last, partial batch of an epoch.
        device: where batches land.
        num_threads: DALI CPU threads, or DataLoader worker processes.
        prefetch: batches prepared ahead.
        on_error: ``"raise"`` or ``"skip"`` a file that fails to decode.
        skip_log: records what was skipped.
    """

    batch_size: int
    drop_last: bool
    device: torch.device
    num_threads: int
    prefetch: int = 2
    on_error: str = "raise"
    skip_log: SkipLog = field(default_factory=SkipLog)


class Backend(Protocol):
    """What the loader asks of a backend."""

    name: str

    def iter_epoch(
        self, indices: Sequence[int], seed: int, *, skip_batches: int = 0, state: Optional[str] = None
    ) -> Iterator[Batch]:
        """Yields the batches of ``source.samples[i] for i in indices``, in that order.

        Args:
            indices: sample indices, in reading order.
            seed: seeds every random op of this epoch.
            skip_batches: batches of ``indices`` already delivered (a resume).
            state: what :meth:`state` returned when those batches were out;
                restores the random ops exactly where the backend needs it.
        """

    def state(self) -> Optional[str]:
        """A resume token for the epoch being iterated (``None`` if none is needed)."""


def default_threads() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def require(backend: str) -> None:
    """Imports what ``backend`` needs, or raises ImportError naming the pip command."""
    module, command = _REQUIREMENTS[backend]
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"backend {backend!r} needs the package {module!r}, which failed to import ({err}); "
            f"install it with: {command}"
        ) from err


def available(backend: str) -> bool:
    """Whether ``backend``'s library imports (and, for ``dali``, CUDA is there)."""
    if backend == "dali" and not torch.cuda.is_available():
        return False
    try:
        require(backend)
    except ImportError:
        return False
    return True


_auto_logged: set = set()


def resolve(backend: str, device: Optional[torch.device]) -> str:
    """Turns ``"auto"`` into a backend name; checks any other name.

    Args:
        backend: ``"auto"`` or one of :data:`BACKENDS`.
        device: the requested device, or ``None`` for the default.

    Raises:
        ValueError: an unknown backend name.
    """
    if backend != "auto":
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose 'auto' or one of {list(BACKENDS)}")
        return backend
    wants_gpu = device.type == "cuda" if device is not None else torch.cuda.is_available()
    if wants_gpu and available("dali"):
        choice, why = "dali", "CUDA and DALI are available"
    elif available("dali-cpu"):
        choice, why = "dali-cpu", "DALI is installed" + ("" if wants_gpu else "; no CUDA device requested")
    else:
        choice, why = "torchvision", "DALI is not installed (pip install nvidia-dali-cuda120)"
    if choice not in _auto_logged:
        _auto_logged.add(choice)
        logger.info("gpupipe backend='auto' chose %r: %s", choice, why)
    return choice


def create(backend: str, source: Source, spec: PipelineSpec, config: RunConfig) -> Backend:
    """Builds backend ``backend`` (a resolved name) for ``source`` and ``spec``."""
    require(backend)
    if backend in ("dali", "dali-cpu"):
        from .dali import DaliBackend

        return DaliBackend(source, spec, config, gpu=backend == "dali")
    from .torchvision import TorchvisionBackend

    return TorchvisionBackend(source, spec, config)


__all__: List[str] = ["BACKENDS", "RunConfig", "Backend", "resolve", "create", "available", "require", "default_threads"]
