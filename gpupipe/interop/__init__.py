"""Coming from torchvision and timm: their transforms, datasets and ``DataLoader``, taken as they are.

* ``from_torchvision``: a ``torchvision.transforms`` (v1 or v2) or timm transform as gpupipe ops;
* ``as_dataset_source``: a ``torchvision.datasets.ImageFolder`` / ``DatasetFolder`` (or a
  ``Subset`` or ``ConcatDataset`` of those) as a gpupipe source, with its transform;
* ``DataLoader``: ``torch.utils.data.DataLoader``'s signature, building a gpupipe loader.
"""

from .compile import UnsupportedTransform, from_torchvision, supported_names
from .dataloader import DataLoader
from .datasets import as_dataset_source, is_dataset
from .fallback import TransformBackend
from .transforms import is_transform

__all__ = [
    "from_torchvision",
    "UnsupportedTransform",
    "is_transform",
    "supported_names",
    "as_dataset_source",
    "is_dataset",
    "DataLoader",
    "TransformBackend",
]
