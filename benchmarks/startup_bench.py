"""Start-up at scale: listing, scanning (cold and cached) and building a loader over N files.

    python benchmarks/startup_bench.py [--sizes 10000 100000 1281167] [--work /tmp/startup] [--out FILE]

For each size it builds (once, kept in --work) an ImageNet-shaped folder:
1,000 class folders of hard links to 200 real JPEGs (hard links cost no
inode and no data, so the folder is cheap, and every file is a real image
with a header to read). Then, with a warm page cache, it times:

* ``torchvision.datasets.ImageFolder`` (the reference: listing only);
* ``gpupipe.ImageFolder`` (listing only);
* ``gpupipe.loader`` with no scan cache (cold: listing + reading every header) and again
  with it (warm: listing + stat-ing every file);
* parsing a list file of N lines (``gpupipe.FileList``);
* the first batch of a ``dali-cpu`` loader (its first pipeline build).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gpupipe  # noqa: E402
from gpupipe.demo import photos as demo  # noqa: E402

CLASSES = 1000


def build_folder(root: Path, count: int, seeds: list) -> Path:
    done = root / ".complete"
    if done.is_file():
        return root
    shutil.rmtree(root, ignore_errors=True)
    per_class = -(-count // CLASSES)
    written = 0
    for c in range(CLASSES):
        folder = root / f"n{c:08d}"
        folder.mkdir(parents=True)
        for i in range(min(per_class, count - written)):
            os.link(seeds[(c + i) % len(seeds)], folder / f"img_{i:05d}.JPEG")
            written += 1
    done.write_text(str(written))
    return root


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def measure(root: Path, count: int, work: Path) -> dict:
    import torchvision

    out = {"files": count}
    out["torchvision_imagefolder_s"], _ = timed(lambda: torchvision.datasets.ImageFolder(str(root)))
    out["gpupipe_listing_s"], source = timed(lambda: gpupipe.ImageFolder(root))
    cache = Path(tempfile.mkdtemp(prefix="startup-cache-", dir=work))
    os.environ["GPUPIPE_CACHE"] = str(cache)
    pipeline = [gpupipe.Decode(), gpupipe.RandomResizedCrop(224), gpupipe.Normalize()]
    make = lambda: gpupipe.loader(root, pipeline, batch_size=256, backend="dali-cpu", drop_last=True)  # noqa: E731
    out["loader_cold_s"], loader = timed(make)
    out["loader_warm_s"], loader = timed(make)
    out["first_batch_s"], _ = timed(lambda: next(iter(loader)))
    loader.close()
    listing = work / f"list-{count}.txt"
    if not listing.is_file():
        listing.write_text("".join(f"{p} {label}\n" for p, label in zip(source.names, source.labels.tolist())))
    out["file_list_parse_s"], _ = timed(lambda: gpupipe.FileList(listing))
    shutil.rmtree(cache, ignore_errors=True)
    out["warm_vs_imagefolder"] = round(out["loader_warm_s"] / out["torchvision_imagefolder_s"], 2)
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_281_167])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "gpupipe-startup")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    seeds_root = demo.ensure_demo(args.work / "seeds", demo.DemoSpec(classes=2, per_class=10))
    seeds = []  # 200 distinct files (copies of 20 images): a file takes at most 65,000 hard links
    for k in range(10):
        for path in sorted(seeds_root.glob("*/*.jpg")):
            copy = args.work / "seed-copies" / f"{k}-{path.name}"
            if not copy.exists():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
            seeds.append(copy)
    results = []
    for count in args.sizes:
        root = build_folder(args.work / f"folder-{count}", count, seeds)
        results.append(measure(root, count, args.work))
        print(json.dumps(results[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cores": os.cpu_count(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
