"""Side by side on the CPU: the tutorial loader, hand-written DALI and torchvision.io loaders, and
every gpupipe backend, on the same images, in interleaved rounds.

    python benchmarks/cpu_compare.py [--data DIR | --large-photos 3] [--batch-sizes 64 256] [--rounds 5]
                                     [--out results.json]

Every loader gives the train preset at 224 px as float32 normalised CPU
batches (loader alone). Each round times every loader once, in a new
order each round, on a fresh loader warmed up past its prefetch queue.
The machine's load is sampled around each timed run; a round during which
other processes used more than 10 % of the CPU is discarded and run again
(at most twice). Reports min / median / max per loader and the ratios of
medians measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import torch  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe.env import default_threads  # noqa: E402
from gpupipe.demo import photos as demo  # noqa: E402
from gpupipe.bench.measure import Stream, time_loader, warm_up  # noqa: E402
from gpupipe.env import cache_dir  # noqa: E402

MEAN, STD = gpupipe.ops.IMAGENET_MEAN, gpupipe.ops.IMAGENET_STD
SIZE = 224
BUSY = 0.10


def tutorial(data: Path, batch: int, threads: int) -> Iterable:
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    return torch.utils.data.DataLoader(datasets.ImageFolder(str(data), tf), batch_size=batch, shuffle=True,
                                       num_workers=threads, drop_last=True)


class _TorchvisionIO(torch.utils.data.Dataset):
    def __init__(self, data: Path) -> None:
        from torchvision import datasets
        from torchvision.transforms import v2

        self.samples = datasets.ImageFolder(str(data)).samples
        self.tf = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(),
                              v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        import torchvision

        path, label = self.samples[i]
        image = torchvision.io.decode_jpeg(torchvision.io.read_file(path), mode=torchvision.io.ImageReadMode.RGB)
        return self.tf(image), label


def torchvision_io(data: Path, batch: int, threads: int) -> Iterable:
    return torch.utils.data.DataLoader(_TorchvisionIO(data), batch_size=batch, shuffle=True, num_workers=threads,
                                       drop_last=True)


class _HandDali:
    """The DALI graph gpupipe builds for the train preset, written by hand: one pipeline for the
    whole run, DALI's own shuffling, fused ROI decode, exec_dynamic, DLPack to torch."""

    def __init__(self, data: Path, batch: int, threads: int) -> None:
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, exec_dynamic=True, prefetch_queue_depth=2)
        def graph():
            encoded, labels = fn.readers.file(file_root=str(data), random_shuffle=True, name="r")
            images = fn.decoders.image_random_crop(encoded, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=SIZE, resize_y=SIZE, antialias=True)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                              mirror=fn.random.coin_flip())
            return images, labels

        self.pipe = graph()
        self.pipe.build()
        self.batches = self.pipe.epoch_size("r") // batch

    def __iter__(self):
        for _ in range(self.batches):
            images, labels = self.pipe.run()
            yield torch.from_dlpack(images.as_tensor()), torch.from_dlpack(labels.as_tensor()).view(-1).long()


def gpupipe_loader(backend: str, **options) -> Callable:
    def make(data: Path, batch: int, threads: int):
        return gpupipe.loader(data, "train", batch_size=batch, backend=backend, device="cpu", num_threads=threads,
                              drop_last=True, **options)
    return make


LOADERS = {
    "tutorial": tutorial,
    "hand-dali": lambda d, b, t: _HandDali(d, b, t),
    "hand-torchvision-io": torchvision_io,
    "gpupipe-dali-cpu": gpupipe_loader("dali-cpu"),
    "gpupipe-torchvision": gpupipe_loader("torchvision"),
    "gpupipe-torchvision-full-decode": gpupipe_loader("torchvision", reduced_decode=False),
}


def timed_round(name: str, data: Path, batch: int, threads: int, steps: int) -> Dict:
    loader = LOADERS[name](data, batch, threads)
    stream = Stream(loader)
    warm_up(stream, 4)
    me = psutil.Process()
    cpu_before = psutil.cpu_times()
    tree_before = _tree_cpu(me)
    started = time.perf_counter()
    rate = time_loader(stream, steps)
    elapsed = time.perf_counter() - started
    others = max(0.0, _busy(psutil.cpu_times()) - _busy(cpu_before) - (_tree_cpu(me) - tree_before))
    stream.close()
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    del stream, loader
    gc.collect()
    return {"images_per_s": rate, "other_cpu_share": others / (elapsed * (psutil.cpu_count() or 1)),
            "load_average": os.getloadavg()[0]}


def _busy(times) -> float:
    return times.user + times.system + getattr(times, "nice", 0.0)


def _tree_cpu(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc] + proc.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="image folder (default: the bench's 1,000-image demo set)")
    parser.add_argument("--large-photos", type=float, metavar="SCALE",
                        help="instead: 300 demo scenes enlarged SCALE times (3: sides ~900-2100 px)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12, help="timed batches per run")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--loaders", nargs="+", default=list(LOADERS))
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    spec = demo.DemoSpec(per_class=30, scale=args.large_photos) if args.large_photos else demo.DemoSpec()
    data = args.data or demo.ensure_demo(cache_dir(), spec)
    report = {"data": str(data), "data_stats": demo.folder_stats(data), "threads": args.threads, "cores": psutil.cpu_count(), "rounds": args.rounds,
              "steps": args.steps, "results": {}}
    rng = random.Random(0)
    for batch in args.batch_sizes:
        runs: Dict[str, List[Dict]] = {name: [] for name in args.loaders}
        discarded = 0
        for r in range(args.rounds):
            order = list(args.loaders)
            rng.shuffle(order)
            for name in order:
                for attempt in range(3):
                    result = timed_round(name, data, batch, args.threads, args.steps)
                    if result["other_cpu_share"] <= BUSY or attempt == 2:
                        break
                    discarded += 1
                runs[name].append(result)
                print(f"batch {batch} round {r + 1}: {name:31s} {result['images_per_s']:7.1f} img/s "
                      f"(others {100 * result['other_cpu_share']:.0f}% CPU)", file=sys.stderr, flush=True)
        summary = {}
        for name, values in runs.items():
            rates = [v["images_per_s"] for v in values]
            summary[name] = {"median": round(statistics.median(rates), 1), "min": round(min(rates), 1),
                             "max": round(max(rates), 1), "runs": [round(x, 1) for x in rates],
                             "max_other_cpu_share": round(max(v["other_cpu_share"] for v in values), 3)}
        base = summary.get("tutorial", {}).get("median")
        hand = summary.get("hand-dali", {}).get("median")
        for entry in summary.values():
            if base:
                entry["x_tutorial"] = round(entry["median"] / base, 2)
            if hand:
                entry["x_hand_dali"] = round(entry["median"] / hand, 3)
        report["results"][str(batch)] = {"loaders": summary, "discarded_busy_rounds": discarded}
        print(f"\nbatch {batch}:\n" + "\n".join(
            f"  {name:31s} {e['median']:7.1f} img/s ({e['min']:.0f}-{e['max']:.0f})  x tutorial {e.get('x_tutorial', '-')}"
            f"  x hand-dali {e.get('x_hand_dali', '-')}" for name, e in summary.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
