"""Small synthetic segmentation and detection sets, in the layouts gpupipe reads.

Each scene is a 1/f noise background (class 0, "background") with "dead
leaves" on it (see ``demo``), each leaf an object of a class whose hue
it takes, so a model can learn them. What stays visible of each leaf after
the later ones are drawn over it gives the targets:

* segmentation (``write_segmentation``): ``images/img_XXXXX.jpg`` and
  ``masks/img_XXXXX.png``, an 8-bit mask of class ids (0 = background), as
  [`gpupipe.SegmentationFolder`][gpupipe.SegmentationFolder] reads them;
* detection (``write_detection``): ``images/img_XXXXX.jpg`` and
  ``annotations.json`` in COCO's format (``[x, y, w, h]`` boxes of the visible
  part of each object, categories 1..N), as [`gpupipe.CocoDetection`][gpupipe.CocoDetection]
  reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .photos import Progress, background, chunks, finish, leaves, palette, photo_size, pink_noise, run_parallel

#: Objects smaller than this many visible pixels get no box.
MIN_OBJECT_PIXELS = 64


@dataclass(frozen=True)
class TaskSpec:
    """What to generate: ``images`` scenes of ``classes`` classes (background included for segmentation),
    shorter side in ``[min_side, max_side)``, JPEG ``quality``."""

    images: int = 200
    classes: int = 21
    min_side: int = 256
    max_side: int = 400
    quality: int = 90
    seed: int = 0


def scene(
    rng: np.random.Generator, spec: TaskSpec, objects: int, first_class: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """One scene: the image ``(H, W, 3)`` uint8, the map of which object each pixel shows
    (``(H, W)`` int16, -1 for the background) and each object's class (``first_class`` .. ``classes - 1``)."""
    height, width = photo_size(rng, spec.min_side, spec.max_side, int(spec.max_side * 1.4))
    image = background(rng, height, width, palette(rng.uniform(0, 2 * np.pi)) * 0.4 + 60)
    texture = pink_noise(rng, height, width, 0.85)
    owner = np.full((height, width), -1, np.int16)
    classes: list[int] = []
    for k, (box, mask) in enumerate(leaves(rng, height, width, objects, scale=0.9)):
        label = int(rng.integers(first_class, spec.classes))
        colour = palette(2 * np.pi * label / spec.classes) * 1.6 - 70 + rng.normal(0, 8, 3).astype(np.float32)
        image[box][mask] = colour + (texture[box][mask] * rng.uniform(5, 15))[:, None]
        owner[box][mask] = k
        classes.append(label)
    return finish(image, rng), owner, classes


def _write_segmentation(args) -> None:
    from PIL import Image

    root, spec, indices = args
    for i in indices:
        rng = np.random.default_rng([spec.seed, 1, i])
        image, owner, classes = scene(rng, spec, int(rng.integers(6, 16)), first_class=1)
        mask = np.where(owner >= 0, np.asarray(classes + [0], np.uint8)[owner], 0).astype(np.uint8)
        Image.fromarray(image).save(root / "images" / f"img_{i:05d}.jpg", quality=spec.quality)
        Image.fromarray(mask, mode="L").save(root / "masks" / f"img_{i:05d}.png")


def _annotate(root: Path, spec: TaskSpec, i: int) -> tuple[dict, list[dict]]:
    """Writes one detection image; returns its COCO image record and annotations (ids filled in later)."""
    from PIL import Image

    rng = np.random.default_rng([spec.seed, 2, i])
    image, owner, classes = scene(rng, spec, int(rng.integers(1, 7)), first_class=0)
    name = f"img_{i:05d}.jpg"
    Image.fromarray(image).save(root / "images" / name, quality=spec.quality)
    record = {"id": i + 1, "file_name": name, "height": int(image.shape[0]), "width": int(image.shape[1])}
    annotations = []
    for k, label in enumerate(classes):
        ys, xs = np.nonzero(owner == k)
        if len(ys) < MIN_OBJECT_PIXELS:
            continue
        x0, y0, x1, y1 = int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
        annotations.append(
            {
                "image_id": i + 1,
                "category_id": label + 1,
                "bbox": [x0, y0, x1 - x0, y1 - y0],
                "area": int(len(ys)),
                "iscrowd": 0,
            }
        )
    return record, annotations


def _write_detection(args) -> list[tuple[dict, list[dict]]]:
    root, spec, indices = args
    return [_annotate(root, spec, i) for i in indices]


def write_segmentation(
    root: Path, spec: TaskSpec = TaskSpec(), workers: int | None = None, progress: Progress | None = None
) -> Path:
    """Writes ``root/images`` and ``root/masks`` (see the module's docstring); returns ``root``."""
    root = Path(root)
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    run_parallel(
        _write_segmentation, [(root, spec, piece) for piece in chunks(spec.images)], spec.images, workers, progress
    )
    return root


def write_detection(
    root: Path, spec: TaskSpec = TaskSpec(classes=5), workers: int | None = None, progress: Progress | None = None
) -> Path:
    """Writes ``root/images`` and ``root/annotations.json`` (see the module's docstring); returns ``root``."""
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    found = run_parallel(
        _write_detection, [(root, spec, piece) for piece in chunks(spec.images)], spec.images, workers, progress
    )
    images: list[dict] = []
    annotations: list[dict] = []
    for record, anns in (pair for piece in found for pair in piece):
        images.append(record)
        for ann in anns:
            annotations.append({"id": len(annotations) + 1, **ann})
    categories = [{"id": c + 1, "name": f"shape_{c}"} for c in range(spec.classes)]
    (root / "annotations.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    return root
