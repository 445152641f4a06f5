"""``python -m gpupipe.demo OUT``: writes synthetic demo data into a folder, on all cores, printing its progress.

    python -m gpupipe.demo OUT [--images 1000 | --per-class 100]  (OUT/<class>/<image>.jpg, as the bench's)
    python -m gpupipe.demo OUT --task segmentation      (OUT/images, OUT/masks: gpupipe.SegmentationFolder)
    python -m gpupipe.demo OUT --task detection         (OUT/images, OUT/annotations.json: gpupipe.CocoDetection)

(``python datasets/make_demo.py`` in a clone of the repository is the same command.) The images are "dead leaves"
scenes over 1/f noise (``gpupipe.demo.photos``; classification: sides 300-700 px, about 90 KiB each).
Segmentation masks hold class ids (0 = background) of 21 classes; detection has 5 categories. Prints the folder's
statistics and the example command that trains on it. Bad arguments: one line, ``error: ...``, exit 2.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..cli import ArgumentParser
from . import photos as demo
from . import tasks as demo_tasks

TASKS = ("classification", "segmentation", "detection")


def printer(what: str):
    """A progress callback printing ``what: done/total (seconds)`` on stderr, on one line."""
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        print(
            f"\r{what}: {done}/{total} images ({time.perf_counter() - started:.0f} s)",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return progress


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m gpupipe.demo",
        description="Generate gpupipe demo data (classification, segmentation or detection).",
    )
    parser.add_argument("out", type=Path, help="folder to write into")
    parser.add_argument("--task", choices=TASKS, default="classification")
    parser.add_argument("--images", type=int, help="images in all (default: 1000 classification, 200 otherwise)")
    parser.add_argument("--per-class", type=int, help="classification: images per class (instead of --images)")
    parser.add_argument(
        "--classes",
        type=int,
        help="classes (default: 10 classification, 21 segmentation with 0 = background, 5 detection)",
    )
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (default: 90)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, help="processes (default: all usable cores)")
    args = parser.parse_args(argv)
    classes = (
        args.classes
        if args.classes is not None
        else {"classification": 10, "segmentation": 21, "detection": 5}[args.task]
    )
    images = args.images if args.images is not None else (1000 if args.task == "classification" else 200)
    if args.per_class is not None:
        if args.task != "classification" or args.images is not None:
            parser.error("--per-class: for --task classification only, instead of --images")
        images = args.per_class * classes
    for name, value, low in (
        ("--images", images, 1),
        ("--classes", classes, 2 if args.task == "segmentation" else 1),
        ("--workers", 1 if args.workers is None else args.workers, 1),
    ):
        if value < low:
            parser.error(f"{name} must be >= {low}, got {value}")
    if not 1 <= args.quality <= 100:
        parser.error(f"--quality must be in 1..100, got {args.quality}")
    if classes > 255:
        parser.error(f"--classes must be <= 255, got {classes}")
    progress = printer(f"{args.task} demo")
    if args.task == "classification":
        spec = demo.DemoSpec(classes=classes, per_class=max(1, images // classes), quality=args.quality, seed=args.seed)
        demo.generate(args.out, spec, args.workers, progress)
        print(json.dumps(demo.folder_stats(args.out), indent=2))
        print(f"next: python examples/train_imagefolder.py {args.out}  (or: python -m gpupipe.bench --data {args.out})")
        return 0
    task = demo_tasks.TaskSpec(images=images, classes=classes, quality=args.quality, seed=args.seed)
    if args.task == "segmentation":
        demo_tasks.write_segmentation(args.out, task, args.workers, progress)
        print(f"wrote {images} images and masks ({classes} classes, 0 = background) into {args.out}")
        extra = f" --classes {classes}" if classes != 21 else ""  # the example's default is 21
        print(f"next: python examples/train_segmentation.py {args.out / 'images'} {args.out / 'masks'}{extra}")
    else:
        demo_tasks.write_detection(args.out, task, args.workers, progress)
        print(f"wrote {images} images and {args.out / 'annotations.json'} ({classes} categories) into {args.out}")
        print(f"next: python examples/train_detection.py {args.out / 'images'} {args.out / 'annotations.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
