"""Samples that fail only while loading: the right file is blamed, batches keep their size and
count, and a resume after a recovery continues exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gpupipe
from gpupipe.loading.transfer import take_rows
from helpers import BACKEND_DEVICES, CPU_BACKEND_NAMES, CPU_BACKENDS, flat_folder, sample_ids, two_ranks
from imagecases import broken_inside_jpeg

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def make(root, backend, device="cpu", **kwargs):
    kwargs.setdefault("batch_size", 4)
    return gpupipe.loader(root, PIPELINE, backend=backend, device=device, shuffle=False, num_threads=1,
                          on_error="skip", **kwargs)


def break_samples(root: Path, ids) -> set:
    """Replaces samples ``ids`` of a :func:`flat_folder` with JPEGs that fail only when decoded."""
    names = set()
    for i in ids:
        original = next(root.glob(f"class_*/s{i:04d}.png"))
        original.unlink()
        broken_inside_jpeg(original.with_suffix(".jpg"), seed=i)
        names.add(original.with_suffix(".jpg").name)
    return names


def delivered(loader):
    return [(sample_ids(x), y.tolist()) for x, y in loader]


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_a_batch_whose_every_file_fails_is_refilled(tmp_path, backend, device):
    root = flat_folder(tmp_path / "data", 12, classes=1)
    bad = break_samples(root, [4, 5, 6, 7])  # the whole second batch
    loader = make(root, backend, device)
    batches = delivered(loader)
    assert [len(ids) for ids, _ in batches] == [4, 4, 4] and len(loader) == 3
    assert {Path(s.path).name for s in loader.skipped} == bad
    assert batches[0][0] == [0, 1, 2, 3] and batches[2][0] == [8, 9, 10, 11]
    assert batches[1][0] == [8, 8, 8, 8], "each failed slot takes the next usable sample of the rank's share"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_last_batch_all_corrupt_and_long_corrupt_runs(tmp_path, backend):
    root = flat_folder(tmp_path / "data", 20, classes=1)
    bad = break_samples(root, [16, 17, 18, 19] + list(range(2, 14)))  # the last batch, and 12 in a row
    loader = make(root, backend)
    batches = delivered(loader)
    assert [len(ids) for ids, _ in batches] == [4] * 5
    assert {Path(s.path).name for s in loader.skipped} == bad
    good = {0, 1, 14, 15}
    assert set(i for ids, _ in batches for i in ids) == good, "only usable samples are delivered"
    assert batches[4][0] == [0, 0, 0, 0], "the last batch wraps around to the share's start"


@pytest.mark.parametrize("change", ["deleted", "emptied", "truncated"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_file_changed_after_the_scan_is_the_only_one_blamed(tmp_path, backend, change):
    root = flat_folder(tmp_path / "data", 12, classes=1)
    loader = make(root, backend)  # scanned while every file is sound
    victim = next(root.glob("class_*/s0005.png"))
    if change == "deleted":
        victim.unlink()
    elif change == "emptied":
        victim.write_bytes(b"")
    else:
        victim.write_bytes(victim.read_bytes()[:40])
    batches = delivered(loader)
    assert [Path(s.path).name for s in loader.skipped] == ["s0005.png"], "the intact neighbours are not blamed"
    assert [ids for ids, _ in batches] == [[0, 1, 2, 3], [4, 6, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_exact_evaluation_drops_a_failed_sample_instead_of_repeating_another(tmp_path, backend):
    root = flat_folder(tmp_path / "data", 12, classes=1)
    bad = break_samples(root, [5])
    loader = make(root, backend, even_batches=False)
    for epoch in (1, 2):
        batches = delivered(loader)
        assert [ids for ids, _ in batches] == [[0, 1, 2, 3], [4, 6, 7], [8, 9, 10, 11]], "no sample twice"
        assert [len(labels) for _, labels in batches] == [4, 3, 4]
        assert loader.stats().dropped == epoch, "counted in every epoch that meets it"
    assert {Path(s.path).name for s in loader.skipped} == bad


def test_rows_left_out_keep_every_target_aligned():
    images = torch.arange(4).view(4, 1, 1, 1).expand(4, 3, 2, 2)
    targets = {"boxes": torch.arange(4.0).view(4, 1, 1).expand(4, 2, 4), "labels": torch.arange(8).view(4, 2),
               "image_sizes": torch.arange(8).view(4, 2)}
    kept, out = take_rows(images, targets, [0, 2, 3])
    assert kept[:, 0, 0, 0].tolist() == [0, 2, 3] and out["boxes"][:, 0, 0].tolist() == [0.0, 2.0, 3.0]
    assert out["labels"].tolist() == [[0, 1], [4, 5], [6, 7]] and out["image_sizes"].shape == (3, 2)
    assert take_rows(images, torch.arange(4), [1])[1].tolist() == [1]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_raise_names_the_failing_file(tmp_path, backend):
    root = flat_folder(tmp_path / "data", 8, classes=1)
    break_samples(root, [5])
    loader = gpupipe.loader(root, PIPELINE, batch_size=4, backend=backend, shuffle=False, num_threads=1)
    with pytest.raises(gpupipe.SampleError, match=r"s0005\.jpg: cannot decode"):
        list(loader)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_resume_after_a_recovered_batch_continues_exactly(tmp_path, backend):
    root = flat_folder(tmp_path / "data", 16, classes=1)
    break_samples(root, [1, 2])
    original = make(root, backend)
    it = iter(original)
    first = [sample_ids(next(it)[0]) for _ in range(2)]
    state = original.state_dict()
    rest = [sample_ids(x) for x, _ in it]
    assert state["batches_done"] == 2 and first[0] == [0, 3, 3, 3]
    resumed = make(root, backend)
    resumed.load_state_dict(state)
    assert [sample_ids(x) for x, _ in resumed] == rest, "no batch repeated, none lost"


@pytest.mark.slow
def test_ranks_stay_in_step_when_one_ranks_batch_fails_entirely(tmp_path):
    """Every CPU backend in turn, in one torchrun launch."""
    root = flat_folder(tmp_path / "data", 16, classes=1)
    break_samples(root, [0, 2])  # rank 0's first batch (it reads 0, 2, 4, ...)
    ranks = two_ranks(tmp_path, f"""
result = {{}}
for backend in {CPU_BACKEND_NAMES!r}:
    loader = gpupipe.loader({str(root)!r}, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
                            batch_size=2, backend=backend, shuffle=False, num_threads=1, on_error="skip")
    seen = []
    for images, labels in loader:
        total = torch.tensor([len(labels)])
        dist.all_reduce(total)  # what a DDP step does: every rank must take part
        seen.append(sample_ids(images))
    result[backend] = {{"rank": dist.get_rank(), "len": len(loader), "batches": seen}}
""")
    assert all(list(r) == CPU_BACKEND_NAMES for r in ranks)
    for backend in CPU_BACKEND_NAMES:
        runs = [r[backend] for r in ranks]
        assert [len(r["batches"]) for r in runs] == [r["len"] for r in runs] == [4, 4], backend
        assert runs[0]["batches"][0] == [4, 4], f"{backend}: rank 0's failed batch is refilled from its own share"
