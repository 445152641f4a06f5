"""The backend registry: each backend's name, needs, factory and lowering table, in one table.

Each backend module imports its heavy library lazily, so ``import gpupipe``
works without DALI. ``"auto"`` picks ``dali`` on a CUDA device with DALI
installed, else ``dali-cpu`` where DALI imports, else ``torchvision``.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

import torch

from ..checks import did_you_mean
from ..errors import ErrorPolicy
from ..loading.config import LoaderConfig
from ..ops.registry import LOWERINGS, RegistryError
from ..plan.spec import PipelineSpec
from ..sources import Source
from ..targets import handler
from .base import Backend, Placement

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
        lowerings: the module whose ``LOWERINGS`` table maps each op type to its lowering (importing it
            registers the built-in lowerings; see ``gpupipe.ops.registry``).
        options: keyword arguments for the factory.
        targets: the module whose ``TARGETS`` table (``common.TargetLowerings``) maps each target kind
            that moves with the pixels to its lowering; ``""``: the backend checks targets itself.
        internal: chosen by gpupipe itself (``fallback="torchvision"``), not offered among the choices.
    """

    name: str
    module: str
    needs_cuda: bool
    main_process: bool
    factory: str
    lowerings: str
    options: tuple[tuple[str, object], ...] = ()
    targets: str = ""
    internal: bool = False

    @property
    def pip(self) -> str:
        """The command that installs the backend's package."""
        return f"pip install {dali_package()}" if self.module == "nvidia.dali" else f"pip install {self.module}"


REGISTRY: dict[str, BackendInfo] = {
    info.name: info
    for info in (
        BackendInfo(
            "dali",
            "nvidia.dali",
            needs_cuda=True,
            main_process=False,
            factory="gpupipe.backends.dali.backend:DaliBackend",
            lowerings="gpupipe.backends.dali.lowering",
            options=(("gpu", True),),
            targets="gpupipe.backends.dali.targets",
        ),
        BackendInfo(
            "dali-cpu",
            "nvidia.dali",
            needs_cuda=False,
            main_process=False,
            factory="gpupipe.backends.dali.backend:DaliBackend",
            lowerings="gpupipe.backends.dali.lowering",
            options=(("gpu", False),),
            targets="gpupipe.backends.dali.targets",
        ),
        BackendInfo(
            "torchvision",
            "torchvision",
            needs_cuda=False,
            main_process=True,
            factory="gpupipe.backends.torchvision.backend:TorchvisionBackend",
            lowerings="gpupipe.backends.torchvision.lowering",
            targets="gpupipe.backends.torchvision.targets",
        ),
    )
}
#: The built-in backends' names (``REGISTRY`` also holds the ones registered later).
BACKENDS = tuple(REGISTRY)


def register(info: BackendInfo) -> BackendInfo:
    """Adds a backend of one's own, from its own file: ``gpupipe.loader(backend=info.name)`` builds it
    (see the development page).

    Raises:
        RegistryError: another backend holds the name.
    """
    old = REGISTRY.get(info.name)
    if old is not None and old != info:
        raise RegistryError(f"backend {info.name!r} registered twice: {old.factory} and {info.factory}")
    REGISTRY[info.name] = info
    return info


def unregister(name: str) -> None:
    """Removes a backend added by ``register`` (for tests that add toy backends); built-in ones stay."""
    if name not in BACKENDS:
        REGISTRY.pop(name, None)


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


def resolve(backend: str, device: torch.device | None) -> tuple[str, str]:
    """Turns ``"auto"`` into a backend name; checks any other name.

    Args:
        backend: ``"auto"`` or one of ``BACKENDS``.
        device: the requested device, or ``None`` for the default.

    Returns:
        ``(name, why)``: the backend and, for ``"auto"``, the reason for the choice.

    Raises:
        ValueError: an unknown backend name.
    """
    if backend != "auto":
        if backend not in REGISTRY:
            offered = [name for name, info in REGISTRY.items() if not info.internal]
            guess = did_you_mean(str(backend), ["auto", *offered])
            raise ValueError(f"unknown backend {backend!r}{guess}; choose 'auto' or one of {offered}")
        return backend, "asked for"
    wants_gpu = device.type == "cuda" if device is not None else torch.cuda.is_available()
    if wants_gpu and available("dali"):
        choice, why = "dali", "CUDA and DALI are available"
    elif available("dali-cpu"):
        choice, why = (
            "dali-cpu",
            "DALI is installed"
            + (
                ", CUDA is not"
                if not torch.cuda.is_available()
                else ("" if wants_gpu else "; a CPU device was asked for")
            ),
        )
    else:
        choice, why = "torchvision", f"DALI is not installed ({REGISTRY['dali'].pip})"
    if choice not in _auto_logged:
        _auto_logged.add(choice)
        logger.info("gpupipe backend='auto' chose %r: %s", choice, why)
    return choice, why


def create(
    backend: str, source: Source, spec: PipelineSpec, config: LoaderConfig, placement: Placement, errors: ErrorPolicy
) -> Backend:
    """Builds backend ``backend`` (a resolved name) for ``source`` and ``spec``."""
    info = REGISTRY[backend]
    require(backend)
    module, cls = info.factory.split(":")
    factory = getattr(importlib.import_module(module), cls)
    return factory(source, spec, config, placement, errors, **dict(info.options))


def check_lowerings(backend: str, spec: PipelineSpec) -> None:
    """Checks that ``backend`` lowers every op of ``spec`` and carries its targets.

    Raises:
        ValueError: naming the op, the backend and (where it applies) the target.
        NoTargetLowering: the backend has no lowering for the kind of target (a ``ValueError``).
    """
    info = REGISTRY[backend]
    if info.targets:
        importlib.import_module(info.targets).TARGETS.of(handler(spec.target), backend)
    table = importlib.import_module(info.lowerings).LOWERINGS
    for op in spec.ops:
        lowering = table.get(type(op))
        if lowering is None:
            elsewhere = sorted(name for name, other in LOWERINGS.items() if type(op) in other)
            has = f" (it has a lowering on: {', '.join(elsewhere)})" if elsewhere else ""
            raise ValueError(f"{op.name} has no lowering on backend {backend!r}{has}")
        if spec.target not in lowering.targets:
            raise ValueError(f"{op.name} cannot carry {spec.target.title} on backend {backend!r}: {lowering.why}")
        refused = lowering.refuses(op) if lowering.refuses is not None else ""
        if refused:
            raise ValueError(f"{op.name} on backend {backend!r}: {refused}")


__all__: list[str] = [
    "BACKENDS",
    "REGISTRY",
    "BackendInfo",
    "resolve",
    "create",
    "available",
    "require",
    "check_lowerings",
    "dali_package",
    "register",
    "unregister",
]
