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
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional

import torch

from .. import backends as gp_backends
from ..scan import default_cache_dir
from .. import shardfmt
from ..sources import as_source
from . import demo, report
from .monitor import ResourceMonitor
from .runner import BASELINE, BenchConfig, rounds, run

logger = logging.getLogger("gpupipe.bench")

#: Rough rates for the duration estimate printed before the run (images/s per CPU core, or on a GPU).
ASSUMED_RATES = {"cpu": {"loader": 300.0, "train": 60.0}, "cuda": {"loader": 4000.0, "train": 2000.0}}
#: Seconds to build, warm and shut down a loader, per timed round.
ROUND_OVERHEAD_S = 2.0


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    on_gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(
        prog="python -m gpupipe.bench",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=(
            "Defaults depend on the machine: with a GPU, resnet50, batch 256, 50 loader / 30 train steps and a demo "
            "set of 50 batches; without, shufflenet_v2_x0_5, batch 32, 20 loader / 6 train steps, 1000 images."
        ),
    )
    parser.add_argument("--data", type=Path, help="image folder root/<class>/<image>, or a folder packed by "
                                                  "python -m gpupipe.pack (no baseline then) (default: the demo data)")
    parser.add_argument(
        "--backends", default="all",
        help=f"comma-separated from {BASELINE},{','.join(gp_backends.BACKENDS)}; 'all' = every one this machine has",
    )
    parser.add_argument("--model", help="torchvision model name (default: resnet50 on a GPU, shufflenet_v2_x0_5 on a CPU)")
    parser.add_argument("--batch-size", type=int, help="images per batch (default: 256 on a GPU, 32 on a CPU)")
    parser.add_argument("--image-size", type=int, default=224, help="train-preset crop size in px (default: 224)")
    parser.add_argument("--steps", type=int, help="batches per loader-alone repeat (default: 50 GPU / 20 CPU)")
    parser.add_argument("--train-steps", type=int, help="steps per training repeat (default: 30 GPU / 6 CPU)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="loader-alone batches before each timed repeat; more than the loader's prefetch "
                             "queue, so that no repeat starts on free, already-prepared batches (default: 10)")
    parser.add_argument("--train-warmup", type=int, default=3,
                        help="training steps before each timed repeat (default: 3)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed repeats, interleaved across backends; medians and min-max are reported (default: 5)")
    parser.add_argument("--amp", choices=["bf16", "fp16", "off"], default="bf16",
                        help="autocast dtype; fp16 uses a GradScaler (default: bf16)")
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
                        help="size of the generated demo set, 10 classes (default: 1000; on a GPU 50 batches, so "
                             "that epoch boundaries are under 2%% of the time)")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                        help="where the demo data is built once (default: ~/.cache/gpupipe)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"),
                        help="folder for bench.json and bench.png (default: ./bench-out)")
    args = parser.parse_args(argv)
    defaults = {
        "model": "resnet50" if on_gpu else "shufflenet_v2_x0_5",
        "batch_size": 256 if on_gpu else 32,
        "steps": 50 if on_gpu else 20,
        "train_steps": 30 if on_gpu else 6,
        "threads": gp_backends.default_threads(),
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.demo_images is None:
        args.demo_images = max(1000, 50 * args.batch_size) if on_gpu else 1000
    for name in ("batch_size", "image_size", "steps", "train_steps", "repeats", "threads", "demo_images"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("warmup", "train_warmup"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    return args


def choose_backends(spec: str, on_gpu: bool) -> List[str]:
    """The backends to compare: ``all`` means the baseline plus every backend available here."""
    if spec == "all":
        names = [BASELINE] + [b for b in gp_backends.BACKENDS if gp_backends.available(b)]
        for missing in sorted(set(gp_backends.BACKENDS) - set(names)):
            logger.info("skipping backend %r: not available on this machine", missing)
        return names
    names = [n.strip() for n in spec.split(",") if n.strip()]
    known = (BASELINE,) + gp_backends.BACKENDS
    for name in names:
        if name not in known:
            raise SystemExit(f"--backends: unknown backend {name!r}; choose from {', '.join(known)}")
        if name == "dali" and not on_gpu:
            raise SystemExit("--backends: 'dali' needs a CUDA GPU; this machine has none (use dali-cpu)")
    return names


def estimate_seconds(config: BenchConfig, demo_images: int, need_demo: bool) -> float:
    """A rough duration: demo generation (measured cost per image) plus every round at assumed rates."""
    kind = config.device.type
    per_core = 1.0 if kind == "cuda" else config.threads
    rates = {k: v * per_core for k, v in ASSUMED_RATES[kind].items()}
    loader = len(config.backends) * (config.warmup + config.steps) * config.batch_size / rates["loader"]
    train = (len(config.backends) + 1) * (config.train_warmup + config.train_steps) * config.batch_size / rates["train"] \
        if config.measure_training else 0.0
    generate = demo.SECONDS_PER_IMAGE * demo_images / config.threads if need_demo else 0.0
    return generate + config.repeats * (loader + train) + rounds(config) * ROUND_OVERHEAD_S


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
    _log_to_stderr()
    args = parse_args(argv)
    missing = missing_extras()
    if missing:
        print(f"error: python -m gpupipe.bench needs the bench extra (missing: {', '.join(missing)}): "
              "pip install 'gpupipe[bench]'", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    started = time.perf_counter()
    spec = demo.DemoSpec(classes=10, per_class=max(1, args.demo_images // 10))
    packed = args.data is not None and shardfmt.is_packed(args.data)
    if args.data is not None:
        try:
            as_source(args.data)
        except ValueError as err:
            print(f"error: --data: {err}", file=sys.stderr)
            return 2
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
    need_demo = args.data is None and not demo.is_built(config.data)
    logger.info("this bench will take about %.0f minutes (%d timed rounds%s); the progress bar gives the real ETA",
                estimate_seconds(config, spec.classes * spec.per_class, need_demo) / 60, rounds(config),
                f", after generating {spec.classes * spec.per_class} demo images" if need_demo else "")
    if args.data is None:
        demo.ensure_demo(args.cache_dir, spec, workers=args.threads)
    stats = demo.folder_stats(config.data) if not packed else demo.packed_stats(config.data)
    logger.info(
        "data: %s: %d images in %d classes, mean %.1f KiB (median %.1f), mean %dx%d px, sides %d-%d px",
        config.data, stats["images"], stats["classes"], stats["mean_kib"], stats["median_kib"],
        stats["mean_width"], stats["mean_height"], stats["min_side"], stats["max_side"],
    )
    logger.info("device %s; backends %s; model %s; batch %d", device, ", ".join(config.backends), config.model,
                config.batch_size)

    from tqdm import tqdm

    load = ResourceMonitor(interval=1.0)
    loads = []
    with load, tqdm(total=rounds(config), unit="round", desc="bench", file=sys.stderr) as progress:
        figures = run(config, progress)
        loads.append(os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    settings = {k: (str(v) if isinstance(v, (Path, torch.device)) else v) for k, v in asdict(config).items()}
    full = {"machine": report.machine_info(device), "settings": settings, "data": stats, **figures,
            "load_during": {"load_average": loads, "other_processes_cpu_percent":
                            load.summary()["other_processes_cpu_percent"] or 0.0},
            "elapsed_s": round(time.perf_counter() - started, 1)}
    full["machine"]["label"] = report.hardware_label(full["machine"])
    full["reliability"] = report.reliability(full)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(full, args.out / "bench.json")
    report.write_chart(full, args.out / "bench.png")
    print(report.table(full))
    print(f"\nwrote {args.out / 'bench.json'} and {args.out / 'bench.png'} ({full['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
