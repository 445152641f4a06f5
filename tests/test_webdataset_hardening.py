"""WebDataset and packed shards against hostile data: a remote tar changed on the server with the
same size (over HTTP and S3), members too large to read (checked from the tar header before any
read), oversized extended headers, and the loader's ``max_file_size`` / ``on_error`` applied to
packed and WebDataset samples exactly as to a folder's files."""

from __future__ import annotations

import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import gpupipe
from gpupipe.pack import PackSettings, pack
from gpupipe.remote import Retry
from helpers import CPU_BACKENDS
from servers import FolderServer, S3Server

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
QUICK = Retry(attempts=2, backoff=0.05, timeout=5)


def png(value: int, size=(12, 16), noise: bool = False) -> bytes:
    rng = np.random.default_rng(value)
    pixels = rng.integers(0, 255, (*size, 3), dtype=np.uint8) if noise else np.full((*size, 3), value, np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def add(tar: tarfile.TarFile, name: str, data: bytes, **pax) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = pax
    tar.addfile(info, io.BytesIO(data))


def write_tar(path: Path, labels, fmt=tarfile.USTAR_FORMAT) -> Path:
    """``{i}.png`` (grey level ``10 * i``) and ``{i}.cls`` per label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for i, label in enumerate(labels):
            add(tar, f"{i:04d}.png", png(10 * i))
            add(tar, f"{i:04d}.cls", str(label).encode())
    return path


# -- 3. a tar changed on the server with the same size --------------------------------------------


def test_a_remote_tar_changed_with_the_same_size_gives_the_new_labels_over_http(tmp_path):
    tar = write_tar(tmp_path / "served" / "data.tar", [0, 1, 2, 3])
    server = FolderServer(tmp_path / "served")
    try:
        url = f"{server.url}/data.tar"
        first = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
        assert first.labels.tolist() == [0, 1, 2, 3]
        size = tar.stat().st_size
        write_tar(tar, [3, 2, 1, 0])  # an edited label keeps the size (512-byte blocks)
        os.utime(tar, (tar.stat().st_atime, tar.stat().st_mtime + 10))
        assert tar.stat().st_size == size
        again = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
        assert again.labels.tolist() == [3, 2, 1, 0], "indexed from the new tar, not the cached copy"
        loader = gpupipe.loader(again, PIPELINE, batch_size=4, backend="torchvision", num_threads=1, shuffle=False)
        assert [int(v) for _, y in loader for v in y] == [3, 2, 1, 0]
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3():
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = S3Server()
    yield server
    server.stop()


def test_a_remote_tar_changed_with_the_same_size_gives_the_new_labels_on_s3(tmp_path, s3):
    tar = write_tar(tmp_path / "up" / "data.tar", [0, 1, 2, 3])
    url = s3.upload(tmp_path / "up", "wds", "same-size") + "/data.tar"
    assert gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK).labels.tolist() == [0, 1, 2, 3]
    write_tar(tar, [1, 1, 1, 1])
    s3.upload(tmp_path / "up", "wds", "same-size")
    again = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert again.labels.tolist() == [1, 1, 1, 1]


# -- 8. sizes from the tar header before any read -------------------------------------------------


def peak_bytes(action) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_member_that_is_no_image_is_never_read_whole(tmp_path):
    path = tmp_path / "big.tar"
    with tarfile.open(path, "w") as tar:
        add(tar, "0000.png", png(0))
        add(tar, "0000.cls", b"0")
        add(tar, "0001.png", b"{" + b" " * (48 << 20) + b"}")  # 48 MiB of JSON named .png
        add(tar, "0001.cls", b"1")
    peak = peak_bytes(lambda: gpupipe.WebDataset(path, cache_dir=tmp_path / "cache"))
    assert peak < 16 << 20, f"{peak:,} bytes allocated while indexing"
    source = gpupipe.WebDataset(path, cache_dir=tmp_path / "cache2", max_file_size=1 << 20)
    assert source.damaged == {1: "file too large: 50,331,650 bytes exceeds the 1,048,576-byte limit"}


def test_an_oversized_extended_header_is_refused_unread(tmp_path):
    path = tmp_path / "pax.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "0000.png", png(0))
        add(tar, "0000.cls", b"0")
        add(tar, "0001.png", png(1), comment="x" * (40 << 20))
        add(tar, "0001.cls", b"1")
    source = {}
    peak = peak_bytes(lambda: source.update(s=gpupipe.WebDataset(path, cache_dir=tmp_path / "cache")))
    assert peak < 16 << 20, f"{peak:,} bytes allocated while indexing"
    assert source["s"].labels.tolist() == [0]
    assert any("extended header of" in p.reason for p in source["s"].problems), source["s"].problems


# -- 13. the loader's max_file_size and on_error, on every kind of source --------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """16 images, half flat (small files) and half noise (large files): a folder, its pack and its tars."""
    root = tmp_path_factory.mktemp("mixed")
    folder = root / "images" / "c"
    folder.mkdir(parents=True)
    for i in range(16):
        (folder / f"{i:04d}.png").write_bytes(png(10 * i, size=(24, 24), noise=i % 2 == 1))
    pack(root / "images", root / "packed", PackSettings(shard_size=1 << 20), workers=1, progress=False)
    with tarfile.open(root / "wds.tar", "w") as tar:
        for path in sorted(folder.iterdir()):
            add(tar, path.name, path.read_bytes())
            add(tar, path.stem + ".cls", b"0")
    sizes = [p.stat().st_size for p in sorted(folder.iterdir())]
    return root, (max(s for s in sizes[::2]) + min(s for s in sizes[1::2])) // 2


def kept(source, limit: int, backend: str, on_error: str = "skip"):
    loader = gpupipe.loader(source, PIPELINE, batch_size=2, backend=backend, num_threads=1, shuffle=False,
                            max_file_size=limit, on_error=on_error)
    return sorted(round(float(x.float().mean()) / 10) for images, _ in loader for x in images), loader


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_packed_and_webdataset_samples_honour_the_loaders_max_file_size(mixed, tmp_path, backend):
    root, limit = mixed
    folder, folder_loader = kept(root / "images", limit, backend)
    assert folder == list(range(0, 16, 2)) and len(folder_loader.skipped) == 8
    for source in (gpupipe.Shards(root / "packed"), gpupipe.WebDataset(root / "wds.tar", cache_dir=tmp_path)):
        seen, loader = kept(source, limit, backend)
        assert set(seen) == set(folder), type(source).__name__
        assert sorted(Path(s.path.split("#")[-1]).stem for s in loader.skipped) == [f"{i:04d}" for i in range(1, 16, 2)]
        assert all("too large" in s.reason for s in loader.skipped)
        with pytest.raises(gpupipe.SampleError, match="8 of 16 files cannot be used"):
            kept(source, limit, backend, on_error="raise")
