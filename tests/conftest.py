"""Shared fixtures: tiny generated image folders, backend/device parametrisation."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest
import torch
from PIL import Image

HAS_CUDA = torch.cuda.is_available()
HAS_DALI = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None

if os.environ.get("GPUPIPE_REQUIRE_DALI") == "1" and not HAS_DALI:
    raise RuntimeError("GPUPIPE_REQUIRE_DALI=1 but nvidia.dali does not import: DALI tests would be skipped")

needs_cuda = pytest.mark.cuda
needs_dali = pytest.mark.skipif(not HAS_DALI, reason="DALI is not installed")


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Scan caches and demo data go to a temporary folder, not the user's ~/.cache."""
    previous = os.environ.get("GPUPIPE_CACHE")
    os.environ["GPUPIPE_CACHE"] = str(tmp_path_factory.mktemp("gpupipe-cache"))
    yield
    if previous is None:
        os.environ.pop("GPUPIPE_CACHE", None)
    else:
        os.environ["GPUPIPE_CACHE"] = previous


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


def _backend_param(backend: str, device: str):
    marks = []
    if device == "cuda":
        marks.append(needs_cuda)
    if backend.startswith("dali"):
        marks.append(needs_dali)
    return pytest.param(backend, device, marks=marks, id=f"{backend}-{device}")


#: Every (backend, device) pair; the CUDA ones are skipped without a GPU.
BACKEND_DEVICES = [
    _backend_param("dali-cpu", "cpu"),
    _backend_param("torchvision", "cpu"),
    _backend_param("dali", "cuda"),
    _backend_param("torchvision", "cuda"),
    _backend_param("dali-cpu", "cuda"),
]
#: The backends that run on the CPU, for parity with torchvision.
DALI_BACKEND_DEVICES = [p for p in BACKEND_DEVICES if p.values[0].startswith("dali")]


def textured_image(rng: np.random.Generator, height: int, width: int, tint: Sequence[float] = (1, 1, 1)) -> np.ndarray:
    """A smooth random image (blurred noise plus a gradient): ``(H, W, 3)`` uint8."""
    coarse = rng.random((max(2, height // 8), max(2, width // 8), 3))
    img = np.asarray(Image.fromarray((coarse * 255).astype(np.uint8)).resize((width, height), Image.BICUBIC), np.float32)
    y, x = np.mgrid[0:height, 0:width]
    img += (x / width * 60)[..., None] - 30
    img *= np.asarray(tint, np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def write_image(path: Path, array: np.ndarray, quality: int = 92) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, quality=quality) if path.suffix.lower() in (".jpg", ".jpeg") else Image.fromarray(array).save(path)
    return path


def make_image_folder(
    root: Path,
    counts: Dict[str, int],
    *,
    sizes: Tuple[int, int] = (48, 96),
    seed: int = 0,
    ext: str = ".jpg",
) -> List[Tuple[Path, int]]:
    """Writes ``root/<class>/<i>.jpg`` for each class; returns ``(path, label)`` sorted like ImageFolder."""
    rng = np.random.default_rng(seed)
    written = []
    for label, name in enumerate(sorted(counts)):
        for i in range(counts[name]):
            h, w = (int(v) for v in rng.integers(sizes[0], sizes[1], 2))
            written.append((write_image(root / name / f"img_{i:03d}{ext}", textured_image(rng, h, w)), label))
    return written


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """Three classes, 7 + 5 + 6 = 18 small JPEGs of varied sizes."""
    root = tmp_path / "folder"
    make_image_folder(root, {"ant": 7, "bee": 5, "cat": 6})
    return root
