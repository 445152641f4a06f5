"""Backends: each compiles a checked pipeline and reads epochs with it.

* ``registry``: every backend's name, needs and factory, and how ``"auto"`` chooses;
* ``base``: what the loader gives a backend and asks of it;
* ``common``: what every backend shares (lowering-table entries, the slots of a batch,
  replacing samples that fail);
* ``dali`` and ``torchvision``: the backends, each importing its library lazily.
"""

from .base import Backend, EpochRead, Placement
from .registry import (
    BACKENDS,
    REGISTRY,
    BackendInfo,
    available,
    check_lowerings,
    create,
    dali_package,
    require,
    resolve,
)

__all__ = [
    "BACKENDS",
    "REGISTRY",
    "BackendInfo",
    "Placement",
    "EpochRead",
    "Backend",
    "resolve",
    "create",
    "available",
    "require",
    "check_lowerings",
    "dali_package",
]
