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
from typing import Dict, List, Optional

import torch

from .. import backends as gp_backends
from .. import env, shardfmt
from ..amp import AMP_CHOICES, AmpChoice, choose_amp, cpu_info, probe_seconds, torch_build
from ..cli import user_errors
from ..env import cache_dir
from ..errors import Error as GpupipeError
from ..sources import as_source
from . import demo, report
from .estimate import duration, estimate, revised, time_demo_image
from .monitor import ResourceMonitor
from .runner import BASELINE, BenchConfig, TrainStep, kept_batch, rounds, run

logger = logging.getLogger("gpupipe.bench")

#: Per mode and device: timed repeats, loader-alone batches per repeat, training steps per repeat.
MODES = {
    "quick": {"cpu": dict(repeats=3, steps=20, train_steps=6), "cuda": dict(repeats=3, steps=40, train_steps=30)},
    "thorough": {"cpu": dict(repeats=5, steps=20, train_steps=12), "cuda": dict(repeats=5, steps=40, train_steps=60)},
}


class BenchError(GpupipeError):
    """A bad argument or input: printed as one line, ``error: ...``, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise BenchError(message)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The flags, with the machine's and the mode's defaults filled in.

    Raises:
        BenchError: a bad flag or value.
    """
    on_gpu = torch.cuda.is_available()
    parser = _Parser(
        prog="python -m gpupipe.bench",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=(
            "Defaults depend on the machine and the mode. --quick (the default): 3 repeats; with a GPU, resnet50, "
            "batch 256, 40 loader / 30 train steps and a demo set of 50 batches; without, shufflenet_v2_x0_5, "
            "batch 32, 20 loader / 6 train steps, 1000 images. --thorough: 5 repeats and twice the training steps."
        ),
    )
    parser.add_argument("--data", type=Path, help="image folder root/<class>/<image>, or a folder packed by "
                                                  "python -m gpupipe.pack (no baseline then) (default: the demo data)")
    parser.add_argument(
        "--backends", default="all",
        help=f"comma-separated from {BASELINE},{','.join(gp_backends.BACKENDS)}; 'all' = every one this machine has",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="3 repeats: medians good to ~10-20 %% on a quiet machine, a few minutes (the default)")
    mode.add_argument("--thorough", dest="mode", action="store_const", const="thorough",
                      help="5 repeats and twice the training steps: tighter ranges, about twice as long")
    parser.add_argument("--model",
                        help="torchvision model name (default: resnet50 on a GPU, shufflenet_v2_x0_5 on a CPU)")
    parser.add_argument("--batch-size", type=int, help="images per batch (default: 256 on a GPU, 32 on a CPU)")
    parser.add_argument("--image-size", type=int, default=224, help="train-preset crop size in px (default: 224)")
    parser.add_argument("--steps", type=int,
                        help="batches per loader-alone repeat, fewer where warm-up and timing would not fit in one "
                             "epoch (default: 40 GPU / 20 CPU)")
    parser.add_argument("--train-steps", type=int, help="steps per training repeat (default: by mode, see below)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="loader-alone batches before each timed repeat; more than the loader's prefetch "
                             "queue, so that no repeat starts on free, already-prepared batches (default: 10)")
    parser.add_argument("--train-warmup", type=int, default=3,
                        help="training steps before each timed repeat (default: 3)")
    parser.add_argument("--repeats", type=int,
                        help="timed repeats, interleaved across backends; medians and min-max are reported "
                             "(default: 3 quick, 5 thorough)")
    parser.add_argument("--amp", choices=AMP_CHOICES, default="auto",
                        help="autocast dtype; auto: bf16 on a GPU that has it, and on a CPU only where a short "
                             "probe finds it faster than float32 (CPUs without avx512_bf16/amx_bf16: float32); "
                             "fp16 uses a GradScaler; off: float32 (default: auto)")
    parser.add_argument("--threads", type=int,
                        help="gpupipe's DALI threads / DataLoader workers (default: the usable CPU cores; "
                             "the baseline always uses one worker per core)")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                        help="dtype gpupipe loaders deliver (default: float32, like the baseline)")
    parser.add_argument("--augment", choices=["standard", "heavy"], default="standard",
                        help="train preset as it is, or heavy: + RandAugment m9 n2, random erasing 0.25, "
                             "MixUp 0.8 / CutMix 1.0 (default: standard)")
    parser.add_argument("--no-train", action="store_true", help="measure the loaders alone (no model)")
    parser.add_argument("--demo-images", type=int,
                        help="size of the generated demo set, 10 classes (default: 1000; on a GPU 50 batches)")
    parser.add_argument("--cache-dir", type=Path, default=cache_dir(),
                        help="where the demo data is built once (default: ~/.cache/gpupipe)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"),
                        help="folder for bench.json and bench.png (default: ./bench-out)")
    args = parser.parse_args(argv)
    args.mode = args.mode or "quick"
    defaults = {
        "model": "resnet50" if on_gpu else "shufflenet_v2_x0_5",
        "batch_size": 256 if on_gpu else 32,
        "threads": gp_backends.default_threads(),
        **MODES[args.mode]["cuda" if on_gpu else "cpu"],
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.demo_images is None:
        args.demo_images = max(1000, 50 * args.batch_size) if on_gpu else 1000
    for name in ("batch_size", "image_size", "steps", "train_steps", "repeats", "threads", "demo_images"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("warmup", "train_warmup"):
        if getattr(args, name) < 0:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    return args


def choose_backends(spec: str, on_gpu: bool) -> List[str]:
    """The backends to compare: ``all`` means the baseline plus every backend available here.

    Raises:
        BenchError: an unknown backend, or ``dali`` without a GPU.
    """
    if spec == "all":
        names = [BASELINE] + [b for b in gp_backends.BACKENDS if gp_backends.available(b)]
        for missing in sorted(set(gp_backends.BACKENDS) - set(names)):
            logger.info("skipping backend %r: not available on this machine", missing)
        return names
    names = [n.strip() for n in spec.split(",") if n.strip()]
    known = (BASELINE,) + gp_backends.BACKENDS
    if not names:
        raise BenchError(f"--backends: none given; choose from {', '.join(known)}")
    for name in names:
        if name not in known:
            raise BenchError(f"--backends: unknown backend {name!r}; choose from {', '.join(known)}")
        if name == "dali" and not on_gpu:
            raise BenchError("--backends: 'dali' needs a CUDA GPU; this machine has none (use dali-cpu)")
    return names


def _log_to_stderr() -> None:
    """gpupipe's own INFO lines on stderr (not other libraries', e.g. matplotlib's font cache notices)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    root = logging.getLogger("gpupipe")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def missing_extras() -> List[str]:
    """The modules of the ``bench`` extra that this Python cannot import (nvidia-ml-py is optional)."""
    missing = []
    for name in ("psutil", "matplotlib"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the bench; every bad argument or input is one line, ``error: ...``, and exit status 2."""
    try:
        return _main(argv)
    except BenchError as err:
        message = str(err)
    except user_errors() as err:  # bad data, a full disk: the library's own one-line message
        message = str(err)
    print(f"error: {message}".splitlines()[0], file=sys.stderr)
    return 2


def choose_precision(args: argparse.Namespace, device: torch.device, train_step: Optional[TrainStep], kept
                     ) -> tuple:
    """The autocast choice (probing the bench's own step where it decides) and seconds per training step."""
    if train_step is None:
        return AmpChoice("off", "no training measured (--no-train)"), None

    def step(dtype: torch.dtype) -> None:
        train_step.run(*kept, dtype)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    amp = choose_amp(device, args.amp, step=step)
    step_s = amp.probe.get(str(amp.dtype).replace("torch.", ""))
    if step_s is None:
        step_s = probe_seconds(step, (amp.dtype,), repeats=2)[0]
    train_step.use(amp)
    return amp, step_s


def _main(argv: Optional[List[str]]) -> int:
    _log_to_stderr()
    args = parse_args(argv)
    missing = missing_extras()
    if missing:
        raise BenchError(f"python -m gpupipe.bench needs the bench extra (missing: {', '.join(missing)}): "
                         "pip install 'gpupipe[bench]'")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    started = time.perf_counter()
    spec = demo.DemoSpec(classes=10, per_class=max(1, args.demo_images // 10))
    packed = args.data is not None and shardfmt.is_packed(args.data)
    num_classes = spec.classes
    if args.data is not None:
        try:
            num_classes = len(as_source(args.data).classes)
        except ValueError as err:
            raise BenchError(f"--data: {err}") from None
    names = choose_backends(args.backends, device.type == "cuda")
    if packed and BASELINE in names:
        logger.info("%s is packed: the tutorial baseline reads only image folders, so it is left out", args.data)
        names.remove(BASELINE)
    config = BenchConfig(
        data=Path(args.data or demo.demo_root(args.cache_dir, spec)),
        backends=tuple(names), model=args.model,
        batch_size=args.batch_size, image_size=args.image_size, steps=args.steps, train_steps=args.train_steps,
        warmup=args.warmup, train_warmup=args.train_warmup, repeats=args.repeats, amp=args.amp, threads=args.threads,
        device=device, dtype=args.dtype, measure_training=not args.no_train, augment=args.augment,
    )
    train_step, kept = None, None
    if config.measure_training:
        train_step, kept = TrainStep(config, num_classes), kept_batch(config, num_classes)
    amp, step_s = choose_precision(args, device, train_step, kept)
    config = replace(config, amp=amp.name)
    if config.measure_training:
        logger.info("mixed precision: %s (%s)", str(amp.dtype).replace("torch.", ""), amp.reason)
    need_demo = args.data is None and not demo.is_built(config.data)
    demo_images = spec.classes * spec.per_class if need_demo else 0
    planned = estimate(config, demo_images=demo_images, demo_image_s=time_demo_image(),
                       step_s=step_s, workers=env.cores())
    logger.info("this bench (%s mode) will take %s: %s%d timed rounds of %d repeats%s; the progress bar gives the "
                "real ETA", args.mode, duration(planned.total + time.perf_counter() - started),
                f"{demo_images} demo images first, " if need_demo else "", rounds(config), config.repeats,
                ", re-estimated after the first repeat" if config.repeats > 1 else "")
    if args.data is None:
        demo.ensure_demo(args.cache_dir, spec, progress=_demo_progress() if need_demo else None)
    stats = demo.folder_stats(config.data) if not packed else demo.packed_stats(config.data)
    logger.info(
        "data: %s: %d images in %d classes, mean %.1f KiB (median %.1f), mean %dx%d px, sides %d-%d px",
        config.data, stats["images"], stats["classes"], stats["mean_kib"], stats["median_kib"],
        stats["mean_width"], stats["mean_height"], stats["min_side"], stats["max_side"],
    )
    logger.info("device %s; backends %s; model %s; batch %d", device, ", ".join(config.backends), config.model,
                config.batch_size)
    figures, loads, measured_s = _measure(config, train_step, kept)
    settings = {k: (str(v) if isinstance(v, (Path, torch.device)) else v) for k, v in asdict(config).items()}
    settings["mode"] = args.mode
    elapsed = time.perf_counter() - started
    full = {"machine": {**report.machine_info(device), "cpu_flags": cpu_info()["flags"], "torch_build": torch_build()},
            "amp": amp.as_dict(), "settings": settings, "data": stats, **figures,
            "load_during": {"load_average": loads["load"], "other_processes_cpu_percent": loads["others"]},
            "estimate": {"planned_s": round(planned.total, 1), "rounds_planned_s": round(planned.rounds, 1),
                         "rounds_measured_s": round(measured_s, 1)},
            "elapsed_s": round(elapsed, 1)}
    full["machine"]["label"] = report.hardware_label(full["machine"])
    full["reliability"] = report.reliability(full)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(full, args.out / "bench.json")
    report.write_chart(full, args.out / "bench.png")
    print(report.table(full))
    print(f"\nwrote {args.out / 'bench.json'} and {args.out / 'bench.png'} ({time.perf_counter() - started:.0f} s)")
    return 0


def _demo_progress():
    from tqdm import tqdm

    bar = tqdm(unit="img", desc="demo images", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def _measure(config: BenchConfig, train_step: Optional[TrainStep], kept) -> tuple:
    """Runs the rounds under the machine-load monitor; prints the revised estimate after the first repeat."""
    from tqdm import tqdm

    load = ResourceMonitor(interval=1.0)
    began = time.perf_counter()

    def on_repeat(done: int) -> None:
        if done == 1 and config.repeats > 1:
            so_far = time.perf_counter() - began
            left = duration(revised(config, 1, so_far))
            progress.write(f"first repeat measured in {so_far:.0f} s: revised estimate {left} left", file=sys.stderr)

    with load, tqdm(total=rounds(config), unit="round", desc="bench", file=sys.stderr) as progress:
        figures = run(config, progress, train_step, kept, on_repeat)
    loads: Dict = {"load": [round(os.getloadavg()[0], 2)] if hasattr(os, "getloadavg") else [0.0],
                   "others": load.summary()["other_processes_cpu_percent"] or 0.0}
    return figures, loads, time.perf_counter() - began


if __name__ == "__main__":
    sys.exit(main())
