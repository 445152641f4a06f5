"""Folders and files as an adversarial user makes them: link loops, FIFOs, devices, huge files,
names that are not UTF-8, a broken scan cache. Nothing hangs, nothing is read twice or outside."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gpupipe
from gpupipe.pack import pack
from gpupipe.pack.manifest import escape, read_sources, unescape
from helpers import CPU_BACKENDS, flat_folder, make_image_folder, sample_ids

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def test_link_loops_neither_repeat_images_nor_hang(tmp_path):
    root = flat_folder(tmp_path / "data", 6, classes=2)
    (root / "class_0" / "loop").symlink_to(root / "class_0")        # a link to its own folder
    (root / "class_0" / "up").symlink_to(root)                      # a link to an ancestor
    (root / "class_1" / "sub").mkdir()
    (root / "class_1" / "sub" / "back").symlink_to(root / "class_1")
    (root / "class_1" / "other").symlink_to(tmp_path / "elsewhere")  # a dangling link
    source = gpupipe.ImageFolder(root)
    assert len(source) == 6 and len(set(source.names)) == 6
    assert sorted(Path(p).name for p in source.names) == [f"s{i:04d}.png" for i in range(6)]


def test_a_linked_folder_is_followed_once(tmp_path):
    root = flat_folder(tmp_path / "data", 4, classes=1)
    extra = flat_folder(tmp_path / "extra", 2, classes=1) / "class_0"
    (root / "class_0" / "more").symlink_to(extra)
    (root / "class_0" / "again").symlink_to(extra)
    assert len(gpupipe.ImageFolder(root)) == 6, "two links to one folder: its images once"


@pytest.mark.timeout(120)
def test_fifos_devices_and_huge_files_are_refused_without_reading_them(tmp_path):
    root = flat_folder(tmp_path / "data", 4, classes=1)
    os.mkfifo(root / "class_0" / "fifo.jpg")
    (root / "class_0" / "zero.jpg").symlink_to("/dev/zero")
    (root / "class_0" / "huge.png").write_bytes((root / "class_0" / "s0000.png").read_bytes() + b"\0" * 5000)
    with pytest.raises(ValueError) as info:
        gpupipe.loader(root, PIPELINE, batch_size=2, backend="torchvision", max_file_size=4096)
    message = str(info.value)
    assert "fifo.jpg: not a regular file" in message and "zero.jpg: not a regular file" in message
    assert "huge.png: file too large: " in message and "exceeds the 4,096-byte limit" in message
    loader = gpupipe.loader(root, PIPELINE, batch_size=2, backend="torchvision", max_file_size=4096, on_error="skip")
    assert len(loader.source) == 4


@pytest.mark.timeout(180)
def test_the_packer_neither_hangs_on_a_fifo_nor_reads_dev_zero(tmp_path):
    root = flat_folder(tmp_path / "data", 4, classes=1)
    os.mkfifo(root / "class_0" / "fifo.jpg")
    (root / "class_0" / "zero.jpg").symlink_to("/dev/zero")
    summary = pack(root, tmp_path / "out", workers=1, progress=False)
    assert summary.packed == 4
    manifest = (tmp_path / "out" / "manifest.json").read_text()
    assert "fifo.jpg" in manifest and "zero.jpg" in manifest and "not a regular file" in manifest


def non_utf8_name(folder: Path, source: Path) -> Path:
    """A copy of ``source`` under a name with bytes that are not UTF-8 (as from another system)."""
    raw = os.fsencode(str(folder)) + b"/caf\xe9-\xff.png"
    with open(raw, "wb") as fh:
        fh.write(source.read_bytes())
    return Path(os.fsdecode(raw))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_file_names_that_are_not_utf8_load_on_every_backend(tmp_path, backend):
    root = flat_folder(tmp_path / "data", 3, classes=1)
    odd = non_utf8_name(root / "class_0", root / "class_0" / "s0001.png")
    loader = gpupipe.loader(root, PIPELINE, batch_size=4, backend=backend, shuffle=False, num_threads=1)
    assert odd.name in [Path(p).name for p in loader.source.names]
    ids = [i for x, _ in loader for i in sample_ids(x)]
    assert sorted(ids) == [0, 1, 1, 2]


def test_the_packer_packs_and_lists_names_that_are_not_utf8_or_have_tabs(tmp_path):
    root = flat_folder(tmp_path / "data", 3, classes=1)
    odd = non_utf8_name(root / "class_0", root / "class_0" / "s0001.png")
    tabbed = root / "class_0" / "tab\there\nand newline.png"
    tabbed.write_bytes((root / "class_0" / "s0002.png").read_bytes())
    pack(root, tmp_path / "out", workers=1, progress=False)
    listed = {path for path, _ in read_sources(tmp_path / "out").values()}
    assert str(odd) in listed and str(tabbed) in listed
    lines = (tmp_path / "out" / "sources.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 5 and all(line.count("\t") == 2 for line in lines)


@pytest.mark.parametrize("name", ["plain.png", "tab\there.png", "new\nline", "back\\slash\\x41", "caf\udce9", "é ü"])
def test_sources_tsv_escaping_round_trips(name):
    assert unescape(escape(name)) == name
    assert "\t" not in escape(name) and "\n" not in escape(name)


def test_a_scan_cache_of_the_wrong_shape_is_ignored(tmp_path, caplog):
    root = flat_folder(tmp_path / "data", 4, classes=1)
    gpupipe.loader(root, PIPELINE, batch_size=2, backend="torchvision", num_threads=0)
    cache_dir = Path(os.environ["GPUPIPE_CACHE"]) / "scan"
    for cache in cache_dir.glob("*.npz"):
        np.savez(cache, listing=np.array("x"), keys=np.zeros(3))  # valid file, wrong content
    loader = gpupipe.loader(root, PIPELINE, batch_size=2, backend="torchvision", num_threads=0)
    assert len(list(loader)) == 2
    for cache in cache_dir.glob("*.npz"):
        cache.write_bytes(b"not an npz at all")
    with caplog.at_level("WARNING", logger="gpupipe.scan"):
        loader = gpupipe.loader(root, PIPELINE, batch_size=2, backend="torchvision", num_threads=0)
    assert "ignoring unreadable scan cache" in caplog.text
    assert len(list(loader)) == 2


def test_partially_corrupt_jpegs_are_delivered_by_every_cpu_backend(tmp_path):
    """libjpeg decodes some damaged JPEGs with a warning ("Corrupt JPEG data") and grey fill; both
    CPU backends deliver them (the README says so); packing decodes fully and keeps them too."""
    pytest.importorskip("nvidia.dali")
    root = tmp_path / "data"
    written = make_image_folder(root, {"a": 2}, sizes=(64, 65), seed=3)
    data = bytearray(written[0][0].read_bytes())
    data[len(data) // 2: len(data) // 2 + 40] = b"\x00" * 40  # damage inside the scan data
    written[0][0].write_bytes(bytes(data))
    for backend in ("dali-cpu", "torchvision"):
        loader = gpupipe.loader(root, PIPELINE, batch_size=2, backend=backend, num_threads=1, on_error="skip")
        images = torch.cat([x for x, _ in loader])
        assert len(images) == 2 and not loader.skipped, backend


def test_cli_reports_a_pack_error_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gpupipe.pack", str(tmp_path / "none"), str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "none" in proc.stderr
