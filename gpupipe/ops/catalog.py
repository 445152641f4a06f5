"""Every op class a pipeline may hold (the planners and lowering tables are checked against it)."""

from .base import Op
from .batch import CutMix, MixUp, Output, SanitizeBoxes
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
from .pixel import ColorJitter, GaussianBlur, Normalize, RandAugment, RandomErasing, RandomGrayscale, TrivialAugment

OP_TYPES: tuple[type[Op], ...] = (
    Decode,
    RandomResizedCrop,
    Resize,
    CenterCrop,
    RandomCrop,
    RandomResize,
    PadTo,
    HorizontalFlip,
    RandomRotation,
    RandomIoUCrop,
    RandomZoomOut,
    ColorJitter,
    RandomGrayscale,
    GaussianBlur,
    RandAugment,
    TrivialAugment,
    RandomErasing,
    Normalize,
    MixUp,
    CutMix,
    SanitizeBoxes,
    Output,
)
