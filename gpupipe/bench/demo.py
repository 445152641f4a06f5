"""Synthetic demo photos with natural-image statistics, generated locally.

Each image is a "dead leaves" scene (overlapping discs and bars, a classic
model of natural-image statistics: occlusion edges at every scale) over a
coloured 1/f noise background, with 1/f texture on every leaf. Power
spectra fall off like natural photos, so JPEG sizes and decode costs are
realistic, unlike flat colours or white noise. Sides are 300-700 px with
ImageNet-like aspect ratios; at quality 90 files average ~100 KiB.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

logger = logging.getLogger(__name__)

#: Bump when the generator changes, so cached folders are rebuilt.
DEMO_VERSION = 1
#: Core-seconds to generate one image (measured on the 2-core EPYC VM: ~0.1 s), for the bench's estimate.
SECONDS_PER_IMAGE = 0.1


@dataclass(frozen=True)
class DemoSpec:
    """What to generate: ``classes x per_class`` JPEGs; ``scale`` > 1 enlarges each scene
    (bicubic, then fresh sensor noise) into a large photo, e.g. 3 for sides of ~900-2100 px."""

    classes: int = 10
    per_class: int = 100
    quality: int = 90
    seed: int = 0
    scale: float = 1.0


def pink_noise(rng: np.random.Generator, height: int, width: int, exponent: float) -> np.ndarray:
    """Returns ``(H, W)`` float32 noise with amplitude spectrum ``1 / f**exponent``, unit std."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spectrum = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) / f**exponent
    spectrum[0, 0] = 0
    noise = np.fft.irfft2(spectrum, s=(height, width)).astype(np.float32)
    return noise / (noise.std() + 1e-8)


def demo_image(rng: np.random.Generator, label: int, num_classes: int) -> np.ndarray:
    """One synthetic photo, ``(H, W, 3)`` uint8; the class shifts its palette."""
    aspect = float(np.exp(rng.uniform(np.log(0.66), np.log(1.5))))
    short = int(rng.uniform(300, 500))
    height, width = (short, int(min(700, short * aspect))) if aspect >= 1 else (int(min(700, short / aspect)), short)
    hue = 2 * np.pi * (label + rng.uniform(-0.3, 0.3)) / num_classes
    base = np.array([np.cos(hue), np.cos(hue + 2.09), np.cos(hue + 4.19)], np.float32) * 40 + 120

    image = base + pink_noise(rng, height, width, 1.0)[..., None] * rng.uniform(25, 40)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    texture = pink_noise(rng, height, width, 0.85)
    for _ in range(int(rng.integers(25, 60))):
        # Leaf sizes follow a power law, as in the dead-leaves model.
        radius = min(height, width) * 0.5 * rng.uniform(0.02, 1.0) ** 2.2 + 3
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        if rng.random() < 0.7:
            mask = (yy - cy) ** 2 + ((xx - cx) * rng.uniform(0.5, 2.0)) ** 2 < radius**2
        else:
            angle = rng.uniform(0, np.pi)
            along = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
            across = -(xx - cx) * np.sin(angle) + (yy - cy) * np.cos(angle)
            mask = (np.abs(along) < radius * 2) & (np.abs(across) < radius * 0.35)
        colour = base + rng.normal(0, 55, 3).astype(np.float32)
        shade = texture[mask] * rng.uniform(8, 30)
        image[mask] = colour + shade[:, None]
    image += rng.normal(0, 2.0, image.shape).astype(np.float32)  # sensor noise
    return np.clip(image, 0, 255).astype(np.uint8)


def _enlarge(image: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image

    height, width = image.shape[:2]
    big = Image.fromarray(image).resize((round(width * scale), round(height * scale)), Image.BICUBIC)
    noisy = np.asarray(big, np.float32) + rng.normal(0, 2.0, (big.height, big.width, 3)).astype(np.float32)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _write_class(args: Tuple[Path, DemoSpec, int]) -> int:
    from PIL import Image

    root, spec, label = args
    rng = np.random.default_rng([spec.seed, label])
    folder = root / f"class_{label:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(spec.per_class):
        path = folder / f"img_{i:05d}.jpg"
        image = demo_image(rng, label, spec.classes)
        if spec.scale != 1:
            image = _enlarge(image, spec.scale, rng)
        Image.fromarray(image).save(path, quality=spec.quality)
        total += path.stat().st_size
    return total


def folder_stats(root: Path) -> Dict[str, float]:
    """Image count, classes, and size statistics (pixels from JPEG headers, no decoding)."""
    from PIL import Image

    sizes, widths, heights = [], [], []
    classes = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    for folder in classes:
        for path in sorted(folder.iterdir()):
            if path.suffix.lower() not in (".jpg", ".jpeg", ".png", ".webp", ".bmp"):
                continue
            sizes.append(path.stat().st_size)
            with Image.open(path) as img:
                widths.append(img.width)
                heights.append(img.height)
    if not sizes:
        raise ValueError(f"no images under {root}")
    kib = np.asarray(sizes) / 1024
    return {
        "images": len(sizes),
        "classes": len(classes),
        "mean_kib": round(float(kib.mean()), 1),
        "median_kib": round(float(np.median(kib)), 1),
        "total_mib": round(float(kib.sum() / 1024), 1),
        "mean_width": round(float(np.mean(widths)), 1),
        "mean_height": round(float(np.mean(heights)), 1),
        "min_side": int(min(min(widths), min(heights))),
        "max_side": int(max(max(widths), max(heights))),
    }


def packed_stats(root: Path) -> Dict[str, float]:
    """What :func:`folder_stats` says, for a packed folder (sizes from its manifest)."""
    from .. import shardfmt

    manifest = shardfmt.read_manifest(Path(root))
    sizes = np.array([s for shard in manifest["shards"] for s in shard.get("sizes", [])], np.float64).reshape(-1, 2)
    samples = manifest["totals"]["samples"]
    kib = manifest["totals"]["bytes"] / 1024 / max(1, samples)
    return {"images": samples, "classes": len(manifest["classes"]), "mean_kib": round(kib, 1), "median_kib": round(kib, 1),
            "total_mib": round(manifest["totals"]["bytes"] / 2**20, 1),
            "mean_width": round(float(sizes[:, 1].mean()), 1) if len(sizes) else 0.0,
            "mean_height": round(float(sizes[:, 0].mean()), 1) if len(sizes) else 0.0,
            "min_side": int(sizes.min()) if len(sizes) else 0, "max_side": int(sizes.max()) if len(sizes) else 0}


def generate(root: Path, spec: DemoSpec = DemoSpec(), workers: Optional[int] = None) -> Path:
    """Writes ``root/class_XX/img_XXXXX.jpg`` for ``spec``, over ``workers`` processes."""
    root = Path(root)
    workers = workers or os.cpu_count() or 1
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_write_class, [(root, spec, label) for label in range(spec.classes)]))
    (root / "demo.json").write_text(json.dumps({"version": DEMO_VERSION, **asdict(spec)}))
    return root


def demo_root(cache_dir: Path, spec: DemoSpec) -> Path:
    """Where the demo set of ``spec`` lives under ``cache_dir``."""
    scale = f"-x{spec.scale:g}" if spec.scale != 1 else ""
    return Path(cache_dir) / f"demo-v{DEMO_VERSION}-{spec.classes}x{spec.per_class}-q{spec.quality}-s{spec.seed}{scale}"


def is_built(root: Path) -> bool:
    """A finished folder holds ``demo.json`` (written last)."""
    return (Path(root) / "demo.json").is_file()


def ensure_demo(cache_dir: Path, spec: DemoSpec = DemoSpec(), workers: Optional[int] = None) -> Path:
    """Returns the demo folder under ``cache_dir``, generating it once (an interrupted one is rebuilt)."""
    root = demo_root(cache_dir, spec)
    if is_built(root):
        return root
    logger.info("generating %d demo images in %s (once; reused afterwards)", spec.classes * spec.per_class, root)
    return generate(root, spec, workers)
