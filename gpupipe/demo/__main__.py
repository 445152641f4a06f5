"""``python -m gpupipe.demo OUT``: writes synthetic demo data into a folder, on all cores, printing its progress.

    python -m gpupipe.demo OUT [--images 1000 | --per-class 100]  (OUT/<class>/<image>.jpg, as the bench's)
    python -m gpupipe.demo OUT --task segmentation      (OUT/images, OUT/masks: gpupipe.SegmentationFolder)
    python -m gpupipe.demo OUT --task detection         (OUT/images, OUT/annotations.json: gpupipe.CocoDetection)

(``python datasets/make_demo.py`` in a clone of the repository is the same command.) The images are "dead leaves"
scenes over 1/f noise (``gpupipe.demo.photos``; classification: sides 300-700 px, about 90 KiB each).
Segmentation masks hold class ids (0 = background) of 21 classes; detection has 5 categories. Prints the folder's
statistics and the example command that trains on it, runnable from the current folder (the script's path relative
to it, or absolute; in a pip install, without ``examples/``, the line of a script that reads it). OUT must be new or
empty (the same classification set there already is reused; a set that Ctrl-C left unfinished is written anew).
Bad arguments: one line, ``error: ...``, exit 2; Ctrl-C: one line, exit 130.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..cli import EXIT_ERROR, ArgumentParser, message, user_errors
from ..fileio import shell_word
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


#: Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: Written into OUT while the demo writes it, removed when done: a rerun finds its own unfinished set.
UNFINISHED = ".demo-unfinished"
#: What the demo writes into OUT (every task): an unfinished set's own entries, removed by the rerun.
_OURS = re.compile(r"class_\d+|images|masks|annotations\.json|demo\.json")


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the demo set; exit status 0. A user error ends it with one ``error:`` line, status 2; Ctrl-C with
    one line saying that OUT is unfinished and that the same command writes it anew, status 130."""
    global _interrupted_out
    _interrupted_out = None
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(args)
    except user_errors() as err:  # found after the arguments were read (a folder that cannot be read...)
        print(f"error: {message(err)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        out = _interrupted_out
        where = f"{shell_word(out)} is unfinished; " if out is not None else ""
        print(f"\ninterrupted: {where}run the same command again to write it anew", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


#: OUT while the demo is writing into it (``None`` before and after), for the line printed on Ctrl-C.
_interrupted_out: Path | None = None


def _main(argv: Sequence[str]) -> int:
    global _interrupted_out
    parser = ArgumentParser(
        prog="python -m gpupipe.demo",
        description="Generate gpupipe demo data (classification, segmentation or detection).",
    )
    parser.add_argument("out", type=home_path, metavar="OUT", help="folder to write into")
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
    args = parser.parse_args(list(argv))
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
    if args.classes is None and args.task == "classification":
        classes = max(1, min(classes, images))  # --images 5: 5 classes of one image
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
        if images < classes:
            parser.error(f"--images {images} cannot fill --classes {classes}: pass --classes {images} or fewer")
        spec = demo.DemoSpec(classes=classes, images=images, quality=args.quality, seed=args.seed)
        if out_folder(parser, args.out, spec):
            _interrupted_out = args.out
            demo.generate(args.out, spec, args.workers, progress)
            finished(args.out)
        print(json.dumps(demo.folder_stats(args.out), indent=2))
        print(next_step(args.task, args.out, EXAMPLES))
        return 0
    task = demo_tasks.TaskSpec(images=images, classes=classes, quality=args.quality, seed=args.seed)
    out_folder(parser, args.out, None)
    _interrupted_out = args.out
    if args.task == "segmentation":
        demo_tasks.write_segmentation(args.out, task, args.workers, progress)
        finished(args.out)
        print(f"wrote {images} images and masks ({classes} classes, 0 = background) into {args.out}")
        extra = f" --classes {classes}" if classes != 21 else ""  # the example's default is 21
        print(next_step(args.task, args.out, EXAMPLES, extra))
    else:
        demo_tasks.write_detection(args.out, task, args.workers, progress)
        finished(args.out)
        print(f"wrote {images} images and {args.out / 'annotations.json'} ({classes} categories) into {args.out}")
        print(next_step(args.task, args.out, EXAMPLES))
    return 0


def out_folder(parser: ArgumentParser, out: Path, spec: demo.DemoSpec | None) -> bool:
    """Makes OUT, a new or empty folder; ``False`` when it holds the classification set ``spec`` already (its
    ``demo.json``: nothing to write). Ends the command naming OUT when it is a file, cannot be made, or holds
    other files (the demo data would mix with them)."""
    file = next((p for p in [out, *out.parents] if p.exists() and not p.is_dir()), None)
    if file is not None:
        parser.error(f"OUT {out}: {file} is a file; name a folder (it is made if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        if (out / UNFINISHED).is_file():  # an interrupted run's own set: written anew
            for entry in out.iterdir():
                if _OURS.fullmatch(entry.name):
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            (out / UNFINISHED).unlink()
        held = sorted(p.name for p in out.iterdir())
        if not held:
            (out / UNFINISHED).write_text("python -m gpupipe.demo is writing this folder; rerun it to finish\n")
    except OSError as err:
        parser.error(f"OUT {out}: cannot make the folder ({err.strerror or err})")
    if not held:
        return True
    marker = out / "demo.json"
    if spec is not None and marker.is_file():
        try:
            same = json.loads(marker.read_text()) == {"version": demo.DEMO_VERSION, **asdict(spec)}
        except (OSError, ValueError):
            same = False
        if same:
            print(f"{out} already holds this demo set ({marker}): nothing written", file=sys.stderr)
            return False
    parser.error(
        f"OUT {out} holds files already ({', '.join(held[:3])}{' ...' if len(held) > 3 else ''}): the demo data "
        "would mix with them; pass a new or empty folder"
    )


def home_path(value: str) -> Path:
    """OUT, with a ``~`` the shell left (quoted, or set in a ``.env`` file) read as the home folder, as gpupipe's
    loaders read it (else a folder named ``~`` is made in the current one)."""
    return Path(value).expanduser()


def finished(out: Path) -> None:
    """Marks OUT's demo set complete (removes ``UNFINISHED``)."""
    (out / UNFINISHED).unlink(missing_ok=True)


#: The example scripts of a clone of gpupipe's repository (``None`` in a pip install, which has none).
EXAMPLES = next(
    (p for p in [Path(__file__).resolve().parents[2] / "examples"] if (p / "train_imagefolder.py").is_file()), None
)
#: Per task: the example's name, its arguments under OUT, and the source that reads the data in a script.
_NEXT = {
    "classification": ("imagefolder", ("",), 'gpupipe.loader("{out}", "train", batch_size=32)'),
    "segmentation": (
        "segmentation",
        ("images", "masks"),
        'gpupipe.loader(gpupipe.SegmentationFolder("{out}/images", "{out}/masks"), '
        "gpupipe.presets.segmentation_train(crop=256, base=288), batch_size=8)",
    ),
    "detection": (
        "detection",
        ("images", "annotations.json"),
        'gpupipe.loader(gpupipe.CocoDetection("{out}/images", "{out}/annotations.json"), '
        "gpupipe.presets.detection_ssd(320), batch_size=8)",
    ),
}


def from_here(path: Path) -> Path:
    """``path`` as the current folder reaches it: relative where it is inside that folder (``examples/x.py`` in the
    clone), else absolute (the command was run elsewhere: a path relative to the clone would name no file)."""
    try:
        return path.relative_to(Path.cwd())
    except (ValueError, OSError):  # OSError: the current folder was deleted
        return path


def next_step(task: str, out: Path, examples: Path | None, extra: str = "") -> str:
    """The line saying what to run on the data written to ``out`` (``out`` as the user wrote it: from the current
    folder): the example script of a clone, by a path that works from the current folder, else (a pip install,
    without ``examples/``) the bench or the line of a script that reads it."""
    name, parts, script = _NEXT[task]
    bench = f"python -m gpupipe.bench --data {shell_word(out)}" if task == "classification" else ""
    if examples is not None:
        paths = " ".join(shell_word(out / part if part else out) for part in parts)
        run = shell_word(from_here(examples / f"train_{name}.py"))
        return f"next: python {run} {paths}{extra}" + (f"  (or: {bench})" if bench else "")
    code = script.format(out=out.as_posix())
    return (
        f"next: {bench + '; or ' if bench else ''}in a script: {code} (the example scripts, examples/train_{name}.py, "
        "are in a clone of gpupipe's repository)"
    )


if __name__ == "__main__":
    sys.exit(main())
