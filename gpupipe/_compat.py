"""Names ``gpupipe`` exported before its ``__all__`` became the documented API: still found where they
were, with a ``DeprecationWarning`` naming their home (``gpupipe.ops``)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: name -> the module that holds it now.
MOVED = {
    name: "gpupipe.ops"
    for name in (
        "Op",
        "Effect",
        "SizeArg",
        "HW",
        "BatchOp",
        "OP_TYPES",
        "IMAGENET_MEAN",
        "IMAGENET_STD",
        "OUTPUT_DTYPES",
        "AUGMENT_OPS",
    )
}


def moved_attribute(name: str) -> Any:
    """``gpupipe.<name>`` for a name in :data:`MOVED` (the module's ``__getattr__``).

    Raises:
        AttributeError: any other name, as for a module without it.
    """
    home = MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'gpupipe' has no attribute {name!r}")
    warnings.warn(f"gpupipe.{name} is deprecated: use {home}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
