"""gpupipe: image pipelines defined once, compiled to NVIDIA DALI (GPU or CPU) or torchvision.

    import gpupipe
    loader = gpupipe.loader("data/train", "train", batch_size=256)
    for images, labels in loader:  # (B, 3, 224, 224) float32 on the GPU, (B,) int64
        ...

``import gpupipe`` does not import DALI; a backend imports its library when used. ``__all__`` is the
documented API (the API reference pages); the ops are also ``gpupipe.ops.<Op>``.
"""

from . import ops, pack, presets, remote
from ._compat import moved_attribute as __getattr__  # noqa: F401 -- names exported before, with a warning
from ._version import __version__
from .amp import autocast_dtype, choose_amp
from .build import loader
from .config import LoaderConfig
from .dataloader import Loader
from .errors import Error, OnError, SampleError, Skipped
from .ops import (
    CenterCrop,
    ColorJitter,
    CutMix,
    Decode,
    GaussianBlur,
    HorizontalFlip,
    MixUp,
    Normalize,
    Output,
    PadTo,
    RandAugment,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomIoUCrop,
    RandomResize,
    RandomResizedCrop,
    RandomRotation,
    RandomZoomOut,
    Resize,
    SanitizeBoxes,
    TrivialAugment,
)
from .pack import PackError
from .remote import RemoteError
from .sampling import RankShare
from .sources import CocoDetection, FileList, ImageFolder, SegmentationFolder, Shards, WebDataset
from .stats import StatsSummary
from .targets import DetectionLists, TargetKind, to_detection_inputs, to_detection_targets

__all__ = [
    # the loader
    "loader",
    "Loader",
    "LoaderConfig",
    "StatsSummary",
    "RankShare",
    "autocast_dtype",
    "choose_amp",
    # sources and targets
    "ImageFolder",
    "FileList",
    "SegmentationFolder",
    "CocoDetection",
    "Shards",
    "WebDataset",
    "TargetKind",
    "to_detection_inputs",
    "to_detection_targets",
    "DetectionLists",
    # ops (also gpupipe.ops.<Op>) and presets
    "ops",
    "presets",
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
    # packing and remote data
    "pack",
    "remote",
    # errors
    "Error",
    "SampleError",
    "PackError",
    "RemoteError",
    "OnError",
    "Skipped",
    "__version__",
]
