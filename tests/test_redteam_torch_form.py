"""Red team of the ``"torch"`` form (``GPUPIPE_DALI_FORM=torch``): every case is read in both forms and the torch
form must give the fused (``"gpu"``) form's batches: the same count, shapes, dtype, memory format, labels and order,
the images equal but for float rounding (a level or two on a few pixels); where the fused form refuses a pipeline,
the torch form refuses it the same way, when the loader is built."""

import pytest
import torch

import gpupipe
from helpers import CPU_DALI, DALI_BACKEND_DEVICES, make_image_folder, needs_dali, two_ranks
from gpupipe.ops import (
    AutoAugment,
    ColorJitter,
    Decode,
    HorizontalFlip,
    Normalize,
    Output,
    RandAugment,
    RandomErasing,
    RandomResizedCrop,
    Resize,
    TrivialAugment,
)
from imagecases import broken_inside_png

pytestmark = needs_dali

SIZE = (20, 28)
#: 13 images: batches of 4 leave a last batch of 1.
COUNTS = {"a": 7, "b": 6}
HEAVY = [Decode(), Resize(size=SIZE), RandAugment(num_ops=2, magnitude=9), RandomErasing(p=0.7),
         Output(dtype="uint8")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("redteam_torch_form") / "data"
    make_image_folder(root, COUNTS, sizes=(30, 50), seed=4)
    return root


def read(source, ops, form, monkeypatch, epochs=1, **kwargs):
    """Every batch of ``epochs`` passes in ``form``: ``[(images on the CPU, targets on the CPU)]``."""
    monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
    settings = {"batch_size": 4, "backend": "dali-cpu", "device": "cpu", "seed": 5, "num_threads": 1, **kwargs}
    loader = gpupipe.loader(source, ops, **settings)
    return [(x.cpu(), y.cpu()) for _ in range(epochs) for x, y in loader]


def assert_same_batches(fused, torch_form, level=1.0, most=2, share=0.01):
    """The batch contract of both forms is one, and the images differ by at most ``most`` levels (``level``: one
    uint8 level in output units) on under ``share`` of the pixels."""
    assert len(torch_form) == len(fused) > 0
    differ = values = 0
    for (x, y), (x2, y2) in zip(fused, torch_form):
        assert (x2.shape, x2.dtype, x2.stride()) == (x.shape, x.dtype, x.stride())
        assert torch.equal(y2, y)
        diff = (x.float() - x2.float()).abs() / level
        assert diff.max().item() <= most + 1e-3, ("largest difference in levels", diff.max().item())
        differ, values = differ + int((diff > 1e-3).sum()), values + diff.numel()
    assert differ / values < share, ("share of the values that differ", differ / values)


def both_forms(source, ops, monkeypatch, **kwargs):
    return read(source, ops, "gpu", monkeypatch, **kwargs), read(source, ops, "torch", monkeypatch, **kwargs)


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
def test_a_policy_with_no_levels(folder, backend, device, monkeypatch):
    """``RandAugment(num_ops=0)`` has no parameters to pack (it crashed the first batch: ``np.concatenate`` of
    nothing); alone or before erasing, its batches are the fused form's."""
    for ops in ([Decode(), Resize(size=SIZE), RandAugment(num_ops=0), Output(dtype="uint8")],
                [Decode(), Resize(size=SIZE), RandAugment(num_ops=0), RandomErasing(p=0.7), Output(dtype="uint8")]):
        fused, after = both_forms(folder, ops, monkeypatch, backend=backend, device=device)
        assert_same_batches(fused, after, most=0)


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("size", [(1, 16), (16, 1), (1, 1), (2, 3)])
def test_images_one_pixel_high_or_wide(folder, size, backend, device, monkeypatch):
    """Sharpness's 3x3 filter on a side of one pixel (``F.pad``'s reflection refused it: a RuntimeError on the first
    batch); DALI's ``reflect_101`` reads the one pixel. AutoAugment draws Sharpness, RandAugment every op."""
    for policy in (AutoAugment(), RandAugment(num_ops=3, magnitude=15)):
        ops = [Decode(), Resize(size=size), policy, RandomErasing(p=1.0), Output(dtype="uint8")]
        fused, after = both_forms(folder, ops, monkeypatch, epochs=3, backend=backend, device=device)
        assert_same_batches(fused, after, share=0.02)  # 0.5 % of 4800 values: a few pixels


def test_a_fill_per_channel_is_refused_when_the_loader_is_built(folder, monkeypatch):
    """The fused form refuses it when the loader is built, naming the op; the torch form built the loader and
    raised on the first ``next()`` instead."""
    ops = [Decode(), Resize(size=SIZE), RandAugment(fill=(1, 2, 3)), RandomErasing()]
    for form in ("gpu", "torch"):
        monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
        with pytest.raises(ValueError, match=r"RandAugment on backend 'dali-cpu': fill=\(1.0, 2.0, 3.0\) differs per channel"):
            gpupipe.loader(folder, ops, batch_size=4, backend="dali-cpu", device="cpu", num_threads=1)


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("policy", [
    RandAugment(num_ops=2, magnitude=20, fill=(7, 7, 7)),
    RandAugment(num_ops=2, magnitude=20, fill=(7, 7, 7), interpolation="bilinear"),
], ids=["nearest", "bilinear"])
def test_points_on_pixel_edges_pick_dalis_pixels(folder, policy, backend, device, monkeypatch):
    """A shear of 0.2 (magnitude 20 of 31 bins) maps whole columns of pixel centres onto pixel edges, where the
    float rounding of the mapped point decides which pixel (or the fill) is read: DALI's CPU warp adds the matrix's
    column pixel by pixel. Computed as one product, the torch form read other pixels there: up to 238 levels
    apart on 1.4 % of the values (nearest), 86 levels on 0.8 % (bilinear)."""
    ops = [Decode(), Resize(size=SIZE), policy, Output(dtype="uint8")]
    fused, after = both_forms(folder, ops, monkeypatch, epochs=3, backend=backend, device=device)
    assert_same_batches(fused, after, share=2e-3)


@pytest.mark.parametrize("batch_size, drop_last, sizes", [(4, False, [4, 4, 4, 1]), (1, False, [1] * 13),
                                                           (4, True, [4, 4, 4])])
def test_partial_last_batch_batch_size_one_and_drop_last(folder, batch_size, drop_last, sizes, monkeypatch):
    fused, after = both_forms(folder, HEAVY, monkeypatch, epochs=2, batch_size=batch_size, drop_last=drop_last)
    assert [len(x) for x, _ in after] == sizes * 2
    assert_same_batches(fused, after, share=2e-3)


@pytest.mark.parametrize("backend, device", CPU_DALI)
def test_resume_mid_epoch_gives_the_rest_of_the_epoch_in_both_forms(folder, backend, device, monkeypatch):
    """Epoch 3, two batches read, then ``state_dict`` into a new loader: the same remaining batches as the pass
    that was not interrupted, in each form; and the forms agree."""
    out = {}
    for form in ("gpu", "torch"):
        monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
        make = lambda: gpupipe.loader(folder, HEAVY, batch_size=3, backend=backend, device=device,  # noqa: E731
                                      seed=5, num_threads=1)
        whole = make()
        whole.set_epoch(3)
        full = [(x.clone(), y.clone()) for x, y in whole]
        first = make()
        first.set_epoch(3)
        it = iter(first)
        head = [tuple(t.clone() for t in next(it)) for _ in range(2)]
        state = first.state_dict()
        del it
        second = make()
        second.load_state_dict(state)
        rest = [(x.clone(), y.clone()) for x, y in second]
        assert len(head) + len(rest) == len(full) == 5
        for (x, y), (x2, y2) in zip(full, head + rest):
            assert torch.equal(x, x2) and torch.equal(y, y2)
        out[form] = full
    assert_same_batches(out["gpu"], out["torch"], share=2e-3)


@pytest.mark.parametrize("even_batches", [True, False])
def test_a_sample_that_fails_to_decode_is_replaced_or_dropped_as_in_the_fused_form(tmp_path, even_batches,
                                                                                  monkeypatch):
    """A PNG broken inside (it passes the scan, DALI's decoder fails on it): the prober finds it in a run built in
    the torch form; it is replaced (``even_batches=True``) or dropped (exact evaluation), as in the fused form."""
    root = tmp_path / "data"
    make_image_folder(root, {"apple": 5, "pear": 4}, sizes=(30, 50), seed=1)
    broken_inside_png(root / "pear" / "broken.png")
    fused, after = both_forms(root, HEAVY, monkeypatch, epochs=2, on_error="skip", even_batches=even_batches,
                              shuffle=even_batches)
    assert sum(len(x) for x, _ in after) == 2 * (10 if even_batches else 9)
    assert_same_batches(fused, after, share=2e-3)


def test_multi_label_list_and_packed_shards(folder, tmp_path, monkeypatch):
    from gpupipe.pack import PackSettings, pack

    files = sorted(str(p) for p in folder.rglob("*") if p.is_file())
    assert len(files) == 13
    tagged = gpupipe.FileList([(f, ["x", "y"][: 1 + i % 2]) for i, f in enumerate(files)])
    fused, after = both_forms(tagged, HEAVY, monkeypatch, epochs=2)
    assert after[0][1].shape == (4, 2) and after[0][1].dtype == torch.float32
    assert_same_batches(fused, after, share=2e-3)
    packed = tmp_path / "packed"
    pack(folder, packed, PackSettings(shard_size=16 * 1024), workers=1, progress=False)
    fused, after = both_forms(packed, HEAVY, monkeypatch, epochs=2)
    assert_same_batches(fused, after, share=2e-3)


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("dtype, channels_last", [("uint8", True), ("float16", False), ("bfloat16", True),
                                                  ("float32", True)])
def test_dtypes_memory_formats_and_a_custom_mean(folder, dtype, channels_last, backend, device, monkeypatch):
    """The erasing fill is the mean: with a custom ``Normalize`` an erased pixel is ~0 in both forms (the mean's
    nearest uint8 level, normalised)."""
    normalize = [] if dtype == "uint8" else [Normalize(mean=(0.1, 0.5, 0.9), std=(0.2, 0.3, 0.4))]
    ops = [Decode(), RandomResizedCrop(size=(24, 16)), HorizontalFlip(), TrivialAugment(), RandomErasing(p=0.7),
           *normalize, Output(dtype=dtype, channels_last=channels_last)]
    fused, after = both_forms(folder, ops, monkeypatch, epochs=2, backend=backend, device=device)
    level = 1.0 if dtype == "uint8" else 1 / (255 * 0.2) + (0.02 if dtype != "float32" else 1e-4)
    assert_same_batches(fused, after, level=level, share=2e-3)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    assert all(x.is_contiguous(memory_format=memory_format) and x.dtype == getattr(torch, dtype) for x, _ in after)
    if normalize:
        erased = sum(int((x.float().abs() < 0.03).all(1).sum()) for x, _ in after)
        assert erased > 20  # rectangles of ~0 (the mean's nearest level): the fill was the custom mean


def test_what_stays_in_the_graph(folder, monkeypatch):
    """Erasing before the policy, ColorJitter after it: only the trailing run leaves the graph, and the batches
    are the fused form's."""
    for ops in ([Decode(), Resize(size=SIZE), RandomErasing(p=0.7), RandAugment(num_ops=2, magnitude=9)],
                [Decode(), Resize(size=SIZE), RandAugment(num_ops=2, magnitude=9), ColorJitter(0.4, 0.4, 0.4)],
                [Decode(), Resize(size=SIZE), RandAugment(num_ops=1, magnitude=12), TrivialAugment(),
                 RandomErasing(p=0.5), RandomErasing(p=0.5)]):
        fused, after = both_forms(folder, [*ops, Output(dtype="uint8")], monkeypatch, epochs=2)
        assert_same_batches(fused, after, share=2e-3)


def test_two_ranks_get_the_fused_forms_images(folder, tmp_path):
    """torchrun, 2 ranks (gloo): each rank's batches in the torch form are its batches in the fused form."""
    body = f"""
    import os
    from gpupipe.ops import Decode, Output, RandAugment, RandomErasing, Resize
    ops = [Decode(), Resize(size={SIZE}), RandAugment(num_ops=2, magnitude=9), RandomErasing(p=0.7),
           Output(dtype="uint8")]
    result = {{}}
    for form in ("gpu", "torch"):
        os.environ["GPUPIPE_DALI_FORM"] = form
        loader = gpupipe.loader({str(folder)!r}, ops, batch_size=3, backend="dali-cpu", device="cpu", seed=5,
                                num_threads=1)
        result[form] = [(x.tolist(), y.tolist()) for _ in range(2) for x, y in loader]
    """
    ranks = two_ranks(tmp_path, body)
    for rank in ranks:
        fused = [(torch.tensor(x, dtype=torch.uint8), torch.tensor(y)) for x, y in rank["gpu"]]
        after = [(torch.tensor(x, dtype=torch.uint8), torch.tensor(y)) for x, y in rank["torch"]]
        assert len(after) == 2 * 3  # 7 samples per rank (13 padded to 14), batches of 3
        assert_same_batches(fused, after, share=2e-3)
    assert ranks[0]["torch"][0][0] != ranks[1]["torch"][0][0]  # each rank its own share


@pytest.mark.cuda
def test_the_tail_on_the_gpu_is_deterministic_and_queues_without_waiting():
    """Every op of every level on a GPU batch, under ``torch.use_deterministic_algorithms`` (warnings only): no op
    of the tail is one torch calls nondeterministic (Equalize's histogram counts in integers, exact in any order);
    twice the same images; and after a first batch, no wait for the GPU (``set_sync_debug_mode``)."""
    import warnings

    import numpy as np

    from gpupipe.backends.dali.torch_form import tail_of
    from gpupipe.loading.transfer import to_device
    from gpupipe.ops import AUGMENT_OPS
    from gpupipe.plan.spec import build_spec

    b, levels = 28, 2
    spec = build_spec([Decode(), Resize(size=(1, 16)), RandAugment(num_ops=levels, magnitude=20),
                       RandomErasing(p=0.5)])
    tail = tail_of(spec, targets_move=False)
    assert tail is not None
    rng = np.random.default_rng(0)
    steps: list = [{}] * len(spec.ops)
    steps[2] = {"ops": (np.arange(b * levels).reshape(b, levels) % len(AUGMENT_OPS)).astype(np.int32),
                "signs": rng.integers(0, 2, (b, levels)).astype(np.int32)}
    steps[3] = {"erase": np.ones(b, np.int32), "top": np.zeros(b), "left": np.full(b, 3), "height": np.ones(b),
                "width": np.full(b, 4)}
    params = torch.from_numpy(tail.pack(steps, b)).pin_memory()
    device = torch.device("cuda")
    images = torch.randint(0, 256, (b, 3, 1, 16), dtype=torch.uint8, device=device)
    first = tail.apply(images, to_device(params, device))
    torch.cuda.synchronize()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = tail.apply(images, to_device(params, device))
    finally:
        torch.cuda.set_sync_debug_mode(0)
        torch.use_deterministic_algorithms(deterministic)
    flagged = [str(w.message) for w in caught if "deterministic implementation" in str(w.message)]
    assert not flagged, flagged
    assert torch.equal(first, again) and again.shape == (b, 3, 1, 16)


def test_runs_built_ahead_carry_their_parameters(folder, monkeypatch):
    """Runs of 8 samples (many runs per epoch, each built ahead in the background): the same batches as one run
    over every epoch, and as the fused form."""
    import gpupipe.backends.dali.backend as dali_backend

    whole = read(folder, HEAVY, "torch", monkeypatch, epochs=3)
    monkeypatch.setattr(dali_backend, "RUN_SAMPLES", 8)
    fused, short = both_forms(folder, HEAVY, monkeypatch, epochs=3)
    assert len(short) == len(whole) == 12
    assert all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y), (x2, y2) in zip(whole, short))
    assert_same_batches(fused, short, share=2e-3)


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("fill", [0.5, 100.7, 254.6])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_a_fill_between_levels_is_dalis_level(folder, fill, interpolation, backend, device, monkeypatch):
    """DALI fills with the fill rounded to a uint8 level (0.5 reads 1); the torch form filled with the float
    itself: cut to the level below with nearest sampling (every filled value one level off: 16 % of them
    here), blended unrounded with bilinear sampling (up to 8 levels off)."""
    policy = RandAugment(num_ops=2, magnitude=25, fill=(fill,) * 3, interpolation=interpolation)
    ops = [Decode(), Resize(size=SIZE), policy, Output(dtype="uint8")]
    fused, after = both_forms(folder, ops, monkeypatch, epochs=2, backend=backend, device=device)
    assert_same_batches(fused, after, most=1, share=2e-3)
