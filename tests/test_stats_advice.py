"""``loader.stats()`` advice that knows the source: a pack made with ``--max-size`` is not told to
pre-resize; a remote pack whose cache downloaded shards during the batches measured is said to be
waiting on the network, with the cache's figures (downloads by worker processes included)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from helpers import CPU_BACKENDS, flat_folder
from servers import FolderServer

import gpupipe
from gpupipe.pack import ConvertSettings, PackSettings, pack

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((16, 16)), gpupipe.Output("uint8")]


class WaitingClock:
    """A ``perf_counter`` stand-in under which every batch is waited for 90 ms and worked on 10 ms
    (the loader reads the clock once when asked for a batch and once when it hands it out)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.steps = itertools.cycle([0.01, 0.09])

    def __call__(self) -> float:
        self.now += next(self.steps)
        return self.now


def measured_epoch(loader) -> gpupipe.StatsSummary:
    loader._stats.clock = WaitingClock()
    for _ in loader:
        pass
    return loader.stats(reset=True)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("advice") / "images", 60, classes=3, size=(40, 48))


@pytest.fixture(scope="module")
def packs(images):
    root = images.parent
    pack(images, root / "plain", PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    pack(images, root / "resized", PackSettings(convert=ConvertSettings(max_size=24), shard_size=64 * 1024),
         workers=1, progress=False)
    return root / "plain", root / "resized"


def test_a_pack_made_with_max_size_is_not_told_to_pre_resize(packs):
    plain, resized = packs
    assert gpupipe.Shards(resized).packed_max_size == 24 and gpupipe.Shards(plain).packed_max_size is None
    summary = measured_epoch(gpupipe.loader(resized, PIPELINE, batch_size=6, backend="torchvision", num_threads=0))
    assert summary.verdict == "input-bound" and summary.batches == 10
    assert summary.suggestion == ("the pack is already pre-resized (--max-size 24): train on a GPU with "
                                  "backend='dali', or give the loader more CPU cores (num_threads)")
    summary = measured_epoch(gpupipe.loader(plain, PIPELINE, batch_size=6, backend="torchvision", num_threads=0))
    assert summary.suggestion.startswith("pre-resize the images (python -m gpupipe.pack --max-size 256)")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_remote_pack_on_a_cold_cache_is_said_to_wait_on_the_network(packs, tmp_path, backend):
    pytest.importorskip("aiohttp")
    plain, _ = packs
    tars = sorted(plain.glob("*.tar"))
    assert len(tars) >= 2
    server = FolderServer(plain)
    try:
        # num_threads=1: the torchvision backend downloads in a worker process, not in this one
        loader = gpupipe.loader(gpupipe.Shards(server.url, cache_dir=tmp_path / "cache"), PIPELINE, batch_size=6,
                                backend=backend, num_threads=1, shuffle=False)
        cold = measured_epoch(loader)
        warm = measured_epoch(loader)
    finally:
        server.stop()
    mib = sum(t.stat().st_size for t in tars) / 2**20
    assert cold.verdict == "input-bound"
    assert cold.suggestion.startswith(
        f"the pack is remote and its cache downloaded {len(tars)} shards ({mib:.1f} MiB in ")
    assert ") during these batches: they may be waiting on the network" in cold.suggestion
    assert cold.suggestion.endswith("if it stays input-bound with a warm cache: pre-resize the images "
                                    "(python -m gpupipe.pack --max-size 256), or train on a GPU with backend='dali'")
    assert warm.verdict == "input-bound" and "network" not in warm.suggestion, "a warm cache downloads nothing"


def test_a_local_pack_says_nothing_of_a_network(packs):
    plain, _ = packs
    assert gpupipe.Shards(plain).fetched_since(0.0) is None
    summary = measured_epoch(gpupipe.loader(plain, PIPELINE, batch_size=6, backend="torchvision", num_threads=0))
    assert "network" not in summary.suggestion and Path(plain).is_dir()
