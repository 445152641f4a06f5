"""Targets: what a sample carries besides its image, one handler per kind.

Each kind ([`TargetKind`][gpupipe.TargetKind]) has one handler (``labels``,
``multihot``, ``masks``, ``boxes``) that owns how the target is
read from a source, checked, packed, padded and batched (``Target``); backends,
sources and the packer ask ``handler`` and never branch on the kind. How a kind
moves with the pixels is each backend's (``gpupipe/backends/<name>/targets.py``,
keyed by kind): this package imports no backend library. ``register`` adds a kind
of one's own.
``detection`` turns padded detection batches into what torchvision's
detection models take.
"""

from .base import Target
from .boxes import BOX_PADDING, PADDING_LABEL
from .detection import DetectionLists, to_detection_inputs, to_detection_targets
from .kinds import TargetKind
from .registry import ALL_TARGETS, HANDLERS, IMAGE_LEVEL, TargetRegistryError, handler, register, unregister

__all__ = [
    "TargetKind",
    "Target",
    "handler",
    "register",
    "unregister",
    "TargetRegistryError",
    "HANDLERS",
    "ALL_TARGETS",
    "IMAGE_LEVEL",
    "BOX_PADDING",
    "PADDING_LABEL",
    "DetectionLists",
    "to_detection_inputs",
    "to_detection_targets",
]
