"""Where the time of the DALI CPU train pipeline goes: each stage added in turn.

    python benchmarks/dali_cpu_stages.py [DATA] [--threads N] [--batch-size B]

Runs DALI pipelines that stop after reading, full decoding, ROI decoding,
resizing and crop_mirror_normalize, and prints images/s for each (median of
3 runs of 25 batches). DATA defaults to the bench's demo folder.
"""

import argparse
import statistics
import time
from pathlib import Path

from nvidia.dali import fn, pipeline, types

import gpupipe
from gpupipe.demo.photos import DemoSpec, ensure_demo
from gpupipe.env import cache_dir

STAGES = ("read", "decode (full image)", "decode (ROI)", "+ resize 224 (antialias)", "+ resize 224 (no antialias)",
          "+ crop_mirror_normalize")


def build(stage, files, labels, threads, batch_size):
    pipe = pipeline.Pipeline(batch_size=batch_size, num_threads=threads, device_id=None, seed=1, exec_dynamic=True)
    with pipe:
        data, label = fn.readers.file(files=files, labels=labels, random_shuffle=True)
        if stage == "decode (full image)":
            data = fn.decoders.image(data, device="cpu", output_type=types.RGB)
        elif stage != "read":
            data = fn.decoders.image_random_crop(data, device="cpu", output_type=types.RGB)
            if "resize" in stage or "normalize" in stage:
                data = fn.resize(data, resize_x=224, resize_y=224, antialias="no antialias" not in stage)
            if "normalize" in stage:
                data = fn.crop_mirror_normalize(data, dtype=types.FLOAT, output_layout="HWC", mean=[124, 116, 104],
                                                std=[58, 57, 57], mirror=fn.random.coin_flip())
        pipe.set_outputs(data, label)
    pipe.build()
    return pipe


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    data = args.data or ensure_demo(cache_dir(), DemoSpec())
    source = gpupipe.ImageFolder(data)
    for stage in STAGES:
        pipe = build(stage, source.paths, source.labels, args.threads, args.batch_size)
        for _ in range(3):
            pipe.run()
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(25):
                pipe.run()
            runs.append(25 * args.batch_size / (time.perf_counter() - start))
        print(f"{stage:30s} {statistics.median(runs):8.0f} images/s")
        del pipe


if __name__ == "__main__":
    main()
