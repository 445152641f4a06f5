"""Image files under a folder, found as ``torchvision.datasets.ImageFolder`` finds them."""

from __future__ import annotations

import logging
import os
import unicodedata
from collections import Counter, defaultdict
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


#: Folders of system files, never a dataset's (lower case): macOS archives' metadata (``._`` AppleDouble files),
#: a Synology NAS's thumbnails (``@eaDir/<photo>/SYNOPHOTO_THUMB_*.jpg``), snapshots and recycle bins, file
#: systems' own folders. Left out, and named in a warning, where torchvision's ``ImageFolder`` reads them.
SYSTEM_FOLDERS = frozenset(
    ("__macosx", "@eadir", "#recycle", "#snapshot", "$recycle.bin", "system volume information", "lost+found")
)


def is_system_folder(name: str) -> bool:
    """Whether a folder named ``name`` holds system files (``SYSTEM_FOLDERS``), not images."""
    return name.lower() in SYSTEM_FOLDERS


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
    system: list[str] | None = None,
    links: list[str] | None = None,
    unlisted: list[tuple[str, str]] | None = None,
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
        system: when given, receives the folders of system files (``SYSTEM_FOLDERS``), which are never entered.
        links: when given, receives the images that are symbolic links.
        unlisted: when given, receives ``(folder, why)`` of each folder that cannot be listed (no permission),
            whose images are left out; otherwise each is logged.
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
                    if is_dir and is_system_folder(name):
                        if system is not None:
                            system.append(entry.path)
                    elif is_dir:
                        folders.append(entry.path)
                    elif name.lower().endswith(extensions):
                        files.append(name)
                        if links is not None and entry.is_symlink():
                            links.append(entry.path)
                    elif others and name.lower().endswith(others) and unread is not None:
                        unread.append(entry.path)
                    elif ignored is not None and name.lower().endswith(IGNORED_IMAGE_EXTENSIONS):
                        ignored.append(entry.path)
        except OSError as err:
            if unlisted is None:
                logger.warning("ImageFolder: cannot list %r: %s", path, err.strerror or err)
            else:
                unlisted.append((path, f"cannot list the folder: {err.strerror or err}; its images are left out"))
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


def warn_system(what: str, system: Sequence[str]) -> None:
    """Warns of the folders of system files left out (torchvision's ``ImageFolder`` reads them: a class
    ``__MACOSX``, Synology's thumbnails as more photos)."""
    if system:
        names = sorted({os.path.basename(path) + os.sep for path in system})
        logger.warning(
            "%s: %s of system files left out, not read as classes or images (%s: macOS archive metadata, NAS "
            "thumbnails, recycle bins; e.g. %s); torchvision's ImageFolder would read them",
            what,
            plural(len(system), "folder"),
            ", ".join(names),
            sorted(system)[0],
        )


def alike_names_warning(what: str, root: str, classes: Sequence[str]) -> None:
    """Warns of class folders whose names differ only by case or Unicode normal form (``Cat`` and ``cat``; ``café``
    written by macOS, NFD, and elsewhere, NFC): distinct classes here, as torchvision reads them, one folder on
    macOS and Windows, and printed alike."""
    groups: defaultdict[str, list[str]] = defaultdict(list)
    for name in classes:
        groups[unicodedata.normalize("NFC", name).casefold()].append(name)
    alike = [" and ".join(map(ascii, names)) for names in groups.values() if len(names) > 1]
    if alike:
        logger.warning(
            "%s: %r holds class folders whose names are alike but for case or Unicode normal form (%s): each is "
            "a class of its own (as torchvision reads them); one folder on macOS and Windows: merge them if they "
            "are one class",
            what,
            root,
            "; ".join(alike),
        )


def nested_split_message(root: str, classes: Sequence[str], split_names: Sequence[str]) -> str:
    """Why ``root`` is refused when one of its class folders has a split's name (``val``) and holds folders
    named as the classes beside it (``train/val/cat``, beside ``train/cat``): torchvision reads it as one class
    holding every class's images. ``""`` if none does."""
    others = set(classes)
    for name in classes:
        if name.lower() not in split_names:
            continue
        try:
            with os.scandir(os.path.join(root, name)) as entries:
                inner = sorted(e.name for e in entries if e.name in others and e.name != name and e.is_dir())
        except OSError:
            continue
        if inner:
            folder = os.path.join(root, name) + os.sep
            return (
                f"{folder} holds folders {', '.join(n + os.sep for n in inner)} named as the classes beside it: a "
                f"{name} split inside the training folder, which would be read as one class {name!r} holding images "
                f"of every class; move {folder} out of {root} (and pass it where the {name} data goes)"
            )
    return ""


def unreadable_hint(left_out: Sequence[str], ignored: Sequence[str]) -> str:
    """The end of the "no images" error where the folders hold images only in formats the loader leaves out."""
    if left_out:
        shown = ", ".join(left_out[:3]) + (" ..." if len(left_out) > 3 else "")
        return (
            f"; it holds {plural(len(left_out), 'image')} in formats the loader does not read ({shown}): "
            "python -m gpupipe.pack converts them (16-bit and float TIFFs included)"
        )
    if ignored:
        return (
            f"; it holds {plural(len(ignored), 'file')} in formats neither torchvision nor gpupipe reads "
            f"(e.g. {ignored[0]}): convert them to JPEG or PNG"
        )
    return ""


def same_folders_message(classes: Sequence[str], ids: Sequence[tuple[int, int]]) -> str:
    """Why class folders that are one folder (``dog`` a link to ``cat``) are refused: each image would be read
    in both classes. ``ids``: each class folder's ``folder_id``. ``""`` if none are."""
    first: dict[tuple[int, int], str] = {}
    for name, key in zip(classes, ids):
        if key in first:
            return (
                f"class folders {first[key]!r} and {name!r} are one folder (a link to the other, or both to a third):"
                " each of its images would be read in both classes; remove the link"
            )
        first[key] = name
    return ""


def warn_linked_twice(root: str, names: Sequence[str], labels: Sequence[int], classes: Sequence[str], links) -> None:
    """Warns of the images read in two classes or more through symbolic links (class folders made of links into
    a pool of photos, one photo linked into two classes), naming one and its classes.

    Args:
        root: the folder the names start with.
        names, labels: the images found and their labels.
        classes: the class names.
        links: the names that are symbolic links (only those, and the files they lead to, are compared).
    """
    if not links:
        return
    linked = set(links)
    real_root = os.path.realpath(root)
    targets = {os.path.realpath(link) for link in links}
    seen: dict[str, int] = {}
    twice: dict[str, tuple[str, set[int]]] = {}
    for name, label in zip(names, labels):
        real = os.path.realpath(name) if name in linked else real_root + name[len(root) :]
        if real not in targets:
            continue
        first = seen.setdefault(real, int(label))
        if first != label:
            twice.setdefault(real, (name, {first}))[1].add(int(label))
    if twice:
        real, (name, both) = next(iter(twice.items()))
        logger.warning(
            "ImageFolder: %s in two classes or more through links (e.g. %s, which is %s, in classes %s): each is "
            "read once per class, with that class's label, as torchvision reads them; remove the links from the "
            "classes they are not in",
            plural(len(twice), "image is", "images are"),
            name,
            real,
            " and ".join(repr(classes[k]) for k in sorted(both)),
        )
