"""python -m gpupipe.bench: one AMP training loop fed by every backend, measured side by side.

With no arguments it builds a demo image folder once (cached), then for
the tutorial DataLoader baseline and every gpupipe backend this machine has
it measures the loader alone, the training loop (images/s and the share of
time spent waiting for data) and the ceiling (the loop on one batch kept on
the device), and says which backends are input-bound and why.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from .. import env
from ..amp import AmpChoice, choose_amp, cpu_info, probe_seconds, torch_build
from ..cli import user_errors
from ..demo import photos as demo
from ..errors import plural
from ..progress import LOG_EVERY_S, Progress, is_terminal
from ..remote.urls import redact
from ..sources import as_source
from . import report
from .advice import conclude
from .args import BenchError, choose_backends, parse_args, unavailable
from .estimate import duration, estimate, revised, time_demo_image
from .monitor import ResourceMonitor
from .preflight import (
    check_batch,
    check_cache_dir,
    check_memory,
    check_model,
    check_out,
    check_out_outside,
    data_stats,
    refuse_bad_files,
)
from .runner import BASELINE, BenchConfig, TrainStep, kept_batch, rounds, run

logger = logging.getLogger("gpupipe.bench")


def _log_to_stderr() -> None:
    """gpupipe's own INFO lines on stderr (not other libraries', e.g. matplotlib's font cache notices): one
    handler, writing to whatever ``sys.stderr`` is when it writes, however often the bench runs in a process."""
    root = logging.getLogger("gpupipe")
    if not any(isinstance(h, _Stderr) for h in root.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
        root.addHandler(handler)
    root.setLevel(logging.INFO)


class _Stderr(logging.StreamHandler):
    """A ``StreamHandler`` on the current ``sys.stderr`` (a notebook's or a test's capture may replace it)."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def missing_extras() -> list[str]:
    """The modules of the ``bench`` extra that this Python cannot import (nvidia-ml-py is optional)."""
    missing = []
    for name in ("psutil", "matplotlib"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main(argv: list[str] | None = None) -> int:
    """Runs the bench; every bad argument or input is one line, ``error: ...``, and exit status 2; Ctrl-C
    before the first repeat ends is one line and exit status 130 (after it: the repeats done are reported)."""
    try:
        return _main(argv)
    except BenchError as err:
        message = str(err)
    except user_errors() as err:  # bad data, a full disk: the library's own one-line message
        message = str(err)
    except KeyboardInterrupt as err:
        note = str(err.args[0]) if err.args and str(err.args[0]).startswith("; ") else ""  # earlier_results'
        print(f"\ninterrupted (Ctrl-C) before the first repeat ended: nothing measured{note}", file=sys.stderr)
        return INTERRUPTED
    print(f"error: {message}".splitlines()[0], file=sys.stderr)
    return 2


#: The exit status after Ctrl-C (128 + SIGINT, as a shell gives).
INTERRUPTED = 130


def earlier_results(out: Path, since: float) -> str:
    """``; OUT/bench.json is an earlier run's (...), not this one's`` where ``--out`` holds a ``bench.json``
    older than ``since`` (``time.time()`` when this run began): a run that ends without figures leaves it as
    it was, and a script reading it must not take it for this run's; ``""`` otherwise."""
    path = Path(out) / "bench.json"
    try:
        written = path.stat().st_mtime
    except OSError:
        return ""
    if written >= since:
        return ""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(written))
    return f"; {path} is an earlier run's (written {when}), not this one's"


def choose_precision(args: argparse.Namespace, device: torch.device, train_step: TrainStep | None, kept) -> tuple:
    """The machine's recorded autocast choice (see ``gpupipe.amp``) and seconds per training step."""
    if train_step is None:
        return AmpChoice("off", "no training measured (--no-train)"), None

    images, labels = kept

    def step(dtype: torch.dtype) -> None:
        train_step.run(images, labels, dtype)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    amp = choose_amp(device, args.amp)
    step_s = probe_seconds(step, (amp.dtype,), repeats=2)[0]
    train_step.use(amp)
    return amp, step_s


def _main(argv: list[str] | None) -> int:
    _log_to_stderr()
    args = parse_args(argv)
    missing = missing_extras()
    if missing:
        raise BenchError(
            f"python -m gpupipe.bench needs the bench extra (missing: {', '.join(missing)}): "
            "pip install 'gpupipe[bench]'"
        )
    began = time.time()
    try:
        return _run(args)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(earlier_results(args.out, began)) from None  # main() prints it
    except BenchError as err:  # every backend failed, say
        raise BenchError(f"{err}{earlier_results(args.out, began)}") from None
    except (torch.cuda.OutOfMemoryError, MemoryError, RuntimeError) as err:
        if not isinstance(err, (torch.cuda.OutOfMemoryError, MemoryError)) and "can't allocate memory" not in str(err):
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise BenchError(
            f"out of memory training {args.model} at --batch-size {args.batch_size}, --image-size {args.image_size} "
            f"({first}): pass a smaller --batch-size or --image-size, or another --model"
        ) from None


def demo_spec(args: argparse.Namespace) -> demo.DemoSpec:
    """The demo set of ``--demo-images N``: exactly N images, over 10 classes (N of one image each below 10)."""
    return demo.DemoSpec(classes=min(10, args.demo_images), images=args.demo_images)


def _run(args: argparse.Namespace) -> int:
    """The bench, its arguments checked."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    started = time.perf_counter()
    check_memory(args.batch_size, args.image_size)
    if not args.no_train:
        check_model(args.model)
    spec = demo_spec(args)
    source, packed = None, False
    if args.data is not None:
        source = _data_source(args.data)
        packed = getattr(source, "manifest", None) is not None
        target = source.target  # a classifier trains on one target per image, not on masks or boxes
        if target.moves_with_pixels and not args.no_train:
            raise BenchError(
                f"--data {redact(args.data)} holds {target.kind.title}: the bench's training loop is a "
                "classifier's, on class labels; pass --no-train to measure the loaders alone"
            )
        if not packed:
            refuse_bad_files(source, args.data)
        check_batch(len(source), args.batch_size, redact(args.data))
    else:
        check_batch(spec.total, args.batch_size, None)
    num_classes = len(source.classes) if source is not None else spec.classes
    names = choose_backends(args.backends, device.type == "cuda")
    if packed and BASELINE in names:
        if names == [BASELINE]:
            raise BenchError(
                f"--backends: the baseline reads only image folders, and --data {redact(args.data)} is packed: "
                "name a gpupipe backend too"
            )
        logger.info(
            "%s is packed: the tutorial baseline reads only image folders, so it is left out", redact(args.data)
        )
        names.remove(BASELINE)
    if source is not None and not packed:
        check_out_outside(args.out, Path(args.data))
    check_out(args.out)  # after the data's checks: a refused --data leaves no folder behind
    if args.data is None and not demo.is_built(demo.demo_root(args.cache_dir, spec)):
        check_cache_dir(args.cache_dir, from_env=args.cache_dir == env.cache_dir())
    config = BenchConfig(
        data=args.data if args.data is not None else demo.demo_root(args.cache_dir, spec),
        backends=tuple(names),
        model=args.model,
        batch_size=args.batch_size,
        image_size=args.image_size,
        steps=args.steps,
        train_steps=args.train_steps,
        warmup=args.warmup,
        train_warmup=args.train_warmup,
        repeats=args.repeats,
        amp=args.amp,
        threads=args.threads,
        device=device,
        dtype=args.dtype,
        measure_training=not args.no_train,
        augment=args.augment,
    )
    train_step, kept = None, None
    if config.measure_training:
        train_step, kept = TrainStep(config, num_classes), kept_batch(config, num_classes)
    amp, step_s = choose_precision(args, device, train_step, kept)
    config = replace(config, amp=amp.name)
    if config.measure_training:
        logger.info("mixed precision: %s (%s)", str(amp.dtype).replace("torch.", ""), amp.reason)
    need_demo = args.data is None and not demo.is_built(Path(config.data))
    demo_images = spec.total if need_demo else 0
    planned = estimate(
        config, demo_images=demo_images, demo_image_s=time_demo_image(), step_s=step_s, workers=env.cores()
    )
    logger.info(
        "this bench (%s mode) will take %s: %s%s of %s%s; the progress bar gives the real ETA",
        args.mode,
        duration(planned.total + time.perf_counter() - started),
        f"{demo_images} demo images first, " if need_demo else "",
        plural(rounds(config), "timed round"),
        plural(config.repeats, "repeat"),
        ", re-estimated after the first repeat" if config.repeats > 1 else "",
    )
    if args.data is None:
        bar = _DemoProgress() if need_demo else None
        try:
            demo.ensure_demo(args.cache_dir, spec, progress=bar)
        finally:  # Ctrl-C: the bar is closed here, not redrawn at exit below the interrupted line
            if bar is not None:
                bar.close()
    stats = data_stats(source if source is not None else as_source(config.data))
    logger.info(
        "data: %s: %s in %s, mean %.1f KiB (median %.1f), mean %dx%d px, sides %d-%d px",
        redact(config.data),
        plural(stats["images"], "image"),
        plural(stats["classes"], "class", "classes"),
        stats["mean_kib"],
        stats["median_kib"],
        stats["mean_width"],
        stats["mean_height"],
        stats["min_side"],
        stats["max_side"],
    )
    logger.info(
        "device %s; backends %s; model %s; batch %d",
        device,
        ", ".join(config.backends),
        config.model,
        config.batch_size,
    )
    figures, loads, measured_s = _measure(config, train_step, kept)
    settings = {k: (str(v) if isinstance(v, (Path, torch.device)) else v) for k, v in asdict(config).items()}
    settings["data"] = redact(settings["data"])  # a URL's password or token never reaches bench.json
    settings["mode"] = args.mode
    elapsed = time.perf_counter() - started
    full = {
        "machine": {**report.machine_info(device), "cpu_flags": cpu_info()["flags"], "torch_build": torch_build()},
        "amp": amp.as_dict(),
        "settings": settings,
        "data": stats,
        **figures,
        "load_during": {"load_average": loads["load"], "other_processes_cpu_percent": loads["others"]},
        "estimate": {
            "planned_s": round(planned.total, 1),
            "rounds_planned_s": round(planned.rounds, 1),
            "rounds_measured_s": round(measured_s, 1),
        },
        "elapsed_s": round(elapsed, 1),
    }
    full["unavailable"] = unavailable(device.type == "cuda")  # what advice naming them must say
    full["machine"]["label"] = report.hardware_label(full["machine"])
    full["reliability"] = report.reliability(full)
    conclude(full)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(full, args.out / "bench.json")
    report.write_chart(full, args.out / "bench.png")
    logger.info(
        "wrote %s and %s (%.0f s)", args.out / "bench.json", args.out / "bench.png", time.perf_counter() - started
    )
    print(report.measured_line(full))
    print(report.table(full))  # its last line names the fastest backend
    return INTERRUPTED if "interrupted" in full else 0


def _data_source(data):
    """``--data`` as a gpupipe source (a folder, a pack, a pack's URL).

    Raises:
        BenchError: naming ``--data``: it is missing, not a folder of classes or a pack, or a list file.
    """
    try:
        source = as_source(data)
    except ValueError as err:
        raise BenchError(f"--data: {err}") from None
    if not isinstance(data, str) and Path(data).is_file():
        raise BenchError(
            f"--data: {data} is a list file; the bench reads an image folder (root/<class>/<image>) or a "
            f"pack: pack it first (python -m gpupipe.pack {data} PACKED) and pass --data PACKED"
        )
    return source


class _DemoProgress:
    """The demo images' progress (``gpupipe.progress``: a bar on a terminal, else a log line every few seconds):
    called with ``(done, total)``; ``close()`` ends it (at once, on Ctrl-C)."""

    def __init__(self) -> None:
        self.progress = Progress("demo images", unit="image", logger=logger)

    def __call__(self, done: int, total: int) -> None:
        self.progress.total = total
        self.progress.update(done - self.progress.done)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.progress.mode != "closed":
            self.progress.close()


def _measure(config: BenchConfig, train_step: TrainStep | None, kept) -> tuple:
    """Runs the rounds under the machine-load monitor; prints the revised estimate after the first repeat.
    Where stderr is not a terminal (a log file, a CI job) the rounds' bar is redrawn every ``LOG_EVERY_S``
    seconds at most, not at every round."""
    from tqdm import tqdm

    load = ResourceMonitor(interval=1.0)
    began = time.perf_counter()

    def on_repeat(done: int) -> None:
        if done == 1 and config.repeats > 1:
            so_far = time.perf_counter() - began
            left = duration(revised(config, 1, so_far))
            progress.write(f"first repeat measured in {so_far:.0f} s: revised estimate {left} left", file=sys.stderr)

    every = 0.1 if is_terminal(sys.stderr) else LOG_EVERY_S
    with load, tqdm(total=rounds(config), unit="round", desc="bench", file=sys.stderr, mininterval=every) as progress:
        figures = run(config, progress, train_step, kept, on_repeat)
    loads: dict = {
        "load": [round(os.getloadavg()[0], 2)] if hasattr(os, "getloadavg") else [0.0],
        "others": load.summary()["other_processes_cpu_percent"] or 0.0,
    }
    return figures, loads, time.perf_counter() - began


if __name__ == "__main__":
    sys.exit(main())
