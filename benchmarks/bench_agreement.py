"""Does the bench's loader-alone figure agree with a plain, separate loader-alone loop? (target: within 10 %)

    python benchmarks/bench_agreement.py [--data DIR] [--backends dali-cpu,torchvision] [--rounds 3]
                                         [--with-train] [--out benchmarks/results/<label>/bench_agreement.json]

Each round runs, in turn: the bench's own measurement (``gpupipe.bench``'s
runner, exactly as ``python -m gpupipe.bench`` runs it: the tutorial
baseline and every backend interleaved, fresh loaders, warm-up, the
resource monitors; ``--with-train`` adds the training phase and ResNet-50 on
a GPU, as the run of issue #25 had), and a separate plain loop per backend:
a new ``gpupipe.loader``, the same warm-up batches dropped, the same number
of batches timed, nothing else running. Reports per backend the medians of
both and their ratio. Defaults: the bench's demo set and settings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe.env import default_threads  # noqa: E402
from gpupipe.bench import measure, report, runner  # noqa: E402
from gpupipe.demo import photos as demo  # noqa: E402
from gpupipe.bench.args import MODES  # noqa: E402
from gpupipe.env import cache_dir  # noqa: E402


def plain_loop(config: runner.BenchConfig, backend: str) -> float:
    """What a user would time: a new loader, ``warmup`` batches dropped, the bench's window timed."""
    loader = gpupipe.loader(config.data, runner.pipeline_of(config), batch_size=config.batch_size, backend=backend,
                            device=config.device, num_threads=config.threads, dtype=config.dtype, channels_last=True,
                            drop_last=True)
    window = measure.loader_window(config.steps, config.warmup, len(loader))
    batches = iter(loader)
    sync = torch.cuda.synchronize if config.device.type == "cuda" else (lambda: None)
    for _ in range(config.warmup):
        next(batches)
    sync()
    started = time.perf_counter()
    images = 0
    for _ in range(window):
        images += int(next(batches)[0].shape[0])
    sync()
    rate = images / (time.perf_counter() - started)
    del batches
    loader.close()
    runner.release_memory(config.device)
    return rate


def main() -> None:
    on_gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="image folder (default: the bench's demo set)")
    parser.add_argument("--backends", default="dali" if on_gpu else "dali-cpu,torchvision")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--with-train", action="store_true", help="the bench with its training phase too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    kind = "cuda" if on_gpu else "cpu"
    mode = MODES["quick"][kind]
    images = 50 * 256 if on_gpu else 1000
    data = args.data or demo.ensure_demo(cache_dir(), demo.DemoSpec(per_class=images // 10))
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    names = [n for n in args.backends.split(",") if n]
    config = runner.BenchConfig(
        data=data, backends=(runner.BASELINE, *names), model="resnet50" if on_gpu else "shufflenet_v2_x0_5",
        batch_size=256 if on_gpu else 32, image_size=224, steps=mode["steps"], train_steps=mode["train_steps"],
        warmup=10, train_warmup=3, repeats=1, amp="bf16" if on_gpu else "off", threads=default_threads(),
        device=device, measure_training=args.with_train)
    bench = {n: [] for n in names}
    plain = {n: [] for n in names}
    for r in range(args.rounds):
        figures = runner.run(replace(config))
        for name in names:
            bench[name].append(figures["results"][name]["loader"]["images_per_s"])
        for name in (names if r % 2 == 0 else names[::-1]):
            plain[name].append(plain_loop(config, name))
        print(f"round {r + 1}: " + "; ".join(f"{n} bench {bench[n][-1]:.0f} plain {plain[n][-1]:.0f} img/s"
                                             for n in names), file=sys.stderr, flush=True)
    results = {}
    for name in names:
        b, p = statistics.median(bench[name]), statistics.median(plain[name])
        results[name] = {"bench_images_per_s": round(b, 1), "plain_images_per_s": round(p, 1),
                         "bench_over_plain": round(b / p, 3), "bench_runs": [round(x, 1) for x in bench[name]],
                         "plain_runs": [round(x, 1) for x in plain[name]]}
    machine = report.machine_info(device)
    out = {"machine": machine, "data": str(data), "settings": {"batch_size": config.batch_size, "warmup": config.warmup,
           "steps": config.steps, "rounds": args.rounds, "with_train": args.with_train, "threads": config.threads},
           "results": results}
    print(json.dumps(results, indent=2))
    path = args.out or ROOT / "benchmarks" / "results" / report.hardware_label(machine) / "bench_agreement.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
