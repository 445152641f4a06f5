"""gpupipe: image pipelines defined once, compiled to NVIDIA DALI (GPU or CPU) or torchvision.

    import gpupipe
    loader = gpupipe.loader("data/train", "train", batch_size=256)
    for images, labels in loader:  # (B, 3, 224, 224) float32 on the GPU, (B,) int64
        ...

``import gpupipe`` imports neither DALI nor torch: a backend imports its library when used, and the names
whose modules import torch (``loader``, ``Loader``, ``DataLoader``, ...) are imported on first use. ``__all__`` is the
documented API (the API reference pages); the ops are also ``gpupipe.ops.<Op>``: their names in ``__all__``
come from the op registry (``gpupipe.ops.OP_NAMES``), their imports are spelled out for type checkers.
"""

from typing import TYPE_CHECKING

from . import cli, ops, pack, presets, remote
from ._compat import package_attribute as __getattr__  # noqa: F401 -- names imported on first use, and old names
from ._compat import package_dir as __dir__  # noqa: F401 -- dir() lists the names imported on first use
from ._version import __version__
from .errors import Error, OnError, SampleError, Skipped
from .ops import AutoAugment as AutoAugment
from .ops import CenterCrop as CenterCrop
from .ops import ColorJitter as ColorJitter
from .ops import CutMix as CutMix
from .ops import Decode as Decode
from .ops import GaussianBlur as GaussianBlur
from .ops import HorizontalFlip as HorizontalFlip
from .ops import MixUp as MixUp
from .ops import Normalize as Normalize
from .ops import Output as Output
from .ops import PadTo as PadTo
from .ops import RandAugment as RandAugment
from .ops import RandomAffine as RandomAffine
from .ops import RandomCrop as RandomCrop
from .ops import RandomErasing as RandomErasing
from .ops import RandomGrayscale as RandomGrayscale
from .ops import RandomIoUCrop as RandomIoUCrop
from .ops import RandomResize as RandomResize
from .ops import RandomResizedCrop as RandomResizedCrop
from .ops import RandomRotation as RandomRotation
from .ops import RandomZoomOut as RandomZoomOut
from .ops import Resize as Resize
from .ops import SanitizeBoxes as SanitizeBoxes
from .ops import TrivialAugment as TrivialAugment
from .ops import VerticalFlip as VerticalFlip
from .pack import PackError
from .remote import RemoteError
from .sources import CocoDetection, FileList, ImageFolder, SegmentationFolder, Shards, WebDataset
from .targets import DetectionLists, TargetKind, to_detection_inputs, to_detection_targets

if TYPE_CHECKING:  # imported on first use (gpupipe._compat.LAZY): ``import gpupipe`` imports no torch
    from .amp import autocast_dtype, choose_amp
    from .interop import DataLoader, UnsupportedTransform, from_torchvision
    from .loading.config import LoaderConfig
    from .loading.factory import loader
    from .loading.loader import Loader
    from .loading.sampling import RankShare
    from .loading.stats import StatsSummary

__all__ = [
    # the loader
    "loader",
    "Loader",
    "LoaderConfig",
    "StatsSummary",
    "RankShare",
    "autocast_dtype",
    "choose_amp",
    # coming from torchvision and timm
    "DataLoader",
    "from_torchvision",
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
    *ops.OP_NAMES,
    # packing and remote data
    "pack",
    "remote",
    # errors, and command lines that report them in one line
    "Error",
    "SampleError",
    "UnsupportedTransform",
    "PackError",
    "RemoteError",
    "OnError",
    "Skipped",
    "cli",
    "__version__",
]
