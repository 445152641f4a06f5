"""Backend-neutral image ops: what happens to each image (and its targets), as plain data.

Ops import neither DALI nor torchvision. A pipeline is a list of ops that
starts with :class:`Decode`; each backend compiles the list with its own
lowering table. Every op is a frozen dataclass whose arguments are
validated at construction, so a bad value fails where it was written. As in
torchvision, the main argument(s) may be positional (``RandomResizedCrop(224)``,
``Normalize(mean, std)``); the others are keyword-only.

Each op declares what it does (:attr:`Op.effect`), the size of its output
(:meth:`Op.output_size`) and the target kinds it can carry (:attr:`Op.carries`).
"""

from .base import HW, Effect, Op, SizeArg
from .batch import OUTPUT_DTYPES, BatchOp, CutMix, MixUp, Output, SanitizeBoxes
from .catalog import OP_TYPES
from .geometry import (
    CenterCrop,
    Decode,
    HorizontalFlip,
    PadTo,
    RandomCrop,
    RandomIoUCrop,
    RandomResize,
    RandomResizedCrop,
    RandomRotation,
    RandomZoomOut,
    Resize,
)
from .pixel import (
    AUGMENT_OPS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    GaussianBlur,
    Normalize,
    RandAugment,
    RandomErasing,
    RandomGrayscale,
    TrivialAugment,
)

__all__ = [
    "Op",
    "Effect",
    "SizeArg",
    "HW",
    "BatchOp",
    "OP_TYPES",
    "Decode",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "RandomCrop",
    "RandomResize",
    "PadTo",
    "HorizontalFlip",
    "RandomRotation",
    "RandomIoUCrop",
    "RandomZoomOut",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandAugment",
    "TrivialAugment",
    "RandomErasing",
    "Normalize",
    "MixUp",
    "CutMix",
    "SanitizeBoxes",
    "Output",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "OUTPUT_DTYPES",
    "AUGMENT_OPS",
]
