"""Images without labels (a test folder to predict on): each image's label is its place in the list and its
class name its path, so that a batch's labels say which files its images are, in any order, on any rank."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .listfile import Listing
from .walk import IMAGE_EXTENSIONS, walk_images, warn_ignored, warn_left_out, warn_system


def is_unlabelled(entries: Sequence[object]) -> bool:
    """Whether ``FileList``'s entries are paths alone (``str`` or ``os.PathLike``), not ``(path, label)`` pairs."""
    return bool(entries) and isinstance(entries[0], (str, os.PathLike))


def folder_images(folder: Path, unlisted: list[tuple[str, str]] | None = None) -> list[str]:
    """The images under ``folder`` (relative paths, in ``torchvision.datasets.ImageFolder``'s order: each
    folder's files sorted, folders in sorted order; hidden files left out), warning of those left out.

    Args:
        folder: the folder.
        unlisted: when given, receives ``(folder, why)`` of each folder that cannot be listed (no permission),
            whose images are left out (``walk_images``); otherwise each is logged.

    Raises:
        ValueError: no image, naming the folder.
    """
    unread: list[str] = []
    ignored: list[str] = []
    system: list[str] = []
    found = walk_images(str(folder), IMAGE_EXTENSIONS, None, unread, ignored, system, unlisted=unlisted)
    warn_left_out("FileList", sorted(unread))
    warn_ignored("FileList", ignored)
    warn_system("FileList", system)
    if not found:
        shut = f"; {unlisted[0][0]}: {unlisted[0][1]}" if unlisted else ""
        raise ValueError(f"FileList: no images in {str(folder)!r} (extensions {', '.join(IMAGE_EXTENSIONS)}){shut}")
    start = len(str(folder)) + len(os.sep)
    return [path[start:] for path in found]


def unlabelled_listing(paths: Sequence[str | os.PathLike], classes: object, multi_label: object) -> Listing:
    """The entries of paths without labels: entry ``i``'s label is ``i``.

    Raises:
        ValueError: ``classes`` or ``multi_label=True`` given (the classes are the paths), or a path given twice
            (its file would be read twice), naming it.
    """
    for name, value in (("classes", classes), ("multi_label", multi_label)):
        if value is not None and value is not False:
            raise ValueError(
                f"FileList: {name}= with paths without labels: each image's label is its place in the list and "
                "its class name its path"
            )
    listing = Listing()
    first: dict[str, int] = {}
    for i, path in enumerate(os.fspath(p) for p in paths):
        j = first.setdefault(path, i)
        if j != i:
            raise ValueError(
                f"FileList: {path!r} is listed twice (entries {j} and {i}): its file would be read twice; "
                "list each file once"
            )
        listing.add(path, i)
    return listing
