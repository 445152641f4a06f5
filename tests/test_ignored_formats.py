"""Photos in formats neither torchvision's ImageFolder nor gpupipe reads (a phone's HEIC, AVIF, GIF, raw
files) are left out by both, as torchvision does, but named in a warning, not silently."""

from __future__ import annotations

import logging

import numpy as np
from helpers import write_image

import gpupipe


def test_photos_in_formats_no_loader_reads_are_named_by_format(tmp_path, caplog):
    for cls in ("cat", "dog"):
        write_image(tmp_path / cls / "a.jpg", np.full((8, 8, 3), 90, np.uint8))
    (tmp_path / "cat" / "IMG_0001.HEIC").write_bytes(b"\x00\x00\x00\x18ftypheic")
    (tmp_path / "cat" / "IMG_0002.heic").write_bytes(b"\x00\x00\x00\x18ftypheic")
    (tmp_path / "dog" / "nested").mkdir()
    (tmp_path / "dog" / "nested" / "run.gif").write_bytes(b"GIF89a")
    (tmp_path / "dog" / "notes.txt").write_text("not a photo")  # no warning for what is no photo
    with caplog.at_level(logging.WARNING, logger="gpupipe.sources"):
        folder = gpupipe.ImageFolder(tmp_path)
    assert len(folder) == 2
    warned = [r.getMessage() for r in caplog.records if "neither torchvision" in r.getMessage()]
    assert len(warned) == 1, caplog.text
    assert "3 files left out" in warned[0] and ".heic: 2, .gif: 1" in warned[0], warned[0]
    assert "notes.txt" not in warned[0]


def test_a_folder_of_readable_photos_warns_of_no_format(tmp_path, caplog):
    for cls in ("cat", "dog"):
        write_image(tmp_path / cls / "a.jpg", np.full((8, 8, 3), 90, np.uint8))
    with caplog.at_level(logging.WARNING, logger="gpupipe.sources"):
        gpupipe.ImageFolder(tmp_path)
    assert "neither torchvision" not in caplog.text
