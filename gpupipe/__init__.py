"""gpupipe: image pipelines defined once, compiled to NVIDIA DALI (GPU or CPU) or torchvision.

    import gpupipe
    loader = gpupipe.loader("data/train", "train", batch_size=256)
    for images, labels in loader:  # (B, 3, 224, 224) float32 on the GPU, (B,) int64
        ...

``import gpupipe`` does not import DALI; a backend imports its library when used.
"""

from . import ops, presets, sources
from .errors import OnError, SampleError, Skipped
from .loader import Loader, loader
from .ops import *  # noqa: F401,F403 -- every op by name: gpupipe.Decode(), gpupipe.MixUp(), ...
from .sampling import RankShare
from .sources import CocoDetection, FileList, ImageFolder, SegmentationFolder, Shards, WebDataset
from .stats import StatsSummary
from .targets import DetectionLists, TargetKind, to_detection_inputs, to_detection_targets

__version__ = "0.2.0"

__all__ = ["loader", "Loader", "ops", "presets", "sources", "ImageFolder", "FileList", "SegmentationFolder",
           "CocoDetection", "Shards", "WebDataset", "RankShare", "to_detection_inputs", "DetectionLists",
           "OnError", "Skipped", "SampleError", "StatsSummary", "TargetKind", "to_detection_targets",
           *ops.__all__, "__version__"]
