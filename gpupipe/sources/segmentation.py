"""``SegmentationFolder``: images and their masks of class ids, paired by relative path."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import env
from ..errors import PathNotFound, Skipped
from ..fileio import read_file
from ..targets import TargetKind
from ..targets.maskfiles import header_problem
from .files import IMAGE_EXTENSIONS, FileSource, PathLike, folder_id, walk_images
from .scan import ScanResult, scan


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
    them by ``on_error``.

    Args:
        images: the folder of images (any depth).
        masks: the folder of masks, laid out like ``images``.
        classes: class names (``classes[id]``); optional.
        ignore_index: the mask value of pixels no class covers (and of padding).
        extensions: image file endings to accept.

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
    ) -> None:
        self.kind = TargetKind.MASK
        self.root = Path(images).expanduser().absolute()
        self.mask_root = Path(masks).expanduser().absolute()
        for what, folder in (("images", self.root), ("masks", self.mask_root)):
            if not folder.exists():
                raise PathNotFound(f"SegmentationFolder: {what} folder {str(folder)!r} does not exist")
            if not folder.is_dir():
                raise ValueError(f"SegmentationFolder: {what} folder {str(folder)!r} is not a folder")
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not 0 <= ignore_index <= 255:
            raise ValueError(f"SegmentationFolder: ignore_index must be an int in 0..255, got {ignore_index!r}")
        self.ignore_index = ignore_index
        self.classes = list(classes) if classes is not None else []
        masks_found, masks_shared = _by_stem(self.mask_root, (".png",))
        # where the folders overlap, compared as real paths: one folder named two ways (a link, "d/../d") is one
        roots = os.path.realpath(self.root), os.path.realpath(self.mask_root)
        overlap = any(os.path.commonpath([a, b]) == b for a, b in (roots, roots[::-1]))
        mask_paths = (path for paths in (masks_found.values(), *masks_shared.values()) for path in paths)
        is_mask = {os.path.realpath(path) for path in mask_paths} if overlap else set()
        found, shared = _by_stem(self.root, tuple(e.lower() for e in extensions), exclude=is_mask)
        self.problems: list[Skipped] = _ambiguous(shared, "images", "which one {} belongs to", self.mask_root)
        self.problems += _ambiguous(masks_shared, "masks", "which one is the mask of {}", self.root)
        self.problems += [
            Skipped(path, "no mask (expected " + str(self.mask_root / (key + ".png")) + ")")
            for key, path in sorted(found.items())
            if key not in masks_found and key not in masks_shared
        ]
        self.problems += [
            Skipped(path, "a mask without an image")
            for key, path in sorted(masks_found.items())
            if key not in found and key not in shared
        ]
        paired = sorted(key for key in found if key in masks_found)
        if not paired:
            raise ValueError(
                f"SegmentationFolder: no image under {str(self.root)!r} has a mask under "
                f"{str(self.mask_root)!r} (a mask is <masks>/<same relative path>/<stem>.png)"
            )
        self.names = [found[key] for key in paired]
        self.mask_names = [masks_found[key] for key in paired]
        self.labels = np.full(len(paired), -1, np.int64)

    def problem_summary(self) -> str:
        n = len(self.problems)
        return f"{n} file{'s' if n != 1 else ''} {'does' if n == 1 else 'do'} not pair up"

    def read_mask(self, index: int) -> np.ndarray:
        return np.frombuffer(bytearray(read_file(self.mask_names[index], self.max_file_size)), np.uint8)

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        images = scan(self.names, max_pixels=max_pixels, max_file_size=max_file_size, cache_dir=env.cache_dir())
        masks = scan(self.mask_names, max_pixels=max_pixels, max_file_size=max_file_size, cache_dir=env.cache_dir())
        bad: dict[int, str] = dict(images.bad)
        for i, reason in masks.bad.items():
            bad.setdefault(i, f"mask {self.mask_names[i]}: {reason}")
        for i in range(len(self)):
            if i in bad:
                continue
            problem = _mask_problem(self.mask_names[i], masks.sizes[i], images.sizes[i])
            if problem:
                bad[i] = problem
        return ScanResult(bad=bad, sizes=images.sizes)


def _by_stem(root: Path, extensions, exclude=frozenset()) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The files under ``root`` (but those in ``exclude``) by relative path without extension:
    ``({key: file}, {key: [files]})``, the second for the keys that several files share
    (``b.jpg`` and ``b.png``, ``c.png`` and ``c.PNG``)."""
    prefix = len(str(root)) + 1
    by_key: dict[str, list[str]] = {}
    for path in walk_images(str(root), extensions, {folder_id(str(root))}):
        if not exclude or os.path.realpath(path) not in exclude:
            by_key.setdefault(os.path.splitext(path[prefix:])[0], []).append(path)
    unique = {key: paths[0] for key, paths in by_key.items() if len(paths) == 1}
    return unique, {key: sorted(paths) for key, paths in by_key.items() if len(paths) > 1}


def _ambiguous(shared: dict[str, list[str]], what: str, question: str, other_root: Path) -> list[Skipped]:
    """One ``Skipped`` per file whose name (without extension) another file shares: neither is paired."""
    problems = []
    for key, paths in sorted(shared.items()):
        names = " and ".join(os.path.basename(p) for p in paths)
        other = str(other_root / (key + (".png" if what == "images" else "")))
        reason = f"{what} {names} have the same name: {question.format(other)} is ambiguous (rename one)"
        problems += [Skipped(path, reason) for path in paths]
    return problems


def _mask_problem(path: str, mask_size: np.ndarray, image_size: np.ndarray) -> str:
    """Why a mask cannot serve its image ('' when it can): its PNG layout (``maskfiles``),
    or its size."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(26)
    except OSError as err:
        return f"mask {path}: cannot read: {err.strerror or err}"
    problem = header_problem(head)
    if problem:
        return f"mask {path} {problem}"
    if tuple(mask_size) != tuple(image_size):
        return (
            f"mask {path} is {mask_size[1]}x{mask_size[0]}, its image {image_size[1]}x{image_size[0]} "
            "(EXIF orientation applied)"
        )
    return ""


__all__ = ["SegmentationFolder"]
