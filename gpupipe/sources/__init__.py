"""Where images and targets come from; sources know nothing of decoding.

* :class:`ImageFolder` and :class:`FileList`: image files and class labels
  (one or several per image);
* :class:`SegmentationFolder`: images and masks of class ids;
* :class:`CocoDetection`: images and boxes from COCO annotations;
* :class:`Shards`: folders packed by ``python -m gpupipe.pack``, local or behind a URL;
* :class:`WebDataset`: tars written by other WebDataset tools, local or behind URLs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from .. import shardfmt
from ..remote import is_url
from .base import Sample, Source
from .coco import CocoDetection
from .files import IMAGE_EXTENSIONS, FileList, FileSource, ImageFolder, walk_images
from .segmentation import SegmentationFolder
from .shards import Shards, ShardSource
from .webdataset import WebDataset

PathLike = Union[str, os.PathLike]


def as_source(source: Union[Source, PathLike]) -> Source:
    """Turns a path into a source: a packed folder (or the URL of one) is ``Shards``, another
    folder an ``ImageFolder``, a file a ``FileList``.

    Raises:
        ValueError: the path does not exist or is none of these.
    """
    if isinstance(source, Source):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source must be a path or a gpupipe Source, got {type(source).__name__}: {source!r}")
    if is_url(str(source)):
        return Shards(str(source))
    path = Path(source).expanduser()
    if path.is_dir():
        return Shards(path) if shardfmt.is_packed(path) else ImageFolder(path)
    if path.is_file():
        return FileList(path)
    raise ValueError(f"source path {str(path)!r} does not exist")


__all__ = ["Source", "Sample", "FileSource", "ImageFolder", "FileList", "SegmentationFolder", "CocoDetection",
           "ShardSource", "Shards", "WebDataset",
           "as_source",
           "IMAGE_EXTENSIONS", "walk_images"]
