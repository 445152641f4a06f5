"""Image files under a folder, found as ``torchvision.datasets.ImageFolder`` finds them."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence

from ..errors import plural

logger = logging.getLogger("gpupipe.sources")

#: File name endings (lower case) an ``ImageFolder`` treats as images.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
#: Images torchvision's ``ImageFolder`` counts that the loader does not read: listed as problems;
#: the packer converts them.
OTHER_IMAGE_EXTENSIONS = (".tif", ".tiff", ".ppm", ".pgm")
#: Photos in formats neither torchvision's ``ImageFolder`` nor the loader reads (phones' HEIC, AVIF, GIF,
#: JPEG XL and 2000, cameras' raw files): left out by both, and named in a warning rather than silently.
IGNORED_IMAGE_EXTENSIONS = (
    ".heic", ".heif", ".avif", ".gif", ".jxl", ".jp2", ".j2k", ".dng", ".cr2", ".cr3", ".nef", ".arw", ".orf", ".rw2",
    ".jfif", ".pjpeg", ".pjp",
)  # fmt: skip
#: JPEG files under another ending (Windows saves photos from the web as ``.jfif``): renamed, they are read.
JPEG_ALIASES = (".jfif", ".pjpeg", ".pjp")


def folder_id(path: str) -> tuple[int, int]:
    """``(device, inode)`` of a folder (what a link to it leads to)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def walk_images(
    folder: str,
    extensions: tuple[str, ...],
    visited: set[tuple[int, int]] | None = None,
    unread: list[str] | None = None,
    ignored: list[str] | None = None,
) -> list[str]:
    """Image files under ``folder``, in ``torchvision.datasets.ImageFolder``'s order.

    Hidden files and folders are skipped. Links to folders are followed, but
    no real folder (device and inode) in ``visited`` is entered again, so a
    link back to an ancestor neither repeats images nor loops forever.

    Args:
        folder: where to start (entered even if it is in ``visited``).
        extensions: file endings to accept (lower case).
        visited: folders not to enter (updated with the ones entered).
        unread: when given, receives the files ending in one of ``OTHER_IMAGE_EXTENSIONS`` that
            ``extensions`` leaves out.
        ignored: when given, receives the files ending in one of ``IGNORED_IMAGE_EXTENSIONS``.
    """
    others = tuple(e for e in OTHER_IMAGE_EXTENSIONS if e not in extensions) if unread is not None else ()
    visited = set() if visited is None else visited
    found: list[tuple[str, list[str]]] = []

    def visit(path: str, top: bool = False) -> None:
        try:
            key = folder_id(path)
        except OSError as err:
            logger.warning("ImageFolder: cannot read folder %r: %s", path, err.strerror or err)
            return
        if key in visited and not top:
            logger.warning("ImageFolder: %r leads to a folder already visited (a link loop?); not read again", path)
            return
        visited.add(key)
        files, folders = [], []
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith("."):
                        continue
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        continue
                    if is_dir:
                        folders.append(entry.path)
                    elif name.lower().endswith(extensions):
                        files.append(name)
                    elif others and name.lower().endswith(others) and unread is not None:
                        unread.append(entry.path)
                    elif ignored is not None and name.lower().endswith(IGNORED_IMAGE_EXTENSIONS):
                        ignored.append(entry.path)
        except OSError as err:
            logger.warning("ImageFolder: cannot list %r: %s", path, err.strerror or err)
            return
        found.append((path, sorted(files)))
        for sub in folders:
            visit(sub)

    visit(folder, top=True)
    found.sort(key=lambda item: item[0])
    return [prefix + name for dirpath, names in found for prefix in (dirpath + os.sep,) for name in names]


def warn_ignored(what: str, ignored: Sequence[str]) -> None:
    """Warns of the photos in formats neither torchvision's ``ImageFolder`` nor the loader reads, by format."""
    if not ignored:
        return
    counts = Counter(os.path.splitext(path)[1].lower() for path in ignored)
    formats = ", ".join(f"{ext}: {n}" for ext, n in counts.most_common())
    jpeg = [ext for ext in counts if ext in JPEG_ALIASES]
    logger.warning(
        "%s: %s left out, in formats neither torchvision's ImageFolder nor gpupipe reads (%s; e.g. %s): "
        "convert them to JPEG or PNG to train on them (HEIC: pillow-heif)%s",
        what,
        plural(len(ignored), "file"),
        formats,
        ignored[0],
        f"; {' and '.join(jpeg)} files are JPEGs: rename them .jpg" if jpeg else "",
    )


def warn_left_out(what: str, left_out: Sequence[str]) -> None:
    """Warns of the images torchvision's ``ImageFolder`` reads and the loader does not (``.tif``...)."""
    if not left_out:
        return
    shown = ", ".join(left_out[:3]) + (" ..." if len(left_out) > 3 else "")
    logger.warning(
        "%s: %s left out (%s): torchvision's ImageFolder reads these formats, the loader does not; "
        "python -m gpupipe.pack converts them",
        what,
        plural(len(left_out), "image"),
        shown,
    )
