"""Every op class gpupipe ships, read from the registry once the op modules have defined them.

``OP_TYPES`` and ``OP_NAMES`` are derived, never written out: the export lists of
``gpupipe.ops`` and ``gpupipe`` and the docs' op table are built from them.
"""

from __future__ import annotations

from . import batch, geometry, pixel
from .registry import op_types

#: The op modules, in the order their ops are listed.
MODULES = (geometry, pixel, batch)
_ORDER = {module.__name__: k for k, module in enumerate(MODULES)}

#: Every op class gpupipe ships: by module (as ``MODULES``), then in the order each defines them.
OP_TYPES: tuple[type, ...] = tuple(
    sorted((cls for cls in op_types() if cls.__module__ in _ORDER), key=lambda cls: _ORDER[cls.__module__])
)
#: Their names, as ``gpupipe.ops`` and ``gpupipe`` export them.
OP_NAMES: tuple[str, ...] = tuple(cls.__name__ for cls in OP_TYPES)

__all__ = ["MODULES", "OP_TYPES", "OP_NAMES"]
