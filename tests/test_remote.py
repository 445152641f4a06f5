"""Packs behind URLs, against real servers on 127.0.0.1 (Python's HTTP server, moto's S3 server): the
same samples as the local pack, a cache that keeps its limit, downloads checked and retried, clear
errors when the server goes away, one download per node."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
import torch

import gpupipe
from gpupipe.remote import RemoteError, Retry
from helpers import CPU_BACKEND_NAMES, CPU_BACKENDS, two_ranks
from servers import FolderServer, s3, small_pack  # noqa: F401, F811 -- s3: a fixture

pytest.importorskip("aiohttp")
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((16, 16)), gpupipe.Output("uint8")]
QUICK = Retry(attempts=2, backoff=0.05, timeout=5)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return small_pack(tmp_path_factory.mktemp("remote"), 120, shard_size=64 * 1024)


@pytest.fixture
def server(packed):
    srv = FolderServer(packed)
    yield srv
    srv.stop()


def shard_bytes(packed: Path) -> int:
    return max(p.stat().st_size for p in packed.glob("*.tar"))


def epochs(source, backend, n=2, **kwargs):
    loader = gpupipe.loader(source, PIPELINE, batch_size=8, backend=backend, num_threads=1, seed=1, **kwargs)
    return [[(x.clone(), y.clone()) for x, y in loader] for _ in range(n)]


def same(a, b) -> bool:
    """The same batches in every epoch of ``a`` and ``b``; an empty epoch never counts as the same."""
    return len(a) == len(b) > 0 and all(
        len(x) == len(y) > 0 and all(torch.equal(i, j) and torch.equal(k, m) for (i, k), (j, m) in zip(x, y))
        for x, y in zip(a, b))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_pack_over_http_gives_the_local_samples(packed, server, tmp_path, backend):
    remote = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert remote.labels.tolist() == gpupipe.Shards(packed).labels.tolist()
    assert same(epochs(remote, backend), epochs(packed, backend))
    tars = len(list(packed.glob("*.tar")))
    assert len(server.tar_gets()) == tars and set(server.tar_gets().values()) == {1}, "fetched once, then cached"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_pack_on_s3_gives_the_local_samples(packed, s3, tmp_path, backend, monkeypatch):  # noqa: F811
    url = s3.upload(packed, "bucket", f"data/packed-{backend}")
    monkeypatch.setenv("GPUPIPE_CACHE", str(tmp_path / "cache"))
    assert same(epochs(url, backend, n=1), epochs(packed, backend, n=1)), "gpupipe.loader('s3://...')"


def test_upload_puts_a_pack_on_s3_once_and_it_reads_back(packed, s3, tmp_path):  # noqa: F811
    from gpupipe.pack.upload import upload

    (tmp_path / "none").mkdir()
    url = s3.upload(tmp_path / "none", "uploads", "p")  # the bucket
    names = sorted(p.name for p in packed.iterdir() if p.is_file())
    sizes = {p.name: p.stat().st_size for p in packed.iterdir() if p.is_file()}
    assert upload(packed, url, names, QUICK) == sum(sizes.values())
    assert upload(packed, url, names, QUICK) == sizes["manifest.json"], "a rerun sends only the manifest"
    remote = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert remote.labels.tolist() == gpupipe.Shards(packed).labels.tolist()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_cache_keeps_its_limit_and_evicts(packed, server, tmp_path, backend):
    limit = 4 * shard_bytes(packed)
    remote = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", cache_limit=limit, retry=QUICK)
    assert remote.shards_per_run == 2
    loader = gpupipe.loader(remote, PIPELINE, batch_size=8, backend=backend, num_threads=1, seed=1)
    cache = remote.store.cache
    peak = 0
    for _ in range(2):
        for _ in loader:
            peak = max(peak, cache.cached_bytes())
    assert 0 < peak <= limit
    tars = len(list(packed.glob("*.tar")))
    assert len(list((tmp_path / "cache").glob("*.tar"))) < tars, "older shards were evicted"
    assert sum(server.tar_gets().values()) > tars, "evicted shards are fetched again in the next epoch"


def test_a_corrupted_download_is_detected_and_fetched_again(packed, server, tmp_path):
    server.corrupt.add("/shard-000001.tar")
    remote = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert same(epochs(remote, "torchvision", n=1), epochs(packed, "torchvision", n=1))
    assert server.tar_gets()["/shard-000001.tar"] == 2 and server.tar_gets()["/shard-000002.tar"] == 1


def test_a_cached_file_changed_on_disk_is_fetched_again(packed, server, tmp_path):
    remote = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
    epochs(remote, "torchvision", n=1)
    cached = Path(remote.store.paths[0])
    data = bytearray(cached.read_bytes())
    data[600] ^= 0xFF
    cached.write_bytes(bytes(data))
    again = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert same(epochs(again, "torchvision", n=1), epochs(packed, "torchvision", n=1))
    assert server.tar_gets()["/" + Path(remote.store.urls[0]).name] == 2


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_server_stopping_mid_epoch_gives_a_clear_error(packed, server, tmp_path, backend):
    remote = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", cache_limit=2 * shard_bytes(packed),
                            retry=QUICK)
    loader = gpupipe.loader(remote, PIPELINE, batch_size=4, backend=backend, num_threads=1, seed=1)
    it = iter(loader)
    next(it)
    server.stop()
    started = time.monotonic()
    with pytest.raises(RemoteError, match=rf"{server.url}/shard-\d+\.tar failed after 2 attempts"):
        for _ in it:
            pass
    assert time.monotonic() - started < 60
    del it, loader  # the error's traceback holds them in a cycle: freed here, not by the collector in the next
    gc.collect()  # test, where the torchvision worker's late exit cost ~5 s (torch's join timeout)


def test_a_missing_pack_and_an_unreachable_server_are_named(server, tmp_path):
    with pytest.raises(ValueError, match="is not a gpupipe pack: no manifest.json there"):
        gpupipe.Shards(server.url + "/nothing", cache_dir=tmp_path / "cache", retry=QUICK)
    server.stop()
    with pytest.raises(RemoteError, match=rf"reading {server.url}/manifest.json failed after 2 attempts"):
        gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)


@pytest.mark.slow
def test_two_ranks_on_one_node_fetch_each_shard_once(packed, server, tmp_path):
    """Every CPU backend in turn, in one torchrun launch, each with its own (empty) cache: each reads every
    sample, so each shard fetched once per backend is each shard fetched once by each backend's two ranks."""
    ranks = two_ranks(tmp_path, f"""
result = {{}}
for backend in {CPU_BACKEND_NAMES!r}:
    src = gpupipe.Shards({server.url!r}, cache_dir={str(tmp_path)!r} + '/cache-' + backend)
    loader = gpupipe.loader(src, [gpupipe.Decode(), gpupipe.Resize((16, 16)), gpupipe.Output("uint8")],
                            batch_size=4, backend=backend, num_threads=1, seed=1)
    result[backend] = [int(v) for _, y in loader for v in y]
""")
    assert all(list(r) == CPU_BACKEND_NAMES for r in ranks)
    for backend in CPU_BACKEND_NAMES:
        assert len(ranks[0][backend]) + len(ranks[1][backend]) == 120, backend
    tars, gets = len(list(packed.glob("*.tar"))), server.tar_gets()
    assert len(gets) == tars and set(gets.values()) == {len(CPU_BACKEND_NAMES)}, gets
