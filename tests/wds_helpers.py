"""Tar members and tiny PNGs for the WebDataset tests (test_webdataset.py, test_webdataset_hardening.py)."""

from __future__ import annotations

import io
import tarfile

import numpy as np
from PIL import Image


def png(value: int, size=(12, 16), noise: bool = False) -> bytes:
    """A PNG of ``size`` (h, w): flat grey ``value``, or random pixels seeded by ``value`` (``noise``)."""
    rng = np.random.default_rng(value)
    pixels = rng.integers(0, 255, (*size, 3), dtype=np.uint8) if noise else np.full((*size, 3), value, np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def add(tar: tarfile.TarFile, name: str, data: bytes, **pax) -> None:
    """Adds ``data`` as member ``name``, with ``pax`` as its extended header fields."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = pax
    tar.addfile(info, io.BytesIO(data))
