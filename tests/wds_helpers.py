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


def tar_bytes(labels) -> bytes:
    """A WebDataset tar: ``{i:04d}.png`` (grey ``10 * i``) and ``{i:04d}.cls`` per label (text as given)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i, label in enumerate(labels):
            add(tar, f"{i:04d}.png", png(10 * i))
            add(tar, f"{i:04d}.cls", str(label).encode())
    return out.getvalue()
