"""gpupipe: image pipelines defined once, compiled to NVIDIA DALI (GPU or CPU) or torchvision.

    import gpupipe
    loader = gpupipe.loader("data/train", "train", batch_size=256)
    for images, labels in loader:  # (B, 3, 224, 224) float32 on the GPU, (B,) int64
        ...

``import gpupipe`` does not import DALI; a backend imports its library when used.
"""

__version__ = "0.2.0"  # before the imports: gpupipe.pack.manifest reads it

from . import ops, pack, presets, sources
from .amp import autocast_dtype, choose_amp
from .build import loader
from .errors import Error, OnError, SampleError, Skipped
from .loader import Loader
from .ops import *  # noqa: F401,F403 -- every op by name: gpupipe.Decode(), gpupipe.MixUp(), ...
from .pack import PackError
from .remote import RemoteError
from .sampling import RankShare
from .sources import CocoDetection, FileList, ImageFolder, SegmentationFolder, Shards, WebDataset
from .stats import StatsSummary
from .targets import DetectionLists, TargetKind, to_detection_inputs, to_detection_targets

__all__ = ["loader", "Loader", "ops", "presets", "sources", "autocast_dtype", "choose_amp", "ImageFolder", "FileList", "SegmentationFolder",
           "CocoDetection", "Shards", "WebDataset", "RankShare", "to_detection_inputs", "DetectionLists",
           "OnError", "Skipped", "SampleError", "StatsSummary", "TargetKind", "to_detection_targets",
           "pack", "Error", "PackError", "RemoteError", *ops.__all__, "__version__"]
