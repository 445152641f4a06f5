"""Backends: each compiles a checked pipeline and reads epochs with it.

* ``registry``: every backend's name, needs and factory, and how ``"auto"`` chooses
  (``register`` adds a backend of one's own);
* ``base``: what the loader gives a backend and asks of it;
* ``common``: what every backend shares (the slots of a batch, replacing samples that fail,
  the table of a backend's target lowerings by kind);
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
    register,
    require,
    resolve,
    unregister,
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
    "register",
    "unregister",
]
