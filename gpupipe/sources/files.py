"""Sources of image files on a file system: ``ImageFolder`` and ``FileList`` (single- or multi-label)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..errors import PathNotFound, Skipped, plural
from ..targets import TargetKind
from .base import Indices, Source, given_path
from .listfile import LabelArg, label_sets, merge_repeated, numbering, read_list_file, read_pairs
from .listpaths import check_space_separated, refuse_none_found, unicode_forms, windows_separators
from .listtags import spaced_labels
from .scan import ScanResult
from .unlabelled import folder_images, is_unlabelled, unlabelled_listing
from .walk import (
    IMAGE_EXTENSIONS,
    alike_names_warning,
    folder_id,
    is_system_folder,
    nested_split_message,
    same_folders_message,
    unreadable_hint,
    walk_images,
    warn_ignored,
    warn_left_out,
    warn_linked_twice,
    warn_system,
)

logger = logging.getLogger("gpupipe.sources")

PathLike = str | os.PathLike


class FileSource(Source):
    """A source whose samples are image files (``names`` are their paths)."""


class ImageFolder(FileSource):
    """Images in ``root/<class>/**/<file>``, labelled by class folder.

    Classes are the sorted names of the non-hidden folders in ``root``, so
    labels match ``torchvision.datasets.ImageFolder``. Files are matched by
    extension case-insensitively (``.jpg .jpeg .png .bmp .webp``); other
    images torchvision's ``ImageFolder`` would count (``.tif .tiff .ppm
    .pgm``) are left out with a warning naming them, in ``left_out`` (the
    packer converts them), unless ``extensions`` leaves out one of the
    defaults (a choice); hidden
    files and folders and other files are ignored; links to folders are
    followed, but never into a folder already listed, the root or another
    class folder (see ``walk_images``).

    Args:
        root: the folder holding one folder per class.
        extensions: file endings to accept (lower case, with the dot).

    Raises:
        ValueError: ``root`` is missing, not a folder, has no class folders, or no images.
    """

    def __init__(self, root: PathLike, *, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> None:
        self.root = given_path(root, "ImageFolder: root")
        if not self.root.exists():
            raise PathNotFound(f"ImageFolder: root {str(self.root)!r} does not exist")
        if not self.root.is_dir():
            raise ValueError(f"ImageFolder: root {str(self.root)!r} is not a folder")
        extensions = tuple(e.lower() for e in extensions)
        with os.scandir(self.root) as entries:
            listed = [(e.name, _is_dir(e)) for e in entries if not e.name.startswith(".")]
        system = [str(self.root / name) for name, is_dir in listed if is_dir and is_system_folder(name)]
        self.classes = sorted(name for name, is_dir in listed if is_dir and not is_system_folder(name))
        loose = sorted(name for name, is_dir in listed if not is_dir and name.lower().endswith(extensions))
        shown = ", ".join(loose[:3]) + (" ..." if len(loose) > 3 else "")
        if not self.classes:
            tars = sum(1 for p in self.root.glob("*.tar"))
            hint = (
                f"; it holds {plural(tars, '.tar file')} and no manifest.json: a pack not finished or whose "
                "manifest is missing (run the pack again), or WebDataset shards (read them with gpupipe.WebDataset)"
                if tars
                else f"; it holds {plural(len(loose), 'image')} of its own ({shown}): move them into one folder "
                "per class, or list them with their labels in a list file (gpupipe.FileList); to predict on them "
                f"(no labels), read them with gpupipe.FileList({str(self.root)!r})"
                if loose
                else ""
            )
            raise ValueError(
                f"ImageFolder: {str(self.root)!r} has no class folders (expected root/<class>/<image>){hint}"
            )
        problem = (
            split_folders_message(root, self.classes)
            or segmentation_folders_message(root, self.classes)
            or nested_split_message(str(self.root), self.classes, SPLIT_NAMES)
        )
        if problem:
            raise ValueError(f"ImageFolder: {problem}")
        alike_names_warning("ImageFolder", str(self.root), self.classes)
        if len(self.classes) == 1:
            _warn_one_class(self.root, self.classes[0])
        if loose:
            logger.warning(
                f"ImageFolder: {str(self.root)!r} holds {plural(len(loose), 'image')} outside its class folders "
                f"({shown}): they are left out (torchvision's ImageFolder leaves them out too); if the classes are "
                f"the folders beside it, pass {str(self.root.parent)!r}"
            )
        names: list[str] = []
        labels: list[int] = []
        class_dirs = [os.path.join(str(self.root), name) for name in self.classes]
        ids = [folder_id(d) for d in class_dirs]
        if same_folders_message(self.classes, ids):
            raise ValueError(f"ImageFolder: {same_folders_message(self.classes, ids)}")
        visited, links = {folder_id(str(self.root)), *ids}, list[str]()
        unread: list[str] | None = [] if set(IMAGE_EXTENSIONS) <= set(extensions) else None  # else: chosen
        ignored: list[str] = []
        unlisted: list[tuple[str, str]] = []  # folders without permission: problems, as unreadable files are
        for label, (name, class_dir) in enumerate(zip(self.classes, class_dirs)):
            found = walk_images(class_dir, extensions, visited, unread, ignored, system, links, unlisted)
            if not found:
                logger.warning("ImageFolder: class folder %r holds no images", str(self.root / name))
            names.extend(found)
            labels.extend([label] * len(found))
        if not names:
            raise ValueError(
                f"ImageFolder: no images under {str(self.root)!r} (extensions {', '.join(extensions)})"
                + unreadable_hint(sorted(unread or ()), ignored)
            )
        warn_ignored("ImageFolder", ignored)
        warn_system("ImageFolder", system)
        warn_linked_twice(str(self.root), names, labels, self.classes, links)
        self.names = names
        self.labels = np.asarray(labels, np.int64)
        self.problems = [Skipped(path, why) for path, why in unlisted]
        self.left_out = sorted(unread or ())
        warn_left_out("ImageFolder", self.left_out)


#: Folder names that mean a dataset split, not a class (compared in lower case).
SPLIT_NAMES = ("train", "training", "val", "valid", "validation", "test", "testing")


def split_folders_message(root: PathLike, classes: Sequence[str] | None = None) -> str:
    """Why ``root`` is a folder of splits rather than of classes, or ``""`` if it is not.

    ``root`` is a folder of splits when every one of its (non-hidden) folders
    has a split's name (``train``, ``val``, ``test``, ...) and one holds folders
    of its own (the classes; another may hold images alone, as Kaggle's
    ``test/`` or ImageNet's flat ``val/``): ``ImageFolder`` would silently take
    each split for one class.

    Args:
        root: the folder, as the user named it (the message repeats it).
        classes: its non-hidden folder names, if already listed.
    """
    if classes is None:
        try:
            with os.scandir(os.fspath(root)) as entries:
                classes = sorted(
                    e.name for e in entries if e.name[0] != "." and _is_dir(e) and not is_system_folder(e.name)
                )
        except OSError:
            return ""
    if not classes or any(name.lower() not in SPLIT_NAMES for name in classes):
        return ""
    nested = [name for name in classes if _has_subfolder(os.path.join(root, name))]
    if not nested:  # images without class folders in each (a class "test", CIFAR-100's "train"?)
        return ""
    split = next((name for name in nested if name.lower() == "train"), nested[0])
    shown = os.fspath(root)
    slash = "" if shown.endswith(os.sep) else os.sep
    folders = ", ".join(name + os.sep for name in classes)
    flat = [name + os.sep for name in classes if name not in nested]  # Kaggle's test/, ImageNet's flat val/
    what = f" ({', '.join(flat)} without class folders)" if flat else ""
    each = "each with class folders" if not flat else "not class folders"
    return f"{shown}{slash} holds split folders {folders}{what}, {each}, not classes: pass {shown}{slash}{split}"


#: Folder names of a segmentation dataset's images and of its masks (compared in lower case).
IMAGE_FOLDER_NAMES = ("images", "image", "imgs", "img", "jpegimages", "rgb", "inputs")
MASK_FOLDER_NAMES = (
    "masks",
    "mask",
    "labels",
    "label",
    "annotations",
    "segmentationclass",
    "segmentationobject",
    "segmentations",
    "segmentation",
    "gt",
    "groundtruth",
    "ground_truth",
    "trimaps",
    "targets",
)
#: Images looked at when telling image and mask pairs from classes, and the mask endings looked for.
_PAIR_SAMPLE = 50
_MASK_ENDINGS = (".png", ".PNG", ".bmp", ".tif", ".tiff", ".jpg")


def segmentation_folders_message(root: PathLike, classes: Sequence[str]) -> str:
    """Why ``root`` is a segmentation dataset (an images folder and a masks folder whose files pair by name)
    rather than a folder of classes, or ``""``: ``ImageFolder`` would take the masks for a class of images."""
    image_dirs = [c for c in classes if c.lower() in IMAGE_FOLDER_NAMES]
    mask_dirs = [c for c in classes if c.lower() in MASK_FOLDER_NAMES]
    for images in image_dirs:
        stems = _first_stems(os.path.join(root, images))
        for masks in mask_dirs:
            folder = os.path.join(root, masks)
            if any(os.path.isfile(os.path.join(folder, stem + end)) for stem in stems for end in _MASK_ENDINGS):
                shown = os.fspath(root)
                slash = "" if shown.endswith(os.sep) else os.sep
                return (
                    f"{shown}{slash} holds {images}{os.sep} and {masks}{os.sep}, whose files pair by name (an image "
                    f"and its mask): a segmentation dataset, not two classes: read it with gpupipe.SegmentationFolder("
                    f"{shown + slash + images!r}, {shown + slash + masks!r})"
                )
    return ""


def _first_stems(folder: str) -> list[str]:
    """The name stems of the first ``_PAIR_SAMPLE`` files of ``folder`` (not below it)."""
    stems: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if len(stems) >= _PAIR_SAMPLE:
                    break
                if not entry.name.startswith(".") and not _is_dir(entry):
                    stems.append(os.path.splitext(entry.name)[0])
    except OSError:
        return []
    return stems


def _warn_one_class(root: Path, name: str) -> None:
    """Says that ``root`` has one class folder, so that every label is 0: a warning when that folder holds
    folders (the classes are likely one level down: ``data/images/<class>/...`` given as ``data``), else logged
    (one folder of unlabelled images, as self-supervised training reads them, is a choice)."""
    inner = root / name
    if _has_subfolder(str(inner)):
        logger.warning(
            "ImageFolder: %r has one class folder (%r), so every label is 0; if the classes are the folders "
            "inside it, pass %r",
            str(root),
            name,
            str(inner),
        )
    else:
        logger.info("ImageFolder: %r has one class folder (%r): every label is 0", str(root), name)


def _has_subfolder(path: str) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(not e.name.startswith(".") and _is_dir(e) for e in entries)
    except OSError:
        return False


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


class FileList(FileSource):
    """Images named by ``(path, label)`` pairs or by a list file; one label or several per image.

    A list file is either text, one ``path label`` per line (the path may
    contain spaces; the label is the last field, or all after a tab), or CSV (``.csv``) with
    ``path,label`` rows and an optional header. Labels are class indices
    (ASCII digits), or class names that are then numbered in sorted order.
    Several labels per image (``path cat,dog`` or ``path cat, dog``; in CSV
    ``"cat,dog"`` or ``cat;dog``), or a list of labels in a pair, make a
    multi-label source: batches then carry ``(B, num_classes)`` float32
    multi-hot targets; a label given twice counts once, and an empty list is
    an image of no class (a row of zeros). Relative paths are taken from
    ``root``, by default the list file's folder; a path written on Windows
    (``train\\cat\\1.jpg``) that names no file is read with ``/``. Missing
    files are reported by the loader's scan.

    Args:
        entries: ``(path, label)`` pairs (a label, or a list of labels; NumPy and torch values are read as
            their values), or the path of a list file; or, for images without labels (a test folder to predict
            on), paths alone or a folder (its images in ``ImageFolder``'s order): each image's label is then its
            place in the list and its class name its path (relative to the folder, or as given).
        root: folder that relative paths start from.
        classes: class names; by default the sorted label names, or
            ``"0" .. str(max label)`` for integer labels.
        multi_label: ``None`` (default): multi-label when some entry has several labels (or a list);
            ``True``: multi-label even if every entry has one label (a validation list beside a
            multi-label training list; a label that is one of ``classes`` is that class, spaces and all, not
            its words); ``False``: an entry with several labels is an error.
        suffix: appended to every path (``".jpg"``: a CSV of ids, ``0007``, naming ``0007.jpg``).

    Raises:
        ValueError: a missing list file, a malformed line, labels mixing indices and names, a label
            outside ``classes``, a class named twice, multi-hot rows given as labels, or a Windows absolute
            path (``C:\\...``); the message names the file and line (or the pair's path).
    """

    def __init__(
        self,
        entries: PathLike | Iterable[tuple[PathLike, LabelArg]],
        *,
        root: PathLike | None = None,
        classes: Sequence[str] | None = None,
        multi_label: bool | None = None,
        suffix: str | None = None,
    ) -> None:
        if suffix is not None and (
            not isinstance(suffix, str) or suffix[:1] != "." or len(suffix) < 2 or "/" in suffix
        ):
            raise ValueError(f"FileList: suffix={suffix!r} is not a file ending such as '.jpg' (appended to each path)")
        unlabelled = False
        unlisted: list[tuple[str, str]] = []  # a folder's folders without permission: problems, as ImageFolder's
        if isinstance(entries, (str, os.PathLike)):
            list_file = given_path(entries, "FileList: entries")
            if not list_file.exists():
                raise PathNotFound(f"FileList: list file {str(list_file)!r} does not exist")
            if list_file.is_dir() and root is None:  # a test folder to predict on
                listing, root, unlabelled = (
                    unlabelled_listing(folder_images(list_file, unlisted), classes, multi_label),
                    list_file,
                    True,
                )
            elif not list_file.is_file():
                raise ValueError(f"FileList: list file {str(list_file)!r} is not a file")
            else:
                listing = read_list_file(list_file, empty=multi_label is True)
                root = list_file.parent if root is None else root
        else:
            entries = list(entries)
            unlabelled = is_unlabelled(entries)
            listing = unlabelled_listing(entries, classes, multi_label) if unlabelled else read_pairs(entries)  # type: ignore[arg-type]
        if unlabelled:
            classes, multi_label = list(listing.paths), False
        if not listing.paths:  # an empty list file (or one of a header alone), an empty folder or list
            named = isinstance(entries, (str, os.PathLike))
            raise ValueError(f"FileList: no entries in {str(entries)!r}" if named else "FileList: no entries")
        if suffix is not None:
            listing.paths = [path + suffix for path in listing.paths]
        spaced_labels(listing, multi_label, classes)
        base = str(given_path(root, "FileList: root") if root is not None else Path.cwd())
        if os.sep == "/":  # os.path.join's result, a third of the time on a 1M-line list
            prefix = base.rstrip("/") + "/"
            names = [p if p[:1] == "/" else prefix + p for p in listing.paths]
        else:
            names = [p if os.path.isabs(p) else os.path.join(base, p) for p in listing.paths]
        self.names = merge_repeated(listing, unicode_forms(listing, windows_separators(listing, names)), multi_label)
        check_space_separated(listing, self.names)
        self._written = (base, listing.list_file)  # where the paths start, for refuse_none_found
        self.problems = [Skipped(path, why) for path, why in unlisted]
        sets = label_sets(listing, multi_label)
        if sets is None:
            self.classes, index = numbering(listing.labels, range(len(listing.labels)), listing, classes)  # type: ignore[arg-type]
            self.labels = np.fromiter(map(index, listing.labels), np.int64, len(listing.labels))  # type: ignore[arg-type]
            self.target.check(self, "FileList")
            return
        owners = [i for i, s in enumerate(sets) for _ in s]  # each label's entry, for messages
        self.classes, index = numbering([v for s in sets for v in s], owners, listing, classes)
        self.label_lists = [np.fromiter(map(index, s), np.int64, len(s)) for s in sets]
        self.kind = TargetKind.MULTI_LABEL
        self.columns = ("names", "labels", "label_lists")
        self.labels = np.full(len(sets), -1, np.int64)
        self.target.check(self, "FileList")

    def label_sets(self, indices: Indices) -> list[np.ndarray]:
        return [self.label_lists[i] for i in indices]

    def refuse_none_found(self) -> None:
        """Raises ``ValueError`` naming the ``root=`` to pass if none of the files exists (one stat if one does)."""
        refuse_none_found(self.names, *self._written)

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        result = super()._scan(max_pixels, max_file_size)
        if len(result.bad) == len(self.names):  # every file bad: missing because the paths start elsewhere?
            self.refuse_none_found()
        return result
