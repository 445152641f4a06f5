"""The backend registry: each backend's name, needs and factory, in one table.

Each backend module imports its heavy library lazily, so ``import gpupipe``
works without DALI. ``"auto"`` picks ``dali`` on a CUDA device with DALI
installed, else ``dali-cpu`` where DALI imports, else ``torchvision``.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Protocol, Tuple, Union

import torch

from .. import env
from ..errors import OnError, SkipLog
from ..sampling import RankShare
from ..sources import Source
from ..spec import PipelineSpec

logger = logging.getLogger(__name__)


def dali_package() -> str:
    """The DALI wheel matching this torch: ``nvidia-dali-cuda130`` for a CUDA 13 build, else ``-cuda120``."""
    cuda = torch.version.cuda or ""
    return "nvidia-dali-cuda130" if cuda.split(".")[0] == "13" else "nvidia-dali-cuda120"


@dataclass(frozen=True)
class BackendInfo:
    """What a backend is and needs.

    Attributes:
        name: its name in ``gpupipe.loader(backend=...)``.
        module: the package it imports.
        needs_cuda: runs only with a CUDA device.
        main_process: can decode in the main process (``num_threads=0``).
        factory: ``"module:Class"``, imported when the backend is built.
        options: keyword arguments for the factory.
    """

    name: str
    module: str
    needs_cuda: bool
    main_process: bool
    factory: str
    options: Tuple[Tuple[str, object], ...] = ()

    @property
    def pip(self) -> str:
        """The command that installs the backend's package."""
        return f"pip install {dali_package()}" if self.module == "nvidia.dali" else f"pip install {self.module}"


REGISTRY: Dict[str, BackendInfo] = {
    info.name: info for info in (
        BackendInfo("dali", "nvidia.dali", needs_cuda=True, main_process=False,
                    factory="gpupipe.backends.dali:DaliBackend", options=(("gpu", True),)),
        BackendInfo("dali-cpu", "nvidia.dali", needs_cuda=False, main_process=False,
                    factory="gpupipe.backends.dali:DaliBackend", options=(("gpu", False),)),
        BackendInfo("torchvision", "torchvision", needs_cuda=False, main_process=True,
                    factory="gpupipe.backends.torchvision:TorchvisionBackend"),
    )
}
BACKENDS = tuple(REGISTRY)


@dataclass(frozen=True)
class DecoderSettings:
    """DALI decoder settings (see the loader's ``decoder`` argument).

    Attributes:
        hw_decoder_load: share of JPEGs sent to the GPU's hardware decoder
            (where it has one); the rest go to the CUDA decoder. ``"auto"``: measured
            on the first batches (:mod:`gpupipe.backends.dali.calibrate`).
        width_hint, height_hint: sizes the decoders preallocate for (0: grown at run time).
    """

    hw_decoder_load: Union[float, str] = "auto"
    width_hint: int = 0
    height_hint: int = 0


@dataclass(frozen=True)
class RunConfig:
    """How a backend runs, decided by the loader.

    Attributes:
        batch_size: samples per batch.
        drop_last: drop the last, partial batch of an epoch.
        device: where batches land.
        num_threads: DALI CPU threads, or DataLoader worker processes.
        seed: the loader's seed (the planner draws every augmentation from it).
        prefetch: batches prepared ahead.
        on_error: ``raise`` or ``skip`` a sample that fails to decode.
        skip_log: records what was skipped.
        decoder: DALI decoder settings.
        reduced_decode: torchvision backend: decode JPEGs at 1/2, 1/4 or 1/8 scale when a
            RandomResizedCrop window is at least that many times its output size.
    """

    batch_size: int
    drop_last: bool
    device: torch.device
    num_threads: int
    seed: int = 0
    prefetch: int = 2
    on_error: OnError = OnError.RAISE
    skip_log: SkipLog = field(default_factory=SkipLog)
    decoder: DecoderSettings = DecoderSettings()
    reduced_decode: bool = True


@dataclass(frozen=True)
class EpochRead:
    """One rank's reading of one epoch: what :meth:`Backend.iter_epoch` is given.

    Attributes:
        epoch: the epoch number (it keys every sample's augmentation).
        share: the rank's samples and their slots.
        batches: batches in the epoch (a partial last one counts unless ``drop_last``).
    """

    epoch: int
    share: RankShare
    batches: int


class Backend(Protocol):
    """What the loader asks of a backend."""

    name: str

    def iter_epoch(self, read: EpochRead, start: int = 0,
                   upcoming: Optional[Callable[[int], EpochRead]] = None) -> Iterator:
        """Yields batches ``start, start + 1, ...`` of ``read``, each as ``(images, targets)``.

        ``upcoming(epoch)`` gives later epochs, which the backend may read ahead
        (a loop without ``set_epoch`` reads ``read.epoch + 1`` next).
        """

    def close(self) -> None:
        """Frees what the backend holds (pipelines, worker processes).

        A backend may also offer ``prepare(read, upcoming)``: start preparing the
        epoch a new loader is likely to read first.
        """


def default_threads() -> int:
    """The CPU cores this process may use, shared among the processes of this job on this host
    (:func:`gpupipe.env.default_threads`)."""
    return env.default_threads()


def require(backend: str) -> None:
    """Imports what ``backend`` needs, or raises ImportError naming the pip command."""
    info = REGISTRY[backend]
    try:
        importlib.import_module(info.module)
    except ImportError as err:
        raise ImportError(
            f"backend {backend!r} needs the package {info.module!r}, which failed to import ({err}); "
            f"install it with: {info.pip}"
        ) from err


def available(backend: str) -> bool:
    """Whether ``backend``'s library imports (and CUDA is there where it is needed)."""
    if REGISTRY[backend].needs_cuda and not torch.cuda.is_available():
        return False
    try:
        require(backend)
    except ImportError:
        return False
    return True


_auto_logged: set = set()


def resolve(backend: str, device: Optional[torch.device]) -> Tuple[str, str]:
    """Turns ``"auto"`` into a backend name; checks any other name.

    Args:
        backend: ``"auto"`` or one of :data:`BACKENDS`.
        device: the requested device, or ``None`` for the default.

    Returns:
        ``(name, why)``: the backend and, for ``"auto"``, the reason for the choice.

    Raises:
        ValueError: an unknown backend name.
    """
    if backend != "auto":
        if backend not in REGISTRY:
            raise ValueError(f"unknown backend {backend!r}; choose 'auto' or one of {list(BACKENDS)}")
        return backend, "asked for"
    wants_gpu = device.type == "cuda" if device is not None else torch.cuda.is_available()
    if wants_gpu and available("dali"):
        choice, why = "dali", "CUDA and DALI are available"
    elif available("dali-cpu"):
        choice, why = "dali-cpu", "DALI is installed" + (", CUDA is not" if not torch.cuda.is_available() else
                                                          ("" if wants_gpu else "; a CPU device was asked for"))
    else:
        choice, why = "torchvision", f"DALI is not installed ({REGISTRY['dali'].pip})"
    if choice not in _auto_logged:
        _auto_logged.add(choice)
        logger.info("gpupipe backend='auto' chose %r: %s", choice, why)
    return choice, why


def create(backend: str, source: Source, spec: PipelineSpec, config: RunConfig) -> Backend:
    """Builds backend ``backend`` (a resolved name) for ``source`` and ``spec``."""
    info = REGISTRY[backend]
    require(backend)
    module, cls = info.factory.split(":")
    factory = getattr(importlib.import_module(module), cls)
    return factory(source, spec, config, **dict(info.options))


def check_lowerings(backend: str, spec: PipelineSpec) -> None:
    """Checks that ``backend`` lowers every op of ``spec`` and carries its targets.

    Raises:
        ValueError: naming the op, the backend and (where it applies) the target.
    """
    info = REGISTRY[backend]
    module = importlib.import_module(info.factory.split(":")[0] + ".lowering")
    table = module.LOWERINGS
    for op in spec.ops:
        lowering = table.get(type(op))
        if lowering is None:
            raise ValueError(f"{op.name} has no lowering on backend {backend!r}")
        if spec.target not in lowering.targets:
            raise ValueError(f"{op.name} cannot carry {spec.target.title} on backend {backend!r}: {lowering.why}")


__all__: List[str] = ["BACKENDS", "REGISTRY", "BackendInfo", "RunConfig", "DecoderSettings", "EpochRead", "Backend",
                      "resolve", "create", "available", "require", "default_threads", "check_lowerings", "dali_package"]
