"""Generated image files for every awkward case: formats, modes, orientation, damage.

Each case has a kind: "good" (decodes as it is), "converted" (decodes to RGB
after a conversion; ``reference`` is the RGB image every backend must
give), or "bad" (cannot be decoded; ``reason`` is a fragment of the skip reason).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
from PIL import Image, ImageOps

from helpers import textured_image


@dataclass
class Case:
    name: str
    path: Path
    kind: str
    reference: Optional[np.ndarray] = None  # (H, W, 3) uint8, what an RGB decode must give
    reason: Optional[str] = None


def write_cases(folder: Path, seed: int = 0) -> List[Case]:
    """Writes one file per case into ``folder`` (all in one class folder)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rgb = textured_image(rng, 48, 64)
    cases = []

    def saved(name, img, kind="converted", **save):
        path = folder / name
        img.save(path, **save)
        with Image.open(path) as check:
            reference = np.asarray(to_rgb_reference(check))
        cases.append(Case(name, path, kind, reference))

    saved("plain.jpg", Image.fromarray(rgb), kind="good", quality=95)
    saved("gray.jpg", Image.fromarray(rgb).convert("L"), quality=95)
    saved("cmyk.jpg", Image.fromarray(rgb).convert("CMYK"), quality=95)
    saved("palette.png", Image.fromarray(rgb).quantize(64))
    saved("rgba.png", Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 128, np.uint8)]), "RGBA"))
    saved("gray16.png", Image.fromarray(rgb[..., 0].astype(np.uint16) * 257))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when shown
    saved("rotated.jpg", Image.fromarray(rgb), quality=95, exif=exif)

    good = folder / "plain.jpg"
    data = good.read_bytes()
    for name, payload, reason in (
        ("truncated.jpg", data[: len(data) // 2], "truncated JPEG (no end-of-image marker)"),
        ("empty.jpg", b"", "empty file"),
        ("text.jpg", b"this is not an image\n" * 20, "not an image"),
        ("gzip.jpg", gzip.compress(data), "not an image"),
    ):
        (folder / name).write_bytes(payload)
        cases.append(Case(name, folder / name, "bad", reason=reason))
    return cases


def to_rgb_reference(img: Image.Image) -> Image.Image:
    """The agreed RGB meaning of any file: EXIF applied, 16-bit high byte, alpha dropped."""
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I"):
        img = Image.fromarray((np.asarray(img).astype(np.int64) >> 8).astype(np.uint8), "L")
    return img.convert("RGB")


def bomb(path: Path, side: int = 11_000) -> Path:
    """A 1-bit PNG of ``side`` x ``side`` pixels: a few KB on disk, 121 MP decoded."""
    Image.new("1", (side, side)).save(path)
    return path


def broken_inside_png(path: Path, seed: int = 0) -> Path:
    """A PNG whose header and IEND are intact but whose pixel data is corrupt:
    it passes the scan and fails only when decoded."""
    import io

    rgb = textured_image(np.random.default_rng(seed), 48, 64)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    start = data.find(b"IDAT") + 40
    for k in range(start, start + 160):
        data[k] ^= 0xA5
    path.write_bytes(bytes(data))
    return path


def broken_inside_jpeg(path: Path, seed: int = 0, size=(40, 56)) -> Path:
    """A JPEG whose header, frame and end marker are intact but whose Huffman tables are garbage:
    it passes the scan and fails only when decoded (on every decoder)."""
    import io

    rgb = textured_image(np.random.default_rng(seed), *size)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "JPEG", quality=90)
    data = bytearray(buffer.getvalue())
    pos = 2
    while pos < len(data):
        marker, length = data[pos + 1], int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == 0xC4:  # DHT: claim 255 codes of length 1 (an impossible table)
            for k in range(pos + 5, pos + 21):
                data[k] = 0xFF
        if marker == 0xDA:
            break
        pos += 2 + length
    path.write_bytes(bytes(data))
    return path
