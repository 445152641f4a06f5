"""``SegmentationFolder``: images and their masks of class ids, paired by relative path."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import env
from ..errors import PathNotFound, Skipped, plural
from ..fileio import read_file
from ..targets import TargetKind, maskmap
from ..targets.base import turned_hint
from ..targets.maskfiles import ANIMATED, decode_mask, gray_png, header_problem, ids_problem, is_animated, png_layout
from .base import given_path
from .files import FileSource, PathLike
from .scan import ScanResult, scan
from .walk import IMAGE_EXTENSIONS, OTHER_IMAGE_EXTENSIONS, folder_id, walk_images


class SegmentationFolder(FileSource):
    """Images and masks: ``images/<rel>/<stem>.<ext>`` pairs with ``masks/<rel>/<stem>.png``.

    A mask is a gray PNG (1 to 16 bits) whose values are the class ids, or a
    palette PNG (1 to 8 bits) whose indices are (as Pascal VOC's); see
    ``maskfiles``. ``ignore_index`` marks pixels with no
    class. An image without a mask, a mask without an image, and two images
    or two masks of one name (``b.jpg`` and ``b.png``: which pairs is
    ambiguous) are reported when the source is built (``problems``); the
    masks are never taken for images (both folders may be one). A mask
    is read as displayed (its EXIF orientation applied), and a mask whose values
    cannot be class ids (RGB, alpha, 16-bit ids above 255) or whose size
    differs from its image's is a bad sample: the loader refuses or skips
    them by ``on_error`` (a 16-bit mask is decoded when scanned, to find ids above 255
    before a run). A mask saved as JPEG (lossy: values between classes) is not
    read; the image's "no mask" problem names it.

    ``mask_map`` maps what the masks store to class ids: ``{value: id}`` for gray or palette masks
    (Cityscapes' ``labelIds`` to ``trainIds``; 16-bit values too), ``{(r, g, b): id}`` for colour
    masks (CamVid); a value it does not list makes its mask a bad sample (``targets.maskmap``).
    With ``classes``, a mask id that is neither a class index nor ``ignore_index`` makes its mask
    a bad sample (checked at the mask's first read). ``image_suffix`` / ``mask_suffix`` end the
    file names (before the extension) that pair: ``a_leftImg8bit.png`` with
    ``a_gtFine_labelIds.png``, ``0001.png`` with ``0001_mask.png``; files without the suffix are
    not this source's (Cityscapes' ``_color`` masks beside the ``_labelIds``).

    ``split``, a text file of image names without extension, one a line (Pascal
    VOC's ``ImageSets/Segmentation/train.txt``), reads only the pairs it lists, as
    torchvision's ``VOCSegmentation(image_set=...)``: the other files are not
    problems, a listed name without its image or mask is.

    Args:
        images: the folder of images (any depth).
        masks: the folder of masks, laid out like ``images``.
        classes: class names (``classes[id]``); optional.
        ignore_index: the mask value of pixels no class covers (and of padding).
        extensions: image file endings to accept.
        split: a file listing the names (relative paths without extension) to read.
        mask_map: ``{stored value: class id}`` or ``{(r, g, b): class id}`` (ids 0..255).
        image_suffix: the end of each image's file name before its extension.
        mask_suffix: the end of each mask's file name before ``.png``.

    Raises:
        ValueError: a folder is missing or holds no image with a mask.
    """

    columns = ("names", "labels", "mask_names")

    def __init__(
        self,
        images: PathLike,
        masks: PathLike,
        *,
        classes: Sequence[str] | None = None,
        ignore_index: int = 255,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        split: PathLike | None = None,
        mask_map: dict | None = None,
        image_suffix: str = "",
        mask_suffix: str = "",
    ) -> None:
        self.kind = TargetKind.MASK
        self.root = given_path(images, "SegmentationFolder: images")
        self.mask_root = given_path(masks, "SegmentationFolder: masks")
        for what, folder in (("images", self.root), ("masks", self.mask_root)):
            if not folder.exists():
                raise PathNotFound(f"SegmentationFolder: {what} folder {str(folder)!r} does not exist")
            if not folder.is_dir():
                raise ValueError(f"SegmentationFolder: {what} folder {str(folder)!r} is not a folder")
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not 0 <= ignore_index <= 255:
            raise ValueError(f"SegmentationFolder: ignore_index must be an int in 0..255, got {ignore_index!r}")
        self.ignore_index = ignore_index
        self.classes = list(classes) if classes is not None else []
        for what, suffix in (("image_suffix", image_suffix), ("mask_suffix", mask_suffix)):
            if not isinstance(suffix, str) or "/" in suffix or os.sep in suffix:
                raise ValueError(f"SegmentationFolder: {what} must be the end of a file name (a str), got {suffix!r}")
        self.mask_suffix = mask_suffix
        self.mask_map = maskmap.of(mask_map)
        if self.mask_map is not None and self.classes:
            beyond = sorted(i for i in self.mask_map.ids() if i >= len(self.classes) and i != ignore_index)
            if beyond:
                raise ValueError(
                    f"SegmentationFolder: mask_map gives ids {beyond}, beyond the {len(self.classes)} classes "
                    f"(0..{len(self.classes) - 1}) and ignore_index {ignore_index}"
                )
        self._checked: set[str] = set()  # masks whose ids were checked against the classes
        unlisted: list[tuple[str, str]] = []  # folders that cannot be listed (no permission): problems
        masks_found, masks_shared = _by_stem(self.mask_root, (".png",), suffix=mask_suffix, unlisted=unlisted)
        # where the folders overlap, compared as real paths: one folder named two ways (a link, "d/../d") is one
        roots = os.path.realpath(self.root), os.path.realpath(self.mask_root)
        overlap = any(os.path.commonpath([a, b]) == b for a, b in (roots, roots[::-1]))
        mask_paths = (path for paths in (masks_found.values(), *masks_shared.values()) for path in paths)
        is_mask = {os.path.realpath(path) for path in mask_paths} if overlap else set()
        found, shared = _by_stem(self.root, tuple(e.lower() for e in extensions), is_mask, image_suffix, unlisted)
        self.split = None if split is None else given_path(split, "SegmentationFolder: split", folder=False)
        shut = dict(unlisted)  # one folder under both roots (they overlap) is named once
        self.problems: list[Skipped] = [Skipped(path, why) for path, why in shut.items()]
        self.unlisted = len(shut)
        if self.split is not None:
            listed = {_strip(k, image_suffix): v for k, v in _read_split(self.split).items()}
            for found_or_shared in (found, shared, masks_found, masks_shared):
                for key in [key for key in found_or_shared if key not in listed]:
                    del found_or_shared[key]
            self.problems += [
                Skipped(f"{self.split}:{line}", f"{key} names no image under {str(self.root)!r}")
                for key, line in listed.items()
                if key not in found and key not in shared
            ]
        self.problems += _ambiguous(shared, "images", "which one {} belongs to", self.mask_root, mask_suffix)
        self.problems += _ambiguous(masks_shared, "masks", "which one is the mask of {}", self.root, image_suffix)
        unmasked = sorted(key for key in found if key not in masks_found and key not in masks_shared)
        other = (
            _by_stem(self.mask_root, _NOT_MASKS, suffix=mask_suffix, unlisted=[])[0] if unmasked and not overlap else {}
        )
        self.problems += [
            Skipped(found[key], _no_mask(self.mask_root, key + mask_suffix, other.get(key), shut)) for key in unmasked
        ]
        self.unmasked = sum(not _in_unlisted(str(self.mask_root / key), shut) for key in unmasked)  # split= helps
        self.problems += [
            Skipped(path, "a mask without an image" + _in_unlisted(str(self.root / key), shut))
            for key, path in sorted(masks_found.items())
            if key not in found and key not in shared
        ]
        paired = sorted(key for key in found if key in masks_found)
        if not paired:
            example = ""
            if found and masks_found:  # Cityscapes: aachen_..._leftImg8bit.png beside aachen_..._gtFine_labelIds.png
                example = (
                    f"; an image is {min(found)!r}, a mask {min(masks_found)!r}: pass image_suffix= and mask_suffix= "
                    "(the ends of the names that differ), or rename one side to pair them"
                )
            if other and not masks_found and _swapped(found, other):  # the masks given as images, and back
                example += (
                    "; the images folder holds gray or palette PNGs alone (masks) and the masks folder JPEGs "
                    "(photos): the two folders look swapped: the images come first: "
                    f"gpupipe.SegmentationFolder({os.fspath(masks)!r}, {os.fspath(images)!r})"
                )
            elif other and not masks_found:  # Carvana's <id>_mask.gif: masks, but not PNGs
                example += (
                    f"; masks are read from PNG files only, and the masks folder holds {min(other.values())}"
                    f"{f' and {len(other) - 1} more' if len(other) > 1 else ''}: save them as PNG"
                )
            if shut:
                path, why = next(iter(shut.items()))
                example += f"; {plural(len(shut), 'folder')} cannot be listed ({path}: {why})"
            raise ValueError(
                f"SegmentationFolder: no image under {str(self.root)!r} has a mask under "
                f"{str(self.mask_root)!r} (a mask is <masks>/<same relative path>/<stem>.png{example})"
            )
        self.names = [found[key] for key in paired]
        self.mask_names = [masks_found[key] for key in paired]
        self.labels = np.full(len(paired), -1, np.int64)

    def problem_summary(self) -> str:
        shut = getattr(self, "unlisted", 0)
        n = len(self.problems) - shut
        listed = f"{plural(shut, 'folder')} cannot be listed" if shut else ""
        if not n:
            return listed
        hint = ""
        if getattr(self, "unmasked", 0) and self.split is None:
            hint = (
                " (to read only the images a list names, as Pascal VOC's JPEGImages with "
                "ImageSets/Segmentation/train.txt, pass split=)"
            )
        paired = f"{n} file{'s' if n != 1 else ''} {'does' if n == 1 else 'do'} not pair up{hint}"
        return f"{paired}, and {listed}" if listed else paired

    def read_mask(self, index: int) -> np.ndarray:
        """The encoded mask of sample ``index``: the file's bytes, or (with ``mask_map``) an 8-bit gray PNG
        of its mapped ids.

        Raises:
            gpupipe.fileio.UnreadableFile: the mask cannot be read.
            ValueError: values ``mask_map`` does not list, or ids outside ``classes`` (naming the file).
        """
        path = self.mask_names[index]
        data = read_file(path, self.read_limit)  # the loader's max_file_size, as for the image
        if self.mask_map is not None:
            try:
                data = gray_png(self.mask_map.apply(data))
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None
        elif self.classes and path not in self._checked:
            self._check_ids(path, decode_mask(data))
        return np.frombuffer(bytearray(data), np.uint8)

    def _check_ids(self, path: str, ids: np.ndarray) -> None:
        """Refuses a mask holding an id that is neither a class index nor ``ignore_index``."""
        problem = ids_problem(ids, len(self.classes), self.ignore_index)
        if problem:
            raise ValueError(f"{path} {problem}")
        self._checked.add(path)

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        images = scan(self.names, max_pixels=max_pixels, max_file_size=max_file_size, cache_dir=env.cache_dir())
        masks = scan(self.mask_names, max_pixels=max_pixels, max_file_size=max_file_size, cache_dir=env.cache_dir())
        bad: dict[int, str] = dict(images.bad)
        for i, reason in masks.bad.items():
            bad.setdefault(i, f"mask {self.mask_names[i]}: {reason}")
        for i in range(len(self)):
            if i in bad:
                continue
            problem = _mask_problem(self.mask_names[i], masks.sizes[i], images.sizes[i], self.mask_map, self.names[i])
            if problem:
                bad[i] = problem
        return ScanResult(bad=bad, sizes=images.sizes)


def _by_stem(
    root: Path, extensions, exclude=frozenset(), suffix: str = "", unlisted: list[tuple[str, str]] | None = None
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The files under ``root`` (but those in ``exclude``, and those whose name does not end with
    ``suffix`` before its extension) by relative path without extension and ``suffix``:
    ``({key: file}, {key: [files]})``, the second for the keys that several files share
    (``b.jpg`` and ``b.png``, ``c.png`` and ``c.PNG``). ``unlisted`` receives ``(folder, why)`` of the folders
    that cannot be listed (``walk_images``)."""
    prefix = len(str(root)) + 1
    by_key: dict[str, list[str]] = {}
    for path in walk_images(str(root), extensions, {folder_id(str(root))}, unlisted=unlisted):
        key = os.path.splitext(path[prefix:])[0]
        if suffix and (not key.endswith(suffix) or os.path.basename(key) == suffix):
            continue
        if not exclude or os.path.realpath(path) not in exclude:
            by_key.setdefault(key[: len(key) - len(suffix)], []).append(path)
    unique = {key: paths[0] for key, paths in by_key.items() if len(paths) == 1}
    return unique, {key: sorted(paths) for key, paths in by_key.items() if len(paths) > 1}


def _swapped(found: dict[str, str], other: dict[str, str]) -> bool:
    """Whether the images folder's files (``found``) look like masks and the masks folder's (``other``, files
    not read as masks) like photos: PNGs alone, the first gray or palette, against JPEGs alone."""
    if not all(path.lower().endswith(".png") for path in found.values()):
        return False
    if not all(path.lower().endswith((".jpg", ".jpeg")) for path in other.values()):
        return False
    try:
        with open(min(found.values()), "rb") as file:
            layout = png_layout(file.read(26))
    except OSError:
        return False
    return layout is not None and layout[0] in (0, 3)  # PNG colour types: 0 gray, 3 palette


#: File endings of images that are not read as masks (named when an image's PNG mask is missing): GIF too,
#: as Kaggle's Carvana masks (``<id>_mask.gif``) come.
_NOT_MASKS = tuple(e for e in IMAGE_EXTENSIONS + OTHER_IMAGE_EXTENSIONS + (".gif",) if e != ".png")


def _in_unlisted(path: str, unlisted: dict[str, str]) -> str:
    """``" (its folder F cannot be listed)"`` where ``path`` lies in a folder of ``unlisted``, else ``""``."""
    folder = next((f for f in unlisted if path.startswith(f.rstrip(os.sep) + os.sep)), None)
    return f" (its folder {folder} cannot be listed)" if folder is not None else ""


def _no_mask(mask_root: Path, key: str, other: str | None, unlisted: dict[str, str] | None = None) -> str:
    """Why an image has no mask, naming a mask file of another format where one is there, or the folder that
    cannot be listed where its mask would be."""
    expected = str(mask_root / (key + ".png"))
    reason = "no mask (expected " + expected
    if other is None:
        return reason + ")" + _in_unlisted(expected, unlisted or {})
    lossy = other.lower().endswith((".jpg", ".jpeg", ".webp"))
    why = "lossy compression puts values between the class ids" if lossy else "masks are read from PNG files only"
    return reason + f"; {other} is not read: {why}, save masks as PNG)"


def _read_split(path: Path) -> dict[str, int]:
    """``{name: line number}`` of a split file (blank lines skipped; an image ending is dropped).

    Raises:
        PathNotFound: no such file.
        ValueError: a line that is not one name (VOC's ``ImageSets/Main`` lines are ``name label``).
    """
    if not path.is_file():
        raise PathNotFound(f"SegmentationFolder: split file {str(path)!r} does not exist")
    listed: dict[str, int] = {}
    text = read_file(str(path)).decode("utf-8-sig", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name:
            continue
        if len(name.split()) != 1:
            raise ValueError(
                f"SegmentationFolder: {path} line {number}: {name!r} is not one image name (a split lists one "
                "name a line, as ImageSets/Segmentation/train.txt)"
            )
        stem, ext = os.path.splitext(name)
        listed.setdefault(stem if ext.lower() in IMAGE_EXTENSIONS else name, number)
    return listed


def _strip(name: str, suffix: str) -> str:
    return name[: len(name) - len(suffix)] if suffix and name.endswith(suffix) else name


def _ambiguous(
    shared: dict[str, list[str]], what: str, question: str, other_root: Path, other_suffix: str = ""
) -> list[Skipped]:
    """One ``Skipped`` per file whose name (without extension) another file shares: neither is paired."""
    problems = []
    for key, paths in sorted(shared.items()):
        names = " and ".join(os.path.basename(p) for p in paths)
        other = str(other_root / (key + other_suffix + (".png" if what == "images" else "")))
        reason = f"{what} {names} have the same name: {question.format(other)} is ambiguous (rename one)"
        problems += [Skipped(path, reason) for path in paths]
    return problems


def _mask_problem(path: str, mask_size: np.ndarray, image_size: np.ndarray, table=None, image_path: str = "") -> str:
    """Why a mask cannot serve its image ('' when it can): its PNG layout (``maskfiles``, or
    ``table``'s, a ``MaskMap``), or its size."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(26)
            problem = header_problem(head) if table is None else table.header_problem(head)
            size = os.fstat(fh.fileno()).st_size
            if not problem and is_animated(lambda offset, count: os.pread(fh.fileno(), count, offset), size):
                problem = ANIMATED  # walks the chunks before the pixels: a few small reads
    except OSError as err:
        return f"mask {path}: cannot read: {err.strerror or err}"
    if problem:
        return f"mask {path} {problem}"
    if png_layout(head) == (0, 16) and table is None:  # its ids may exceed 255: found now, not in the middle of a run
        try:
            decode_mask(read_file(path))
        except (OSError, ValueError, SyntaxError) as err:  # UnreadableFile is a ValueError
            return f"mask {path}: {err}"
    if tuple(mask_size) != tuple(image_size):
        return (
            f"mask {path} is {mask_size[1]}x{mask_size[0]}, its image {image_size[1]}x{image_size[0]} "
            f"(EXIF orientation applied){turned_hint(image_path, mask_size, image_size)}"
        )
    return ""


__all__ = ["SegmentationFolder"]
