"""Packing throughput, and loading from shards versus the folder, on every CPU backend.

    python benchmarks/pack_bench.py [--out benchmarks/results/cpu-2core] [--repeats 5]

Packs the bench's demo data twice (as it is, and with --max-size 256), then
times the train-preset loader alone (batch 32, 224 px) on the folder, the
shards and the 256 px shards, repeats interleaved, fresh loaders each time.
Writes pack.json and prints a table.
"""

import argparse
import gc
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import gpupipe
from gpupipe.backends import available
from gpupipe.env import default_threads
from gpupipe.bench import measure
from gpupipe.demo.photos import DemoSpec, ensure_demo
from gpupipe.env import cache_dir
from gpupipe.pack import ConvertSettings, PackSettings, pack


def time_pack(src, dst, max_size, workers):
    shutil.rmtree(dst, ignore_errors=True)
    summary = pack(src, dst, PackSettings(convert=ConvertSettings(max_size=max_size)), workers=workers, progress=False)
    return {"images_per_s": round(summary.images_per_s, 1),
            "images_per_s_per_core": round(summary.images_per_s / workers, 1),
            "packed": summary.packed, "copied": summary.copied, "seconds": round(summary.seconds, 2),
            "mib_in": round(summary.bytes_in / 2**20, 1), "mib_out": round(summary.bytes_out / 2**20, 1)}


def loader_rate(data, backend, steps, warmup):
    loader = gpupipe.loader(data, "train", batch_size=32, backend=backend, device="cpu", drop_last=True,
                            num_threads=default_threads(), channels_last=True)
    stream = measure.forever(loader)
    measure.warm_up(stream, warmup)
    rate = measure.time_loader(stream, steps)
    stream.close()
    del stream, loader
    gc.collect()
    return rate


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu-2core"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    workers = default_threads()
    demo = ensure_demo(cache_dir(), DemoSpec())
    work = Path(tempfile.mkdtemp(prefix="gpupipe-packbench-"))
    try:
        packing = {
            "full": time_pack(demo, work / "full", None, workers),
            "max256": time_pack(demo, work / "max256", 256, workers),
        }
        # Each source is listed (and scanned) once, not once per repeat.
        sources = {name: gpupipe.sources.as_source(path)
                   for name, path in {"folder": demo, "shards": work / "full", "shards-256": work / "max256"}.items()}
        backends = [b for b in ("dali-cpu", "torchvision") if available(b)]
        runs = {(b, s): [] for b in backends for s in sources}
        for r in range(args.repeats):
            for backend in backends:
                for name, data in sources.items():
                    runs[backend, name].append(loader_rate(data, backend, args.steps, args.warmup))
                    print(f"[{r + 1}/{args.repeats}] {backend:12s} {name:10s} {runs[backend, name][-1]:7.1f} img/s", flush=True)
        loading = {b: {s: {"images_per_s": round(statistics.median(runs[b, s]), 1),
                           "runs": [round(x, 1) for x in runs[b, s]]} for s in sources} for b in backends}
        for b in backends:
            folder = loading[b]["folder"]["images_per_s"]
            for s in sources:
                loading[b][s]["x_folder"] = round(loading[b][s]["images_per_s"] / folder, 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"cores": workers, "demo": str(demo), "packing": packing, "loading": loading,
              "settings": {"batch_size": 32, "image_size": 224, "pipeline": "train", "steps": args.steps,
                           "warmup": args.warmup, "repeats": args.repeats}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pack.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\npacking, {workers} workers: " + "; ".join(
        f"{k}: {v['images_per_s']:.0f} img/s ({v['images_per_s_per_core']:.0f}/core, {v['mib_in']} -> {v['mib_out']} MiB)"
        for k, v in packing.items()))
    print("| backend | folder img/s | shards img/s | shards --max-size 256 img/s |")
    print("|---|---|---|---|")
    for b in backends:
        cells = [f"{loading[b][s]['images_per_s']:.0f} ({loading[b][s]['x_folder']:.2f}x)" for s in sources]
        print(f"| {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
