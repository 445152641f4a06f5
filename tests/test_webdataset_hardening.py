"""WebDataset and packed shards against hostile data: a remote tar changed on the server with the
same size (over HTTP and S3), members too large to read (checked from the tar header before any
read), oversized extended headers, and the loader's ``max_file_size`` / ``on_error`` applied to
packed and WebDataset samples exactly as to a folder's files."""

from __future__ import annotations

import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

import gpupipe
from gpupipe.pack import PackSettings, pack
from gpupipe.remote import RemoteError, Retry
from helpers import CPU_BACKENDS
from servers import FolderServer, s3  # noqa: F401, F811 -- s3: a fixture
from wds_helpers import add, png

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
QUICK = Retry(attempts=2, backoff=0.05, timeout=5)


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


def test_a_remote_tar_changed_with_the_same_size_gives_the_new_labels_on_s3(tmp_path, s3):  # noqa: F811
    tar = write_tar(tmp_path / "up" / "data.tar", [0, 1, 2, 3])
    url = s3.upload(tmp_path / "up", "wds", "same-size") + "/data.tar"
    assert gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK).labels.tolist() == [0, 1, 2, 3]
    write_tar(tar, [1, 1, 1, 1])
    s3.upload(tmp_path / "up", "wds", "same-size")
    again = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert again.labels.tolist() == [1, 1, 1, 1]


def test_a_remote_tar_replaced_mid_epoch_is_refused_not_read_with_the_old_index(tmp_path):
    """A tar changed on the server after it was indexed, fetched again mid-epoch (its cached copy gone:
    evicted, or removed by another process on the node): the download is refused by the sha256 the
    index was built from; the old labels never come with the new bytes. (A tar still open keeps
    giving the bytes it was indexed from: the dataset is what was indexed.)"""
    served = tmp_path / "served"
    for t in range(4):
        write_tar(served / f"data-{t}.tar", [t] * 4)
    server = FolderServer(served)
    try:
        cache = tmp_path / "cache"
        size = (served / "data-1.tar").stat().st_size  # a cache of 1.5 tars: no tar kept past the next two
        source = gpupipe.WebDataset(server.url + "/data-{0..3}.tar", cache_dir=cache, cache_limit=size * 3 // 2,
                                    retry=QUICK)
        loader = gpupipe.loader(source, PIPELINE, batch_size=4, backend="torchvision", num_threads=1, shuffle=False)
        assert [int(v) for _, y in loader for v in y] == [t for t in range(4) for _ in range(4)]
        write_tar(served / "data-0.tar", [1] * 4)  # same size, other labels; data-0 is closed by now
        assert (served / "data-0.tar").stat().st_size == size
        for path in cache.glob("*-data-0.tar*"):
            if not path.name.endswith(".lock"):
                path.unlink()
        with pytest.raises(RemoteError, match="data-0.tar .*sha256 differs"):
            [int(v) for _, y in loader for v in y]
    finally:
        server.stop()


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
    # A pack shuffles, re-encodes and renames its members (00000000.jpg ...): the members it skips
    # are those whose packed size is over the limit; the WebDataset tar keeps the folder's names.
    with tarfile.open(root / "packed" / "shard-000000.tar") as tar:
        too_large = sorted(Path(m.name).stem for m in tar.getmembers() if m.isfile() and m.size > limit)
    assert len(too_large) == 8
    expected = {"Shards": too_large, "WebDataset": [f"{i:04d}" for i in range(1, 16, 2)]}
    for source in (gpupipe.Shards(root / "packed"), gpupipe.WebDataset(root / "wds.tar", cache_dir=tmp_path)):
        seen, loader = kept(source, limit, backend)
        assert set(seen) == set(folder), type(source).__name__
        names = sorted(Path(s.path.split("#")[-1]).stem for s in loader.skipped)
        assert names == expected[type(source).__name__]
        assert all("too large" in s.reason for s in loader.skipped)
        with pytest.raises(gpupipe.SampleError, match="8 of 16 files cannot be used"):
            kept(source, limit, backend, on_error="raise")
