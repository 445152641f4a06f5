"""``CocoDetection``: images and their boxes from a COCO-format annotation file."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import numpy as np

from .. import env
from ..errors import PathNotFound, Skipped
from ..fileio import UnreadableFile, read_file
from ..targets import TargetKind
from ..targets.base import turned_hint
from .base import given_path
from .files import FileSource, PathLike
from .listpaths import refuse_images_elsewhere
from .scan import ScanResult, scan

_log = logging.getLogger(__name__)

#: How far (pixels) a box may reach past its image before it counts as outside (rounding in annotation tools).
EDGE_TOLERANCE = 1.0


class CocoDetection(FileSource):
    """Images and boxes from COCO-format annotations.

    Boxes ``[x, y, w, h]`` (pixels) become ``xyxy``; categories are numbered
    0, 1, ... in sorted category-id order (``classes[label]`` is the
    category's name). Crowd annotations are left out unless
    ``include_crowd``; images without annotations are kept (with no boxes)
    unless ``keep_empty=False``.

    Malformed annotations are reported when the source is built and the
    loader refuses or skips them by ``on_error``: an annotation with a
    negative size, a box outside its image, an unknown category,
    an ``iscrowd`` other than 0 or 1 (a string ``"0"`` is not) or a box that
    is not 4 numbers makes its image a bad sample (skipping
    leaves the image out rather than train on it with a box missing); an
    annotation of an unknown image id, and an image record whose
    ``file_name`` leads outside ``images`` or whose id repeats, are listed in
    ``problems`` (an id of the other type, ``"1"`` for ``1``, is named so), and
    so are the annotations of a record left out. An absolute ``file_name``
    inside ``images`` is that file; a Windows name (``a\\b.jpg``) is read
    with ``/`` where no file holds the backslash. Categories sharing a name
    stay separate labels, with a warning.
    Image records naming one file make it a bad sample (its
    boxes split between them) and the later ones are listed in ``problems``;
    so does one image id given to several files (the first file is the bad
    sample: whose boxes are whose cannot be told). Ids and sizes written as
    whole floats (``1.0``, as pandas writes int columns) are read as ints.
    Empty boxes (0 wide or tall, or empty once clipped to the image: COCO 2017
    holds a few) are dropped, as torchvision's detection reference drops
    them, logged and listed in ``dropped``; their image is kept. A box
    reaching up to ``EDGE_TOLERANCE`` pixels past its image is clipped to it.
    A crowd annotation that is left out is not checked beyond its ``iscrowd``
    and category.
    An image whose size differs from the one annotated is a bad sample.
    Boxes are in the image's displayed orientation (EXIF applied), as
    gpupipe decodes it.

    Args:
        images: the folder the annotations' ``file_name`` are relative to.
        annotations: the COCO JSON file.
        include_crowd: keep ``iscrowd`` boxes.
        keep_empty: keep images that have no annotation.

    Raises:
        ValueError: a missing folder or file, JSON that is not COCO's shape,
            repeated category ids, or no image left.
    """

    #: ``category_ids[label]``: the COCO category id of each label (torchvision's COCO models' label).
    category_ids: list
    #: ``image_ids[i]``: the COCO image id of sample ``i`` (what COCO's evaluation takes with each prediction).
    image_ids: list
    #: The empty boxes left out (``file#annotation id``, why).
    dropped: list[Skipped]

    columns = ("names", "labels", "boxes", "box_labels", "annotated_sizes", "annotation_errors", "image_ids")

    def __init__(
        self, images: PathLike, annotations: PathLike, *, include_crowd: bool = False, keep_empty: bool = True
    ) -> None:
        self.kind = TargetKind.BOXES
        self.root = given_path(images, "CocoDetection: images")
        self.annotations = given_path(annotations, "CocoDetection: annotations", folder=False)
        if not self.root.exists():
            raise PathNotFound(f"CocoDetection: images folder {str(self.root)!r} does not exist")
        if not self.root.is_dir():
            raise ValueError(f"CocoDetection: images folder {str(self.root)!r} is not a folder")
        data = _load(self.annotations)
        categories = sorted(_records(data, "categories", self.annotations), key=_sort_key)
        label_of = {_hashable(c["id"]): k for k, c in enumerate(categories)}
        if len(label_of) != len(categories):
            raise ValueError(f"CocoDetection: {self.annotations}: category ids repeat")
        self.classes = [str(c.get("name", c["id"])) for c in categories]
        self.category_ids = [_hashable(c["id"]) for c in categories]
        self.problems: list[Skipped] = []
        self.dropped = []
        self._shared_ids: dict = {}  # image id -> the files several records give it
        self._refused: dict = {}  # image id -> why its record is not used
        _shared_names(categories, self.annotations)
        image_of = self._images(_records(data, "images", self.annotations))
        boxes: dict = {i: [] for i in image_of}
        labels: dict = {i: [] for i in image_of}
        errors: dict = {}
        for ann in _records(data, "annotations", self.annotations):
            where = f"{self.annotations}#annotation {ann.get('id', '?')}"
            image = image_of.get(_hashable(ann.get("image_id")))
            if image is None and _hashable(ann.get("image_id")) in self._refused:
                why = self._refused[_hashable(ann.get("image_id"))]
                self.problems.append(
                    Skipped(where, f"the record of image id {ann.get('image_id')!r} is not used ({why})")
                )
                continue
            if image is None:
                self.problems.append(Skipped(where, _unknown("image id", ann.get("image_id"), image_of, "images")))
                continue
            what, box = _box(ann, image, label_of, include_crowd)
            if what == "bad":
                errors.setdefault(image["id"], f"annotation {ann.get('id', '?')}: {box}")
            elif what == "empty":
                self.dropped.append(Skipped(where, str(box)))
            elif what == "box":
                boxes[image["id"]].append(box)
                labels[image["id"]].append(label_of[_hashable(ann["category_id"])])
        for ids in _repeated_files(image_of):
            errors[ids[0]] = f"image ids {', '.join(map(str, ids))} all name this file (its boxes would be split)"
            for i in ids[1:]:
                where = f"{self.annotations}#image {i!r}"
                self.problems.append(Skipped(where, f"names the file of image id {ids[0]!r}"))
                del image_of[i]
        for key, files in self._shared_ids.items():
            if key in image_of:
                errors[key] = (
                    f"image id {key!r} is given to {len(files)} image records ({', '.join(files)}): its annotations "
                    "may be drawn on any of them (give each file its own id)"
                )
        if self.dropped:
            _log.warning(
                "CocoDetection: %s: %d empty boxes left out (as torchvision's reference drops them; the source's "
                "dropped lists them), the first: %s",
                self.annotations,
                len(self.dropped),
                self.dropped[0],
            )
        kept = [i for i in image_of if keep_empty or boxes[i] or i in errors]
        if not kept:
            raise ValueError(f"CocoDetection: {self.annotations} leaves no image to read")
        self.names = [image_of[i]["path"] for i in kept]
        self.boxes = [np.asarray(boxes[i], np.float32).reshape(-1, 4) for i in kept]
        self.box_labels = [np.asarray(labels[i], np.int64) for i in kept]
        self.annotated_sizes = np.array(
            [[image_of[i]["height"], image_of[i]["width"]] for i in kept], np.int64
        ).reshape(-1, 2)
        self.annotation_errors = {k: errors[i] for k, i in enumerate(kept) if i in errors}
        self.labels = np.full(len(kept), -1, np.int64)
        self.image_ids = [image_of[i]["id"] for i in kept]

    def _images(self, records: list[dict]) -> dict:
        """``{image id: record with its confined "path"}``; unusable records go to ``problems``."""
        image_of: dict = {}
        root = os.path.join(str(self.root), "")
        for k, record in enumerate(records):
            where = f"{self.annotations}#image {record['id']!r}"
            name = record["file_name"]
            key = _hashable(record["id"])
            path = _confined(root, name) if isinstance(name, str) and name else ""
            if key is None:
                self.problems.append(
                    Skipped(f"{self.annotations}#images[{k}]", f"id {record['id']!r} is not an int or a string")
                )
            elif key in image_of and image_of[key]["file_name"] == name:
                self.problems.append(Skipped(where, "the image record repeats (the first is used)"))
            elif key in image_of:
                first = image_of[key]["file_name"]
                self._shared_ids.setdefault(key, [first]).append(name)
                self.problems.append(
                    Skipped(where, f"the image id repeats: {first} and {name} (the first is a bad sample)")
                )
            elif not path:
                reason = f"file_name {name!r} is not a path inside {str(self.root)!r}" + _moved_hint(root, name)
                self.problems.append(Skipped(where, reason))
                self._refused[key] = "its file_name is not a path inside the images folder"
            else:
                image_of[key] = dict(
                    record, id=key, path=path, width=_whole(record["width"]), height=_whole(record["height"])
                )
        return image_of

    def problem_summary(self) -> str:
        return f"{len(self.problems)} image or annotation record{'s' if len(self.problems) != 1 else ''} not usable"

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        result = scan(self.names, max_pixels=max_pixels, max_file_size=max_file_size, cache_dir=env.cache_dir())
        bad = dict(result.bad)
        for i, reason in self.annotation_errors.items():
            bad.setdefault(i, reason)
        annotated = self.annotated_sizes
        assert annotated is not None  # set from the annotations in __init__
        for j in np.flatnonzero(np.any(result.sizes != annotated, axis=1)):
            if int(j) not in bad:
                (h, w), (ah, aw) = result.sizes[j], annotated[j]
                bad[int(j)] = (
                    f"the image is {w}x{h}, its annotations say {aw}x{ah} (EXIF orientation applied)"
                    + turned_hint(self.names[j], (ah, aw), (h, w))
                )
        refuse_images_elsewhere("CocoDetection", self.names, str(self.root), bad, str(self.annotations))
        return ScanResult(bad=bad, sizes=result.sizes)


def _load(path: Path) -> dict:
    try:
        data = json.loads(read_file(str(path)))
    except UnreadableFile as err:
        raise ValueError(f"CocoDetection: annotations {path}: {err.reason}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"CocoDetection: {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"CocoDetection: {path} is not a COCO annotation object")
    return data


def _records(data: dict, key: str, path: Path) -> list[dict]:
    """The list ``data[key]``, each entry an object with the fields the reader needs."""
    records = data.get(key, [] if key == "annotations" else None)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"CocoDetection: {path}: '{key}' must be a list of objects")
    need = {"images": ("id", "file_name", "width", "height"), "categories": ("id",), "annotations": ()}[key]
    for k, record in enumerate(records):
        missing = [f for f in need if f not in record]
        if missing:
            hint = ""
            if "file_name" in missing and isinstance(record.get("coco_url"), str):  # LVIS names its images by URL
                named = "/".join(record["coco_url"].split("/")[-2:])
                hint = (
                    f" (an LVIS file? its coco_url is {record['coco_url']!r}: give each image a file_name relative "
                    f"to the images folder, such as {named!r} beside a folder holding val2017/)"
                )
            raise ValueError(f"CocoDetection: {path}: {key}[{k}] has no {', '.join(missing)}{hint}")
        if key == "images" and not all(_positive_int(record[f]) for f in ("width", "height")):
            raise ValueError(f"CocoDetection: {path}: {key}[{k}] width and height must be positive ints")
        if key == "categories" and _hashable(record["id"]) is None:
            raise ValueError(f"CocoDetection: {path}: {key}[{k}] id must be an int or a string")
    return records


def _confined(root: str, name: str) -> str:
    """The path ``file_name`` names under ``root`` (which ends with a separator), ``""`` where it leads
    outside. An absolute path inside ``root`` is that path (Detectron2 writes absolute paths); a Windows
    name (``train\\0001.jpg``) is read with ``/`` where no file holds the backslash in its name."""
    path = os.path.normpath(os.path.join(root, name))
    if "\\" in name and os.sep == "/" and not os.path.isfile(path):
        path = os.path.normpath(os.path.join(root, name.replace("\\", "/")))
    return path if path.startswith(root) else ""


def _moved_hint(root: str, name: str) -> str:
    """Where an absolute ``file_name`` of another machine ends in a file inside ``root``, says which part to
    keep (nothing is read from the name's own place)."""
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    for k in range(1, len(parts)):
        tail = "/".join(parts[k:])
        if ".." not in parts[k:] and os.path.isfile(os.path.join(root, tail)):
            return f" (written on another machine? {tail!r} is in the folder: write file_names relative to it)"
    return ""


def _shared_names(categories: list[dict], path: Path) -> None:
    """Warns of a name given to several category ids (two datasets merged): each id stays its own label."""
    ids_of: dict[str, list] = {}
    for label, category in enumerate(categories):
        ids_of.setdefault(str(category.get("name", category["id"])), []).append((label, category["id"]))
    for name, pairs in ids_of.items():
        if len(pairs) > 1:
            _log.warning(
                "CocoDetection: %s: category name %r is given to ids %s (labels %s): they are trained as "
                "separate classes (map them to one id in the file to merge them)",
                path,
                name,
                ", ".join(str(c) for _, c in pairs),
                ", ".join(str(k) for k, _ in pairs),
            )


def _repeated_files(image_of: dict) -> list[list]:
    """The image ids that name one file, per file named more than once (in record order)."""
    by_path: dict[str, list] = {}
    for key, record in image_of.items():
        by_path.setdefault(record["path"], []).append(key)
    return [ids for ids in by_path.values() if len(ids) > 1]


def _hashable(value) -> object | None:
    """An id usable as a key: an int or a string, a whole float as its int (``1.0`` is ``1``, as a
    Python dict, pycocotools', finds it), else ``None``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _whole(value):
    """A whole float as its int (``640.0``: ``640``); anything else as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _sort_key(category: dict) -> tuple:
    """Category ids in numeric order (ints first), then strings."""
    cid = _hashable(category["id"])
    return (0, cid, "") if isinstance(cid, int) else (1, 0, cid)


def _positive_int(value) -> bool:
    value = _whole(value)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _unknown(what: str, value, known: dict, whose: str) -> str:
    """Why an id (``what``: "image id", "category") names nothing in ``known``, naming an id of the other
    type that would (``"1"`` for ``1``, ``1`` for ``"1"``); ``whose`` names the records ("images")."""
    reason = f"unknown {what} {value!r}"
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and int(value) in known:
        return reason + f" (a string; the {whose}' ids are numbers: {int(value)} is one)"
    key = _hashable(value)
    if key is not None and not isinstance(key, str) and str(key) in known:
        return reason + f" (a number; the {whose}' ids are strings: {str(key)!r} is one)"
    return reason


def _box(ann: dict, image: dict, label_of: dict, include_crowd: bool) -> tuple[str, object]:
    """What an annotation gives: ``("box", xyxy)``, ``("empty", why)`` (dropped, as torchvision's
    reference drops empty boxes), ``("crowd", None)`` (left out) or ``("bad", why it is malformed)``."""
    if _hashable(ann.get("category_id")) not in label_of:
        return "bad", _unknown("category", ann.get("category_id"), label_of, "categories")
    if ann.get("iscrowd", 0) not in (0, 1):  # a string "0" would be taken for a crowd
        return "bad", f"iscrowd must be 0 or 1, got {ann.get('iscrowd')!r}"
    if ann.get("iscrowd", 0) and not include_crowd:
        return "crowd", None
    bbox = ann.get("bbox")
    if (
        not isinstance(bbox, list)
        or len(bbox) != 4
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)
    ):
        return "bad", f"bbox must be 4 numbers [x, y, w, h], got {bbox!r}"
    x, y, w, h = (float(v) for v in bbox)
    if w < 0 or h < 0:
        return "bad", f"box of size {w:g}x{h:g} (sizes must be positive)"
    if w == 0 or h == 0:
        return "empty", f"box [{x:g}, {y:g}, {w:g}, {h:g}] is empty (0 wide or tall)"
    width, height = image["width"], image["height"]
    if x < -EDGE_TOLERANCE or y < -EDGE_TOLERANCE or x + w > width + EDGE_TOLERANCE or y + h > height + EDGE_TOLERANCE:
        return "bad", f"box [{x:g}, {y:g}, {w:g}, {h:g}] lies outside its {width}x{height} image"
    x0, x1 = (min(max(0.0, v), float(width)) for v in (x, x + w))
    y0, y1 = (min(max(0.0, v), float(height)) for v in (y, y + h))
    if x1 <= x0 or y1 <= y0:
        return "empty", f"box [{x:g}, {y:g}, {w:g}, {h:g}] is empty once clipped to its {width}x{height} image"
    return "box", [x0, y0, x1, y1]


__all__ = ["CocoDetection", "EDGE_TOLERANCE"]
