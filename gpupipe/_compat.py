"""Names ``gpupipe`` exported before its ``__all__`` became the documented API: the rest of
``gpupipe.ops.__all__`` (``Op``, ``Effect``, ``OP_TYPES``, ``IMAGENET_MEAN``, ...), still found as
``gpupipe.<name>``, with a ``DeprecationWarning`` naming their home."""

from __future__ import annotations

import warnings
from typing import Any

from . import ops


def moved_attribute(name: str) -> Any:
    """``gpupipe.<name>`` for a name of ``gpupipe.ops`` that ``gpupipe`` no longer exports (the
    package's ``__getattr__``, asked only for names the package does not have).

    Raises:
        AttributeError: any other name, as for a module without it.
    """
    if name not in ops.__all__:
        raise AttributeError(f"module 'gpupipe' has no attribute {name!r}")
    warnings.warn(f"gpupipe.{name} is deprecated: use gpupipe.ops.{name}", DeprecationWarning, stacklevel=2)
    return getattr(ops, name)
