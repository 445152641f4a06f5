"""DALI runs over a pack of many small tars: a run reads whole epochs ahead (up to ``RUN_SAMPLES``), and each
stretch of samples from one tar is one path of ``readers.webdataset``, opened and indexed when the pipeline is
built. A tiny pack of many tars must not hand DALI tens of thousands of paths (seconds per build, and as many
files to open), and must still read every sample once per epoch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("nvidia.dali")

from helpers import flat_folder  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe.backends.dali import backend as dali_backend  # noqa: E402
from gpupipe.backends.dali import readers  # noqa: E402
from gpupipe.pack import PackSettings, pack  # noqa: E402


def test_a_pack_of_many_one_image_tars_gives_dali_few_paths_and_every_sample_once(tmp_path: Path, monkeypatch):
    folder = flat_folder(tmp_path / "folder", 24, classes=3, size=(16, 20))
    dst = tmp_path / "packed"
    pack(folder, dst, PackSettings(shard_size=1), workers=1, progress=False)
    assert len(list(dst.glob("*.tar"))) == 24  # one image per tar
    paths_per_reader: list[int] = []
    real = readers.fn.readers.webdataset

    def counting(*args, paths, **kwargs):
        paths_per_reader.append(len(paths))
        return real(*args, paths=paths, **kwargs)

    monkeypatch.setattr(readers.fn.readers, "webdataset", counting)
    loader = gpupipe.loader(str(dst), backend="dali-cpu", batch_size=4, shuffle=True, seed=3)
    epochs = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        epochs.append(sorted(int(n) for _, labels in loader for n in labels.tolist()))
    loader.close()
    assert epochs == [sorted(i % 3 for i in range(24))] * 3  # every image once per epoch, labels as packed
    assert paths_per_reader, "the pack was not read by readers.webdataset"
    # a run stops reading epochs ahead at RUN_TAR_STRETCHES stretches (24 per epoch here), not at RUN_SAMPLES
    assert max(paths_per_reader) < dali_backend.RUN_TAR_STRETCHES + 24
    assert max(paths_per_reader) >= 24  # still whole epochs


def _labels_by_epoch(folder: Path, epochs: int) -> list[list[tuple]]:
    loader = gpupipe.loader(str(folder), backend="dali-cpu", batch_size=2, shuffle=True, seed=5)
    seen = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        seen.append([tuple(labels.tolist()) for _, labels in loader])
    loader.close()
    return seen


def test_a_tiny_folder_plans_at_most_run_epochs_ahead_and_reads_on_past_them_in_order(tmp_path: Path, monkeypatch):
    folder = flat_folder(tmp_path / "folder", 4, classes=2, size=(12, 12))
    monkeypatch.setattr(dali_backend, "RUN_EPOCHS", 1_000)
    unbroken = _labels_by_epoch(folder, 7)
    runs: list[list] = []
    real = dali_backend.DaliBackend._refs

    def recording(self, read, start, reads):
        runs.append(real(self, read, start, reads))
        return runs[-1]

    monkeypatch.setattr(dali_backend.DaliBackend, "_refs", recording)
    monkeypatch.setattr(dali_backend, "RUN_EPOCHS", 3)
    assert _labels_by_epoch(folder, 7) == unbroken  # runs of 3 epochs read what one long run reads
    # 4 images, batch 2: 2 batches an epoch; without the cap one run planned 32,768 / 4 = 8,192 epochs ahead
    assert max(len({ref.epoch for ref in refs}) for refs in runs) == 3
    assert len(runs) >= 3
    assert all(sorted(n for batch in epoch for n in batch) == [0, 0, 1, 1] for epoch in unbroken)


def test_loaders_of_one_pipeline_trace_it_once_and_others_trace_their_own(tmp_path: Path, monkeypatch):
    from gpupipe.backends.dali import graph

    folder = flat_folder(tmp_path / "folder", 4, classes=2, size=(24, 24))
    traces: list[str] = []
    real = graph.Pipelines._traced_use

    def counting(self, every):
        traces.append(repr(self.graph_spec.ops))
        return real(self, every)

    monkeypatch.setattr(graph.Pipelines, "_traced_use", counting)
    monkeypatch.setattr(graph, "_TRACED", {})

    def batches(*ops) -> list:
        loader = gpupipe.loader(str(folder), [gpupipe.Decode(), *ops], backend="dali-cpu", batch_size=4, seed=1)
        got = [images for images, _ in loader]
        loader.close()
        return got

    policy = (gpupipe.Resize((16, 16)), gpupipe.TrivialAugment())
    first, again = batches(*policy), batches(*policy)
    assert len(traces) == 1 and all((a == b).all() for a, b in zip(first, again, strict=True))
    batches(gpupipe.Resize((16, 16)), gpupipe.TrivialAugment(num_magnitude_bins=11))  # another policy: traced
    assert len(traces) == 2
