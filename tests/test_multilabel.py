"""Multi-label targets: several classes per image from a list file, as multi-hot (B, num_classes)."""

from __future__ import annotations

import pytest
import torch

import gpupipe
from gpupipe.pack import PackSettings, pack, verify
from helpers import CPU_BACKENDS, flat_folder, sample_ids

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
TAGS = {0: ["cat"], 1: ["cat", "dog"], 2: ["bird", "dog"], 3: ["bird"], 4: ["cat", "dog", "bird"], 5: ["dog"]}


@pytest.fixture
def tagged(tmp_path):
    flat_folder(tmp_path / "imgs", 6, classes=1)
    listing = tmp_path / "tags.txt"
    listing.write_text("".join(f"imgs/class_0/s{i:04d}.png {','.join(t)}\n" for i, t in TAGS.items()))
    return listing


def expected(ids, classes):
    out = torch.zeros(len(ids), len(classes))
    for row, i in enumerate(ids):
        for tag in TAGS[i]:
            out[row, classes.index(tag)] = 1.0
    return out


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_list_with_several_labels_per_line_gives_multi_hot_targets(tagged, backend):
    source = gpupipe.FileList(tagged)
    assert source.kind is gpupipe.TargetKind.MULTI_LABEL and source.classes == ["bird", "cat", "dog"]
    loader = gpupipe.loader(source, PIPELINE, batch_size=4, backend=backend, num_threads=1, seed=2)
    seen = []
    for images, targets in loader:
        assert targets.dtype == torch.float32 and targets.shape == (len(images), 3)
        assert torch.equal(targets, expected(sample_ids(images), source.classes))
        seen.extend(sample_ids(images))
    assert sorted(seen) == sorted(TAGS), "every listed image once"


def test_pairs_and_csv_give_multi_label_sources(tmp_path):
    folder = flat_folder(tmp_path / "imgs", 2, classes=1)
    pairs = gpupipe.FileList([(folder / "class_0" / "s0000.png", [0, 2]), (folder / "class_0" / "s0001.png", 1)],
                             classes=["a", "b", "c"])
    assert [t.tolist() for t in pairs.label_sets([0, 1])] == [[0, 2], [1]]
    csv_file = tmp_path / "tags.csv"
    csv_file.write_text('path,labels\nimgs/class_0/s0000.png,"a,c"\nimgs/class_0/s0001.png,b;c\n')
    assert [t.tolist() for t in gpupipe.FileList(csv_file).label_sets([0, 1])] == [[0, 2], [1, 2]]
    with pytest.raises(ValueError, match="label 7 of .* is outside the class range 0..2"):
        gpupipe.FileList([(folder / "class_0" / "s0000.png", [0, 7])], classes=["a", "b", "c"])


def test_mixup_mixes_multi_hot_targets(tagged):
    ops = PIPELINE[:-1] + [gpupipe.Normalize(), gpupipe.MixUp(0.4)]
    loader = gpupipe.loader(tagged, ops, batch_size=6, backend="torchvision", num_threads=0, shuffle=False)
    images, targets = next(iter(loader))
    plain = expected(list(range(6)), gpupipe.FileList(tagged).classes)
    lam = None
    for row in range(6):
        mixed = targets[row]
        # lam * own + (1 - lam) * previous row's (rolled by one)
        candidates = [(mixed[k] - plain[row - 1][k]) / (plain[row][k] - plain[row - 1][k])
                      for k in range(3) if plain[row][k] != plain[row - 1][k]]
        if candidates:
            lam = candidates[0] if lam is None else lam
            assert all(abs(c - lam) < 1e-5 for c in candidates)
    assert lam is not None and 0 <= lam <= 1


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_packed_multi_label_shards(tagged, tmp_path, backend):
    dst = tmp_path / "packed"
    pack(tagged, dst, PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    assert verify(dst) == []
    shards = gpupipe.Shards(dst)
    assert shards.kind is gpupipe.TargetKind.MULTI_LABEL
    loader = gpupipe.loader(dst, PIPELINE, batch_size=6, backend=backend, num_threads=1)
    images, targets = next(iter(loader))
    assert torch.equal(targets, expected(sample_ids(images), shards.classes))
