"""JPEG decoding in the torchvision backend: TorchCodec against torchvision.io, on the bench's demo data.

    python benchmarks/decode_compare.py [--data FOLDER] [--images 200] [--repeats 5] [--out FILE]

Reads ``--images`` JPEGs of the folder into memory (default: the bench's demo
set, 1,000 "dead leaves" photos of 300-700 px, built once in gpupipe's cache
folder), then decodes all of them with each decoder in turn, ``--repeats``
times (the decoders take turns, so a machine's drift hits both alike), on one
thread (as in one DataLoader worker). Writes, per decoder, the images/s of
every repeat, their median and spread (min-max), and the pixels' agreement.
Both decoders are the ones ``gpupipe.backends.torchvision.dataset`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from gpupipe import env  # noqa: E402
from gpupipe.backends.torchvision import dataset  # noqa: E402
from gpupipe.demo import photos as demo  # noqa: E402


def torchcodec_decoder():
    """TorchCodec's decode as the backend calls it, or ``None`` where it is not installed."""
    decode, name = dataset.jpeg_decoder()
    return decode if name == "torchcodec" else None


def load(folder: Path, count: int) -> list[torch.Tensor]:
    """The first ``count`` JPEGs under ``folder`` (sorted), as uint8 tensors of their bytes."""
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))[:count]
    if not paths:
        raise SystemExit(f"error: no JPEGs under {folder}")
    return [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in paths]


def time_once(decode, blobs: list[torch.Tensor]) -> float:
    """Images per second decoding every blob once."""
    started = time.perf_counter()
    for blob in blobs:
        decode(blob)
    return len(blobs) / (time.perf_counter() - started)


def summary(rates: list[float]) -> dict:
    return {
        "images_per_s": [round(r, 1) for r in rates],
        "median": round(statistics.median(rates), 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "spread_pct": round(100 * (max(rates) - min(rates)) / statistics.median(rates), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a folder of JPEGs (default: the bench's demo set)")
    parser.add_argument("--images", type=int, default=200, help="JPEGs decoded per repeat (default: 200)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per decoder, at least 3 (default: 5)")
    parser.add_argument("--out", type=Path, help="JSON file to write (default: print only)")
    args = parser.parse_args(argv)
    if args.repeats < 3 or args.images < 1:
        parser.error("--repeats must be >= 3 and --images >= 1")
    folder = args.data or demo.ensure_demo(env.cache_dir())
    blobs = load(folder, args.images)
    decoders = {"torchvision.io": dataset._torchvision_jpeg}
    codec = torchcodec_decoder()
    if codec is not None:
        decoders["torchcodec"] = codec
    torch.set_num_threads(1)
    for decode in decoders.values():  # one untimed pass each: libraries loaded, caches warm
        time_once(decode, blobs[:10])
    rates: dict[str, list[float]] = {name: [] for name in decoders}
    load_before = os.getloadavg()[0]
    for k in range(args.repeats):  # A B, then B A: neither decoder always runs first
        for name in list(decoders) if k % 2 == 0 else reversed(list(decoders)):
            rates[name].append(time_once(decoders[name], blobs))
    load_after = os.getloadavg()[0]
    same = codec is None or all(torch.equal(codec(b), dataset._torchvision_jpeg(b)) for b in blobs[:20])
    results = {name: summary(values) for name, values in rates.items()}
    fastest = max(results, key=lambda name: results[name]["median"])
    out = {
        "what": "JPEG decode, one thread, images/s over the same in-memory JPEGs, decoders taking turns",
        "data": {"folder": str(folder), "images": len(blobs),
                 "mean_kib": round(sum(map(len, blobs)) / len(blobs) / 1024, 1)},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": env.cores(),
                    "torch": torch.__version__, "load_1min_before": round(load_before, 2),
                    "load_1min_after": round(load_after, 2)},
        "repeats": args.repeats,
        "decoders": results,
        "same_pixels": same,
        "fastest": fastest,
        "backend_default": dataset.JPEG_DECODER,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
