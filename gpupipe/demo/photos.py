"""Synthetic demo photos with natural-image statistics, generated locally.

Each image is a "dead leaves" scene (overlapping discs and bars, a classic
model of natural-image statistics: occlusion edges at every scale) over a
coloured 1/f noise background, with 1/f texture on every leaf. Power
spectra fall off like natural photos, so JPEG sizes and decode costs are
realistic, unlike flat colours or white noise. Sides are 300-700 px with
ImageNet-like aspect ratios; at quality 90 files average ~100 KiB.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import env

logger = logging.getLogger(__name__)

#: Bump when the generator changes, so cached folders are rebuilt (2: a seed per image, for parallel chunks).
DEMO_VERSION = 2
#: Images per parallel job.
CHUNK = 20

#: ``progress(done, total)``.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class DemoSpec:
    """What to generate: ``classes x per_class`` JPEGs, or exactly ``images`` in all (the first
    ``images % classes`` classes one more than the others); ``scale`` > 1 enlarges each scene
    (bicubic, then fresh sensor noise) into a large photo, e.g. 3 for sides of ~900-2100 px.

    Raises:
        ValueError: ``images`` fewer than ``classes`` (a class without an image is no class).
    """

    classes: int = 10
    per_class: int = 100
    quality: int = 90
    seed: int = 0
    scale: float = 1.0
    images: int | None = None

    def __post_init__(self) -> None:
        if self.images is not None and not 1 <= self.classes <= self.images:
            raise ValueError(f"DemoSpec: {self.images} images cannot fill {self.classes} classes")
        if self.images is not None and self.images % self.classes == 0:  # whole classes: one name, one cache
            object.__setattr__(self, "per_class", self.images // self.classes)
            object.__setattr__(self, "images", None)

    def counts(self) -> list[int]:
        """Images per class, in class order."""
        if self.images is None:
            return [self.per_class] * self.classes
        base, extra = divmod(self.images, self.classes)
        return [base + (label < extra) for label in range(self.classes)]

    @property
    def total(self) -> int:
        """Images in all."""
        return sum(self.counts())


def pink_noise(rng: np.random.Generator, height: int, width: int, exponent: float) -> np.ndarray:
    """Returns ``(H, W)`` float32 noise with amplitude spectrum ``1 / f**exponent``, unit std."""
    fy = np.fft.fftfreq(height).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(width).astype(np.float32)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spectrum = np.empty(f.shape, np.complex64)
    spectrum.real = rng.standard_normal(f.shape, dtype=np.float32)
    spectrum.imag = rng.standard_normal(f.shape, dtype=np.float32)
    spectrum /= f**exponent
    spectrum[0, 0] = 0
    noise = np.fft.irfft2(spectrum, s=(height, width)).astype(np.float32, copy=False)
    return noise / (noise.std() + 1e-8)


def leaves(
    rng: np.random.Generator, height: int, width: int, count: int, scale: float = 1.0
) -> Iterator[tuple[tuple[slice, slice], np.ndarray]]:
    """The "dead leaves" of one scene: per leaf, its bounding box and its boolean mask inside that box.

    Leaf sizes follow a power law (as in the dead-leaves model); 70 % are
    ellipses, the rest bars. ``scale`` enlarges every leaf.
    """
    for _ in range(count):
        radius = (min(height, width) * 0.5 * rng.uniform(0.02, 1.0) ** 2.2 + 3) * scale
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        ellipse = rng.random() < 0.7
        stretch, angle = (rng.uniform(0.5, 2.0), 0.0) if ellipse else (1.0, rng.uniform(0, np.pi))
        reach = radius / stretch if ellipse else 2.05 * radius  # half-width of the bounding box
        tall = radius if ellipse else reach  # half-height of the bounding box
        rows = slice(max(0, int(cy - tall)), min(height, int(cy + tall) + 2))
        cols = slice(max(0, int(cx - reach)), min(width, int(cx + reach) + 2))
        if rows.start >= rows.stop or cols.start >= cols.stop:
            continue
        yy, xx = np.mgrid[rows, cols].astype(np.float32)
        if ellipse:
            mask = (yy - cy) ** 2 + ((xx - cx) * stretch) ** 2 < radius**2
        else:
            along = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
            across = -(xx - cx) * np.sin(angle) + (yy - cy) * np.cos(angle)
            mask = (np.abs(along) < radius * 2) & (np.abs(across) < radius * 0.35)
        yield (rows, cols), mask


def photo_size(rng: np.random.Generator, low: int = 300, high: int = 500, longest: int = 700) -> tuple[int, int]:
    """``(height, width)``: shorter side in ``[low, high)``, ImageNet-like aspect ratio, longer side <= ``longest``."""
    aspect = float(np.exp(rng.uniform(np.log(0.66), np.log(1.5))))
    short = int(rng.uniform(low, high))
    if aspect >= 1:
        return short, int(min(longest, short * aspect))
    return int(min(longest, short / aspect)), short


def palette(hue: float) -> np.ndarray:
    """An RGB base colour (float32) for a hue in radians."""
    return np.array([np.cos(hue), np.cos(hue + 2.09), np.cos(hue + 4.19)], np.float32) * 40 + 120


def background(rng: np.random.Generator, height: int, width: int, base: np.ndarray) -> np.ndarray:
    """A ``(H, W, 3)`` float32 1/f noise background around ``base``."""
    return base + pink_noise(rng, height, width, 1.0)[..., None] * rng.uniform(25, 40)


def finish(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Adds sensor noise and clips to uint8."""
    image += 2.0 * rng.standard_normal(image.shape, dtype=np.float32)
    return np.clip(image, 0, 255, out=image).astype(np.uint8)


def demo_image(rng: np.random.Generator, label: int, num_classes: int) -> np.ndarray:
    """One synthetic photo, ``(H, W, 3)`` uint8; the class shifts its palette."""
    height, width = photo_size(rng)
    base = palette(2 * np.pi * (label + rng.uniform(-0.3, 0.3)) / num_classes)
    image = background(rng, height, width, base)
    texture = pink_noise(rng, height, width, 0.85)
    for box, mask in leaves(rng, height, width, int(rng.integers(25, 60))):
        colour = base + rng.normal(0, 55, 3).astype(np.float32)
        shade = texture[box][mask] * rng.uniform(8, 30)
        image[box][mask] = colour + shade[:, None]
    return finish(image, rng)


def _enlarge(image: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image

    height, width = image.shape[:2]
    big = Image.fromarray(image).resize((round(width * scale), round(height * scale)), Image.Resampling.BICUBIC)
    noisy = np.asarray(big, np.float32) + rng.normal(0, 2.0, (big.height, big.width, 3)).astype(np.float32)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _write_images(args: tuple[Path, DemoSpec, int, range]) -> None:
    """Writes images ``indices`` of class ``label``; each image has its own seed, so any split gives the same set."""
    from PIL import Image

    root, spec, label, indices = args
    folder = root / f"class_{label:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    for i in indices:
        rng = np.random.default_rng([spec.seed, label, i])
        image = demo_image(rng, label, spec.classes)
        if spec.scale != 1:
            image = _enlarge(image, spec.scale, rng)
        Image.fromarray(image).save(folder / f"img_{i:05d}.jpg", quality=spec.quality)


def run_parallel(
    fn: Callable[[Any], Any], jobs: list[tuple], total: int, workers: int | None, progress: Progress | None
) -> list[Any]:
    """``fn`` of every job, over ``workers`` processes (default: the usable cores), in order.

    Each job's last element is the range of items it makes; ``progress(done, total)`` is
    called as jobs finish. On Ctrl-C, ``KeyboardInterrupt`` is raised here once the running jobs end (the
    workers ignore it; jobs not started are cancelled).
    """
    workers = max(1, min(workers or env.cores(), len(jobs)))
    done, results = 0, []
    if progress is not None:
        progress(0, total)
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_ctrl_c) if workers > 1 else None
    try:
        with _ctrl_c_held():  # the workers start here: a Ctrl-C while they fork waits, else it is lost in the fork
            results_in_order = pool.map(fn, jobs) if pool is not None else map(fn, jobs)
        for job, result in zip(jobs, results_in_order):
            done += len(job[-1])
            results.append(result)
            if progress is not None:
                progress(done, total)
    finally:  # Ctrl-C: the jobs not started are dropped, not waited for (a `with` block would run them all)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return results


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Holds SIGINT back while worker processes are forked (they inherit the held mask and never see it): a
    Ctrl-C during a fork raises in Python's at-fork hooks, where it is printed and dropped, in the parent too.
    Released, a Ctrl-C that came meanwhile raises ``KeyboardInterrupt`` here."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _ignore_ctrl_c() -> None:
    """A worker's start: Ctrl-C (SIGINT to the terminal's process group) is the parent's to report, in one line;
    a worker stops when the parent drops its jobs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def chunks(count: int, size: int | None = None) -> list[range]:
    """``range(count)`` in pieces of ``size`` (default: ``CHUNK``)."""
    size = size or CHUNK
    return [range(start, min(count, start + size)) for start in range(0, count, size)]


def folder_stats(root: Path) -> dict[str, float]:
    """Image count, classes and size statistics of what the loaders read from ``root``.

    An image folder is listed as ``gpupipe.loader`` lists it (nested folders included; hidden files, other
    files and the files its scan finds bad left out), with pixel sizes from the headers (no decoding); a pack
    is read from its manifest (``packed_stats``).

    Raises:
        ValueError: ``root`` holds no images the loaders read, naming it.
    """
    from ..sources import as_source

    source = as_source(Path(root))
    if getattr(source, "manifest", None) is not None:
        return packed_stats(root)
    bad = source.scan().bad
    good = [i for i in range(len(source.names)) if i not in bad]
    if not good:
        raise ValueError(f"no images under {root} that the loaders read ({len(bad)} bad)")
    kib = np.asarray([os.path.getsize(source.names[i]) for i in good], np.float64) / 1024
    sizes = source.scan().sizes[good]
    return _stats(len(good), len(source.classes), kib, float(kib.sum() / 1024), sizes)


def packed_stats(root: Path) -> dict[str, float]:
    """What ``folder_stats`` says, for a packed folder (sizes from its manifest)."""
    from ..shards import format as shardfmt

    manifest = shardfmt.read_manifest(Path(root))
    sizes = np.array([s for shard in manifest["shards"] for s in shard.get("sizes", [])], np.int64).reshape(-1, 2)
    samples = manifest["totals"]["samples"]
    kib = np.full(1, manifest["totals"]["bytes"] / 1024 / max(1, samples))
    return _stats(samples, len(manifest["classes"]), kib, manifest["totals"]["bytes"] / 2**20, sizes)


def _stats(images: int, classes: int, kib: np.ndarray, mib: float, sizes: np.ndarray) -> dict[str, float]:
    """The statistics of ``images`` files of ``kib`` KiB each (or their mean) and ``sizes`` ``(N, 2)``
    ``(h, w)`` (``-1``: not recorded, left out)."""
    sizes = sizes[(sizes > 0).all(axis=1)] if len(sizes) else sizes
    heights, widths = (sizes[:, 0], sizes[:, 1]) if len(sizes) else (np.zeros(1), np.zeros(1))
    return {
        "images": images,
        "classes": classes,
        "mean_kib": round(float(kib.mean()), 1),
        "median_kib": round(float(np.median(kib)), 1),
        "total_mib": round(mib, 1),
        "mean_width": round(float(widths.mean()), 1),
        "mean_height": round(float(heights.mean()), 1),
        "min_side": int(min(widths.min(), heights.min())),
        "max_side": int(max(widths.max(), heights.max())),
    }


def generate(
    root: Path, spec: DemoSpec = DemoSpec(), workers: int | None = None, progress: Progress | None = None
) -> Path:
    """Writes ``root/class_XX/img_XXXXX.jpg`` for ``spec`` over ``workers`` processes (default: all usable cores).

    Args:
        progress: called with ``(images written, total)`` as they are done.
    """
    root = Path(root)
    jobs = [(root, spec, label, piece) for label, count in enumerate(spec.counts()) for piece in chunks(count)]
    run_parallel(_write_images, jobs, spec.total, workers, progress)
    (root / "demo.json").write_text(json.dumps({"version": DEMO_VERSION, **asdict(spec)}))
    return root


def demo_root(cache_dir: Path, spec: DemoSpec) -> Path:
    """Where the demo set of ``spec`` lives under ``cache_dir``."""
    scale = f"-x{spec.scale:g}" if spec.scale != 1 else ""
    count = f"{spec.classes}x{spec.per_class}" if spec.images is None else f"{spec.classes}c{spec.images}"
    return Path(cache_dir) / f"demo-v{DEMO_VERSION}-{count}-q{spec.quality}-s{spec.seed}{scale}"


def is_built(root: Path) -> bool:
    """A finished folder holds ``demo.json`` (written last)."""
    return (Path(root) / "demo.json").is_file()


def ensure_demo(
    cache_dir: Path, spec: DemoSpec = DemoSpec(), workers: int | None = None, progress: Progress | None = None
) -> Path:
    """Returns the demo folder under ``cache_dir``, generating it once (an interrupted one is rebuilt)."""
    root = demo_root(cache_dir, spec)
    if is_built(root):
        return root
    logger.info("generating %d demo images in %s (once; reused afterwards)", spec.total, root)
    return generate(root, spec, workers, progress)
