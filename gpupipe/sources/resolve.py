"""A path or URL as the source it names."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import PathNotFound
from ..remote import is_url
from ..shards import format as shardfmt
from .base import Source, refuse_empty
from .files import FileList, ImageFolder
from .shards import Shards
from .sniff import check_list_file
from .walk import IMAGE_EXTENSIONS

PathLike = str | os.PathLike


def as_source(source: Source | PathLike, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> Source:
    """Turns a path into a source: a packed folder (or the URL of one) is ``Shards``, another
    folder an ``ImageFolder`` (of files with these ``extensions``), a file a ``FileList``.

    Raises:
        PathNotFound: the path does not exist (a ``FileNotFoundError`` and a ``ValueError``).
        ValueError: the path is none of these (an image or an archive is named as such).
    """
    if isinstance(source, Source):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source must be a path or a gpupipe Source, got {type(source).__name__}: {source!r}")
    if is_url(str(source)):
        return Shards(str(source))
    path = Path(refuse_empty(source, "source")).expanduser()
    if path.is_dir():
        return Shards(path) if shardfmt.is_packed(path) else ImageFolder(path, extensions=extensions)
    if path.is_file():
        check_list_file(path, "a folder or a list file", "pass the folder that holds the class folders")
        return FileList(path)
    hint = ""
    if "{" in path.name or path.name.endswith(".tar"):  # the tars of a WebDataset, named as webdataset names them
        hint = f": for the tars of a WebDataset, pass gpupipe.WebDataset({str(source)!r}) as the source"
    raise PathNotFound(f"source path {str(path)!r} does not exist{hint}")
