"""Reading packs behind URLs (cold and warm cache) against the same pack on this disk, and packing
with one process against two torchrun ranks.

    python benchmarks/remote_bench.py [--out benchmarks/results/cpu-2core] [--repeats 5] [--rate-mib 20]

The bench's demo data is packed (--max-size 256, 2 MiB shards) and served on 127.0.0.1 by Python's
HTTP server (as fast as the loopback goes, and limited to --rate-mib MiB/s per connection to
stand in for a network link) and by moto's S3 server. Each measurement is one full epoch of the
train-preset loader (batch 32, 224 px) from a new source and loader, start-up included: "cold"
starts from an empty cache (every shard is downloaded during the epoch), "warm" from the cache
the cold epoch filled. Repeats are interleaved; medians and every run are written to remote.json.
"""

import argparse
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the test servers

import gpupipe  # noqa: E402
from gpupipe import env  # noqa: E402
from gpupipe.backends import available  # noqa: E402
from gpupipe.env import default_threads  # noqa: E402
from gpupipe.demo.photos import DemoSpec, ensure_demo  # noqa: E402
from gpupipe.pack import ConvertSettings, PackSettings, pack  # noqa: E402
from servers import FolderServer, S3Server  # noqa: E402


def epoch_rate(where, backend: str, cache_dir) -> float:
    """Images per second over one epoch from a new source and loader, start-up included."""
    started = time.perf_counter()
    source = gpupipe.Shards(where, cache_dir=cache_dir)  # None: the default cache (unused by a local pack)
    loader = gpupipe.loader(source, "train", batch_size=32, backend=backend, device="cpu",
                            num_threads=default_threads(), channels_last=True)
    images = sum(len(labels) for _, labels in loader)
    rate = images / (time.perf_counter() - started)
    del loader, source
    gc.collect()
    return rate


def pack_run(src: Path, dst: str, ranks: int, staging: Path) -> dict:
    """``python -m gpupipe.pack`` with ``ranks`` torchrun ranks sharing the cores: its wall time
    (process start-up and upload included) and its packing time (the slowest rank's)."""
    workers = max(1, default_threads() // ranks)
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else []
    command = [sys.executable, *launcher, "-m", "gpupipe.pack", str(src), dst, "--max-size", "256",
               "--shard-size", "2MB", "--workers", str(workers), "--staging", str(staging), "-q"]
    started = time.perf_counter()
    proc = subprocess.run(command, check=True, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - started
    packing = max(float(m) for m in re.findall(r"this run: .* in ([0-9.]+) s:", proc.stdout))
    return {"wall_s": round(wall, 2), "pack_s": round(packing, 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu-2core"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rate-mib", type=float, default=20.0, help="the limited link, MiB/s per connection")
    args = parser.parse_args()
    demo = ensure_demo(env.cache_dir(), DemoSpec())
    work = Path(tempfile.mkdtemp(prefix="gpupipe-remotebench-"))
    s3 = S3Server()
    servers = []
    try:
        local = work / "packed"
        summary = pack(demo, local, PackSettings(convert=ConvertSettings(max_size=256), shard_size=2 * 2**20),
                       workers=default_threads(), progress=False)
        servers = [FolderServer(local), FolderServer(local, rate=args.rate_mib * 2**20)]
        urls = {"http": servers[0].url, "http-limited": servers[1].url, "s3": s3.upload(local, "bench", "packed")}
        backends = [b for b in ("dali-cpu", "torchvision") if available(b)]
        runs = {}
        for r in range(args.repeats):
            for backend in backends:
                groups = [[("local", local, None)]] + [
                    [(f"{name} {state}", url, work / f"cache-{backend}-{name}-{r}") for state in ("cold", "warm")]
                    for name, url in urls.items()]  # a cold epoch fills the cache its warm epoch reads
                for group in groups[r % len(groups):] + groups[:r % len(groups)]:  # no group always runs first
                    for name, where, cache in group:
                        runs.setdefault((backend, name), []).append(epoch_rate(where, backend, cache))
                        print(f"[{r + 1}/{args.repeats}] {backend:12s} {name:18s} {runs[backend, name][-1]:7.1f} "
                              "img/s", flush=True)
        loading = {}
        for (backend, name), rates in runs.items():
            base = statistics.median(runs[backend, "local"])
            loading.setdefault(backend, {})[name] = {
                "images_per_s": round(statistics.median(rates), 1), "x_local": round(statistics.median(rates) / base, 2),
                "runs": [round(x, 1) for x in rates]}
        packing = {}
        fs_bucket = "bench-pack"
        fsspec.filesystem("s3", skip_instance_cache=True).mkdir(fs_bucket)
        for r in range(args.repeats):
            for ranks in (1, 2):
                for dst in ("local", "s3"):
                    target = str(work / f"pack-{ranks}-{r}") if dst == "local" else f"s3://{fs_bucket}/p{ranks}-{r}"
                    times = pack_run(demo, target, ranks, work / f"staging-{ranks}-{r}-{dst}")
                    packing.setdefault(f"{ranks} rank{'s' if ranks > 1 else ''} -> {dst}", []).append(times)
                    print(f"[{r + 1}/{args.repeats}] pack, {ranks} rank(s) -> {dst}: {times}", flush=True)
    finally:
        for server in servers:
            server.stop()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "machine": f"{os.cpu_count()} cores, no GPU", "demo": str(demo), "images": summary.packed,
        "pack_mib": round(summary.bytes_out / 2**20, 1), "shards": summary.shards,
        "limited_link_mib_per_s": args.rate_mib, "loading": loading,
        "packing": {k: {"images_per_s_wall": round(summary.inputs / statistics.median(t["wall_s"] for t in v), 1),
                        "images_per_s_packing": round(summary.inputs / statistics.median(t["pack_s"] for t in v), 1),
                        "runs": v} for k, v in packing.items()},
        "settings": {"batch_size": 32, "image_size": 224, "pipeline": "train", "repeats": args.repeats,
                     "measure": "one full epoch from a new source and loader, start-up included"},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remote.json").write_text(json.dumps(report, indent=2) + "\n")
    names = list(next(iter(loading.values())))
    print("\n| backend | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for backend, cells in loading.items():
        print(f"| {backend} | " + " | ".join(f"{cells[n]['images_per_s']:.0f} ({cells[n]['x_local']:.2f}x)"
                                             for n in names) + " |")
    print("\npacking, images/s (medians; wall: start-up and upload included): " + "; ".join(
        f"{k}: {v['images_per_s_packing']:.0f} ({v['images_per_s_wall']:.0f} wall)" for k, v in report["packing"].items()))


if __name__ == "__main__":
    main()
