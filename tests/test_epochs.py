"""The epoch rule (gpupipe.loading.epochs): which epoch a pass reads, and what a checkpoint resumes.

A fake backend that yields ``(epoch, batch)`` makes the rule cheap to test
over many random sequences of ``set_epoch``, full passes, broken passes,
``state_dict`` and ``load_state_dict``; the real backends are checked for
exact resumes in ``test_loader.py`` and under torchrun in ``test_distributed.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("hypothesis")  # the test extra; plain pytest skips this module
from hypothesis import given, settings
from hypothesis import strategies as st

import gpupipe
from gpupipe import backends
from gpupipe.backends import REGISTRY, BackendInfo, Placement
from gpupipe.loading.epochs import EpochCursor
from gpupipe.plan.spec import build_spec
from helpers import rest_and_resumed


CPU = Placement(torch.device("cpu"), 0)


class FakeBackend:
    """Yields ``(tensor([epoch, batch]), indices)`` for each batch."""

    name = "fake"

    def __init__(self, source, spec, config, placement, errors):
        self.batch_size = config.batch_size

    def iter_epoch(self, read, start=0, upcoming=None):
        for b in range(start, read.batches):
            yield torch.tensor([read.epoch, b]), torch.from_numpy(read.share.indices[b * self.batch_size:(b + 1) * self.batch_size])

    def close(self):
        pass


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch):
    monkeypatch.setitem(REGISTRY, "fake", BackendInfo("fake", "torch", needs_cuda=False, main_process=True,
                                                      factory=f"{__name__}:FakeBackend", lowerings=__name__))


def make(samples=10, batch_size=3, seed=0):
    source = gpupipe.FileList([(f"/nowhere/{i}.jpg", 0) for i in range(samples)])
    spec = build_spec([gpupipe.Decode(), gpupipe.Resize((4, 4))])
    config = gpupipe.LoaderConfig(batch_size=batch_size, seed=seed, num_threads=0)
    return gpupipe.Loader(source, spec, config, backend="fake", placement=CPU)


def keys(batches):
    return [tuple(images.tolist()) for images, _ in batches]


def test_set_epoch_then_plain_passes_read_the_following_epochs():
    loader = make()
    loader.set_epoch(3)
    assert [keys(loader)[0][0] for _ in range(3)] == [3, 4, 5]


def test_a_checkpoint_at_an_epoch_end_resumes_at_the_next_epoch():
    loader = make()
    loader.set_epoch(2)
    list(loader)
    assert {k: loader.state_dict()[k] for k in ("epoch", "batches_done")} == {"epoch": 3, "batches_done": 0}
    it = iter(loader)
    for _ in range(len(loader)):  # the last batch is out, the pass has not ended yet
        next(it)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batches_done"]) == (4, 0)


def test_a_broken_pass_moves_on_like_a_dataloader():
    loader = make()
    for _ in loader:
        break
    with pytest.warns(gpupipe.loading.epochs.LeftPass, match="left after 1 of 4 batches"):
        assert loader.state_dict()["epoch"] == 1
    assert keys(loader)[0] == (1, 0)


def test_set_epoch_during_a_pass_applies_to_the_next():
    loader = make()
    it = iter(loader)
    next(it)
    loader.set_epoch(7)
    assert loader.state_dict()["epoch"] == 0, "the pass under way keeps its epoch"
    rest = list(it)
    assert [k[0] for k in keys(rest)] == [0] * (len(loader) - 1)
    assert keys(loader)[0] == (7, 0)


def test_a_new_pass_ends_the_previous_one():
    loader = make()
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert next(second)[0].tolist() == [1, 0]
    with pytest.raises(gpupipe.Error, match="a new pass over this loader began"):  # not a silently short epoch
        list(first)


OPS = st.one_of(
    st.tuples(st.just("set_epoch"), st.integers(0, 6)),
    st.tuples(st.just("full"), st.just(0)),
    st.tuples(st.just("break"), st.integers(0, 3)),
    st.tuples(st.just("save_mid_pass"), st.integers(1, 3)),
)


@pytest.mark.filterwarnings("ignore::gpupipe.loading.epochs.LeftPass")  # a break then a save: warned, by rule
@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OPS, max_size=8), tail=st.lists(OPS, max_size=4))
def test_a_loaded_state_continues_exactly_as_the_original(ops, tail):
    """After any history, loading ``state_dict()`` into a new loader and running the same
    operations gives the same batches as the original continuing."""
    original = make()
    for op in ops:
        _apply(original, op)
    state = original.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    for op in tail + [("full", 0)]:
        assert _apply(original, op) == _apply(resumed, op), (ops, tail, op)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OPS, max_size=10))
def test_the_epoch_of_each_pass_follows_the_rule(ops):
    """A pass reads the set epoch if set since the last pass began, else the previous pass's + 1."""
    loader = make()
    expected, pinned = 0, None
    for op in ops:
        if op[0] == "set_epoch":
            pinned = op[1]
            loader.set_epoch(op[1])
            continue
        read = _apply(loader, op)
        epoch = pinned if pinned is not None else expected
        assert all(k[0] == epoch for k in read)
        assert [k[1] for k in read] == list(range(len(read))), "a new pass starts at its first batch"
        expected, pinned = epoch + 1, None


def _apply(loader, op):
    kind, arg = op
    if kind == "set_epoch":
        loader.set_epoch(arg)
        return []
    if kind == "full":
        return keys(loader)
    taken = []
    it = iter(loader)
    for images, _ in it:
        taken.append(tuple(images.tolist()))
        if len(taken) >= arg:
            break
    if kind == "save_mid_pass":  # a checkpoint inside the loop, then the pass goes on
        state = loader.state_dict()
        if len(taken) < len(loader):
            assert (state["epoch"], state["batches_done"]) == (taken[-1][0], len(taken))
        taken.extend(keys(it))
    else:
        it.close()
    return taken


def test_cursor_load_then_set_other_epoch_drops_the_resume_point():
    cursor = EpochCursor()
    cursor.load(4, 2)
    cursor.set_epoch(5)
    assert cursor.state() == (5, 0)
    cursor.load(4, 2)
    cursor.set_epoch(4)
    assert cursor.begin(10).start == 2


def test_frameworks_find_set_epoch_on_the_sampler_and_on_the_batch_sampler():
    own = make()
    orders = [keys(own) for _ in range(3)]  # gpupipe's own epochs 0, 1, 2
    assert orders[0] != orders[1]
    for epoch, where in enumerate(["sampler", "batch_sampler", "sampler"]):
        fresh = make()  # rebuilt every epoch (Lightning's reload_dataloaders_every_n_epochs)
        (fresh.sampler if where == "sampler" else fresh.batch_sampler.sampler).set_epoch(epoch)
        assert list(fresh.batch_sampler) == [[int(i) for i in idx] for _, idx in make_at(epoch)]
        assert len(fresh.sampler) == 10 and len(fresh.batch_sampler) == len(fresh) == 4
        assert keys(fresh) == orders[epoch], f"epoch {epoch} set through loader.{where}"


def make_at(epoch):
    loader = make()
    loader.set_epoch(epoch)
    return list(loader)


def test_skip_starts_the_next_pass_at_a_batch_like_accelerates_skip_first_batches():
    loader = make()
    full = keys(loader)
    loader.set_epoch(0)
    assert keys(loader.skip(2)) == full[2:], "the rest of epoch 0"
    assert [k[0] for k in keys(loader)] == [1, 1, 1, 1], "then epoch 1, from its start"
    with pytest.raises(ValueError, match=r"skip: batches must be an int in 0\.\.4"):
        loader.skip(5)
    for count in (np.int64(3), torch.tensor(3)):  # a count read back from a checkpoint, as set_epoch takes it
        loader.set_epoch(0)
        assert keys(loader.skip(count)) == full[3:]
    for wrong in (True, 2.0, np.array([1]), "1"):
        with pytest.raises(ValueError, match=r"skip: batches must be an int"):
            loader.skip(wrong)
    assert len(loader.dataset) == 10, "loader.dataset is there, as a DataLoader's (issue 33)"


def test_resume_point_is_exact_on_every_backend_with_augmentations(image_folder):
    """Augmentations come from (seed, epoch, slot): a state from one backend resumes exactly on another."""
    pytest.importorskip("nvidia.dali")
    pipeline = [gpupipe.Decode(), gpupipe.RandomResizedCrop(24), gpupipe.HorizontalFlip(), gpupipe.Output("uint8")]
    a = gpupipe.loader(image_folder, pipeline, batch_size=4, backend="dali-cpu", num_threads=1, seed=9)
    b = gpupipe.loader(image_folder, pipeline, batch_size=4, backend="torchvision", num_threads=0, seed=9)
    rest, again = rest_and_resumed(a, b)
    rest, again = [x for x, _ in rest], [x for x, _ in again]
    assert len(again) == len(rest) == 4, "18 images in batches of 4, one taken before the state"
    for x, y in zip(rest, again):
        # DALI's and torchvision's antialiased resizes differ by ~1-2 levels (more along the borders);
        # another crop or flip would differ by 30 and more.
        assert (x.float() - y.float()).abs().mean() < 3.0, "same crops and flips, antialiasing kernels aside"
    backends.registry._auto_logged.clear()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_stats_say_input_bound_when_the_consumer_waits_for_a_slow_loader(monkeypatch):
    clock = Clock()
    loader = make(samples=30, batch_size=3)
    loader._stats.clock = clock
    slow = FakeBackend.iter_epoch

    def waiting(self, read, start=0, upcoming=None):
        for batch in slow(self, read, start, upcoming):
            clock.now += 0.09  # the loader takes 90 ms per batch
            yield batch

    monkeypatch.setattr(FakeBackend, "iter_epoch", waiting)
    for _ in loader:
        clock.now += 0.01  # the training step takes 10 ms
    summary = loader.stats()
    assert summary.batches == 10 and summary.images == 20  # the fake's "images" are 2 numbers each
    assert summary.wait_share == pytest.approx(0.9, abs=0.01) and summary.verdict == "input-bound"
    assert summary.images_per_s == pytest.approx(20 / 0.99, rel=0.02)
    assert "pre-resize" in summary.suggestion


def test_stats_say_compute_bound_when_the_step_dominates_and_reset_on_request():
    clock = Clock()
    loader = make(samples=30, batch_size=3)
    loader._stats.clock = clock
    for _ in loader:
        clock.now += 0.05
    summary = loader.stats(reset=True)
    assert summary.batches == 10, "30 samples in batches of 3"
    assert summary.verdict == "compute-bound" and summary.wait_share < 0.05
    assert loader.stats().batches == 0
    assert "batches" in str(summary)


def test_stats_log_a_line_every_n_batches(caplog):
    source = gpupipe.FileList([(f"/nowhere/{i}.jpg", 0) for i in range(12)])
    spec = build_spec([gpupipe.Decode(), gpupipe.Resize((4, 4))])
    config = gpupipe.LoaderConfig(batch_size=2, shuffle=False, num_threads=0, log_every=3)
    loader = gpupipe.Loader(source, spec, config, backend="fake", placement=CPU)
    with caplog.at_level("INFO", logger="gpupipe.stats"):
        list(loader)
    assert caplog.text.count("gpupipe: ") == 2
