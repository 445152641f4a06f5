"""The cost of the loader's bad-file scan, per 100,000 files.

    python benchmarks/scan_bench.py [--files 20000]

Writes --files small JPEGs (copies of one ~20 KiB photo-like image, each a
distinct file) into a temporary folder, then times the first scan (every
header and tail read) and a second one (sizes and times checked against
the cache), and prints both scaled to 100,000 files.
"""

import argparse
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from gpupipe.sources.scan import scan

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from helpers import textured_image  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpupipe-scanbench-"))
    try:
        buffer = io.BytesIO()
        Image.fromarray(textured_image(np.random.default_rng(0), 240, 320)).save(buffer, "JPEG", quality=85)
        data = buffer.getvalue()
        paths = []
        for i in range(args.files):
            folder = work / "data" / f"c{i % 100:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{i:07d}.jpg"
            path.write_bytes(data)
            paths.append(str(path))
        timings = {}
        for name in ("first scan (headers read)", "second scan (cache)"):
            start = time.perf_counter()
            bad = scan(paths, max_pixels=100_000_000, cache_dir=work / "cache")
            timings[name] = time.perf_counter() - start
            assert not bad
        per_100k = {k: round(v * 100_000 / args.files, 2) for k, v in timings.items()}
        for name, seconds in per_100k.items():
            print(f"{name:28s} {timings[name]:6.2f} s for {args.files} files = {seconds:6.2f} s per 100,000 files")
        if args.out:
            args.out.write_text(json.dumps({"files": args.files, "file_kib": round(len(data) / 1024, 1),
                                            "seconds_per_100k": per_100k}, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
