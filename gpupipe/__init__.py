"""gpupipe: image pipelines defined once, compiled to NVIDIA DALI (GPU or CPU) or torchvision.

    import gpupipe
    loader = gpupipe.loader("data/train", "train", batch_size=256)
    for images, labels in loader:  # (B, 3, 224, 224) float32 on the GPU, (B,) int64
        ...

``import gpupipe`` does not import DALI; a backend imports its library when used.
"""

from . import ops, presets, sources
from .loader import Loader, loader
from .ops import *  # noqa: F401,F403 -- every op by name: gpupipe.Decode(), gpupipe.MixUp(), ...
from .sources import FileList, ImageFolder, Shards

__version__ = "0.1.0"

__all__ = ["loader", "Loader", "ops", "presets", "sources", "ImageFolder", "FileList", "Shards", *ops.__all__,
           "__version__"]
