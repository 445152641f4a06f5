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
