"""Host work per batch: the consumer thread's CPU time inside ``next()``, gpupipe against hand-written DALI.

    python benchmarks/host_proxy.py [--data DIR] [--backend dali-cpu] [--batch-size 256] [--size 32]
                                    [--rounds 5] [--profile FILE] [--out FILE]

The CPU proxy of issue #36: tiny images (32 px, generated once into the cache)
so that what a batch costs the training loop's thread, not decoding, is what is
measured; the train preset at ``--size`` (random-resized crop, flip, normalised
float32) from gpupipe and from the same graph written by hand in DALI
(``peer_compare.HandDali``), batch 256, on ``dali-cpu`` (``dali`` on a GPU). Each
round builds both loaders afresh in a new order, warms them up past DALI's
prefetch queue and times ``--steps`` batches inside one epoch, summing
``time.thread_time()`` around each ``next()`` (CPU time of the consumer thread only:
waiting, and the other processes on a shared machine, do not count). Reports the
median and range over the rounds of milliseconds per batch and their ratio, and the
ratio within each round (its two loaders timed back to back, under the same load:
the steadier figure on a shared machine).

``--profile FILE``: after the rounds, one gpupipe epoch with the consumer thread's
``next()`` calls under the ``profile`` module (this thread only); the top 25 functions by cumulative time go to FILE.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe.env import cache_dir, default_threads  # noqa: E402


def tiny_folder(root: Path, images: int, side: int = 32, classes: int = 10) -> Path:
    """``images`` random-texture JPEGs of ``side`` px in ``classes`` class folders (made once)."""
    import numpy as np
    from PIL import Image

    done = root / ".done"
    if done.is_file():
        return root
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / f"class_{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        smooth = rng.integers(0, 256, (side // 4, side // 4, 3), dtype=np.uint8)
        pixels = np.kron(smooth, np.ones((4, 4, 1), np.uint8))
        Image.fromarray(pixels).save(folder / f"img_{i:05d}.jpg", quality=90)
    done.touch()
    return root


def makers(backend: str, size: int, device: torch.device) -> Dict[str, Callable]:
    """name -> ``make(data, batch, threads)``: gpupipe and the hand-written pipeline."""
    from peer_compare import HandDali

    def ours(data, batch, threads):
        return gpupipe.loader(data, gpupipe.presets.train(size), batch_size=batch, backend=backend, device=device,
                              num_threads=threads, drop_last=True)

    def hand(data, batch, threads):
        return HandDali(data, batch, threads, device, size=size)

    return {f"gpupipe-{backend}": ours, f"hand-{backend}": hand}


def host_ms(batches: Iterator, steps: int, profiler: "ThreadProfile | None" = None) -> float:
    """Milliseconds of the consumer thread's CPU time per ``next()`` over ``steps`` batches."""
    total = 0.0
    for _ in range(steps):
        started = time.thread_time()
        if profiler is None:
            next(batches)
        else:
            profiler.call(next, batches)
        total += time.thread_time() - started
    return 1000 * total / steps


def one_round(make: Callable, args) -> float:
    loader = make(args.data, args.batch_size, args.threads)
    batches = iter(loader)
    for _ in range(args.warmup):
        next(batches)
    result = host_ms(batches, args.steps)
    for close in (getattr(batches, "close", None), getattr(loader, "close", None)):
        if close is not None:
            close()
    return result


def profile_epoch(make: Callable, args, path: Path, top: int = 25) -> Dict:
    """One epoch of ``make``'s loader with each ``next()`` profiled (timed by the thread's CPU time); the
    top ``top`` by cumulative time are written to ``path``.

    Profiled with ``peer_compare.ThreadProfile``: this thread only, each call on its own.
    """
    from peer_compare import ThreadProfile

    loader = make(args.data, args.batch_size, args.threads)
    batches = iter(loader)
    next(batches)  # the run's build and first batch are not the per-batch path
    profiler = ThreadProfile(time.thread_time)  # CPU time of this thread, not waiting
    count = len(loader) - 1
    ms = host_ms(batches, count, profiler)
    profiler.write(path, f"# profile of the consumer thread's next(), {count} batches of {args.batch_size} "
                   f"(batches 2..{count + 1} of one epoch), timed by the thread's CPU time; {ms:.3f} ms CPU per "
                   "batch under the profiler", top)
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    return {"batches": count, "host_ms_per_batch_profiled": round(ms, 4), "file": path.name}


def main(argv: List[str] = None) -> Dict:
    on_gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="image folder (default: tiny generated JPEGs in the cache)")
    parser.add_argument("--images", type=int, default=256 * 40, help="images generated when --data is not given")
    parser.add_argument("--backend", default="dali" if on_gpu else "dali-cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=32, help="output side of the train preset")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32, help="timed batches per loader and round")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--only", choices=("gpupipe", "hand"), help="time one of the two only")
    parser.add_argument("--profile", type=Path, help="profile of one gpupipe epoch's next() calls into this file")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = torch.device("cuda", 0) if args.backend == "dali" else torch.device("cpu")
    args.data = args.data or tiny_folder(cache_dir() / f"host-proxy-{args.images}", args.images)
    loaders = makers(args.backend, args.size, device)
    if args.only:
        loaders = {k: v for k, v in loaders.items() if k.startswith(args.only)}
    runs: Dict[str, List[float]] = {name: [] for name in loaders}
    order = random.Random(0)
    for r in range(args.rounds):
        names = list(loaders)
        order.shuffle(names)
        for name in names:
            runs[name].append(one_round(loaders[name], args))
            print(f"round {r + 1}: {name:20s} {runs[name][-1]:.3f} ms/batch in next()", file=sys.stderr, flush=True)
    results = {name: {"median_ms": round(statistics.median(v), 4), "min_ms": round(min(v), 4),
                      "max_ms": round(max(v), 4), "runs": [round(x, 4) for x in v]} for name, v in runs.items()}
    out: Dict = {"settings": {"backend": args.backend, "batch_size": args.batch_size, "size": args.size,
                              "rounds": args.rounds, "warmup": args.warmup, "steps": args.steps,
                              "threads": args.threads, "data": str(args.data)},
                 "results": results}
    ours, hand = f"gpupipe-{args.backend}", f"hand-{args.backend}"
    if ours in results and hand in results:
        out["gpupipe_over_hand"] = round(results[ours]["median_ms"] / results[hand]["median_ms"], 3)
        paired = [a / b for a, b in zip(runs[ours], runs[hand])]  # one round's two loaders met the same load
        out["ratio_per_round"] = {"median": round(statistics.median(paired), 3), "min": round(min(paired), 3),
                                  "max": round(max(paired), 3)}
    if args.profile is not None:
        make = makers(args.backend, args.size, device)[ours]
        out["profile"] = profile_epoch(make, args, args.profile)
    print(json.dumps({k: v for k, v in out.items() if k != "settings"}, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
