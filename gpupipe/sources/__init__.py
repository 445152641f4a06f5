"""Where images and targets come from; sources know nothing of decoding.

* [`ImageFolder`][gpupipe.ImageFolder] and [`FileList`][gpupipe.FileList]: image files and class labels
  (one or several per image);
* [`SegmentationFolder`][gpupipe.SegmentationFolder]: images and masks of class ids;
* [`CocoDetection`][gpupipe.CocoDetection]: images and boxes from COCO annotations;
* [`Shards`][gpupipe.Shards]: folders packed by ``python -m gpupipe.pack``, local or behind a URL;
* [`WebDataset`][gpupipe.WebDataset]: tars written by other WebDataset tools, local or behind URLs.
"""

from .base import Sample, Source, refuse_empty
from .coco import CocoDetection
from .files import FileList, FileSource, ImageFolder
from .resolve import as_source
from .segmentation import SegmentationFolder
from .shards import Shards, ShardSource
from .walk import IMAGE_EXTENSIONS, walk_images
from .webdataset import WebDataset

__all__ = [
    "Source",
    "Sample",
    "FileSource",
    "ImageFolder",
    "FileList",
    "SegmentationFolder",
    "CocoDetection",
    "ShardSource",
    "Shards",
    "WebDataset",
    "as_source",
    "IMAGE_EXTENSIONS",
    "walk_images",
    "refuse_empty",
]
