"""The ``"torch"`` form (``GPUPIPE_DALI_FORM=torch``, ``gpupipe.backends.dali.torch_form``): a spec's trailing
auto-augment policies and random erasing run as batched torch ops on DALI's uint8 batch, with the parameters the
fused chain reads, and give the fused chain's images (DALI's rounding included); the rest of the batch contract
(dtype, normalisation, memory format, labels, order) is the other forms'; where the targets move with the pixels
the ops stay in DALI's graph."""

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from helpers import DALI_BACKEND_DEVICES, needs_cuda, needs_dali
from test_dali_forms import POLICIES, SAMPLES, SIZE, folder  # noqa: F401 -- folder: the same fixture
from gpupipe.ops import (
    Decode,
    HorizontalFlip,
    Normalize,
    Output,
    RandAugment,
    RandomErasing,
    RandomResizedCrop,
    Resize,
)

pytestmark = needs_dali

def batches(folder, ops, form, monkeypatch, backend, device, samples=SAMPLES):
    """``samples`` outputs of ``ops`` (several epochs) with ``form``: images on the CPU, and labels."""
    monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
    loader = gpupipe.loader(folder, ops, batch_size=24, backend=backend, device=device, shuffle=True, seed=5,
                            num_threads=1)
    images, labels = [], []
    while sum(len(x) for x in images) < samples:
        for x, y in loader:
            images.append(x.cpu())
            labels.append(y.cpu())
    return torch.cat(images)[:samples], torch.cat(labels)[:samples]


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
def test_the_torch_form_gives_the_fused_chains_images(folder, name, backend, device, monkeypatch):
    """Every op of every level on 240 samples: the torch form's images are the fused DALI chain's, but for
    float rounding (one level, on few pixels; a level lost before a later op of the next level may make two).
    Bilinear sampling makes exact halves (a vertical blend at a quarter between levels two apart), which the
    two round apart wherever the sampling point's float error differs (3 % of a vertical shear's pixels before
    the points were summed as DALI's CPU kernel sums them, 0.015 % of all values since; the GPU kernel's order
    is followed too, unmeasured)."""
    ops = [Decode(), Resize(size=SIZE), POLICIES[name], Output(dtype="uint8")]
    fused, _ = batches(folder, ops, "gpu", monkeypatch, backend, device)
    torch_form, _ = batches(folder, ops, "torch", monkeypatch, backend, device)
    assert torch_form.dtype == torch.uint8 and torch_form.shape == fused.shape == (SAMPLES, 3, *SIZE)
    diff = (fused.int() - torch_form.int()).abs()
    share = 5e-3 if POLICIES[name].interpolation == "bilinear" else 1e-3
    assert (diff > 0).float().mean() < share, (name, "pixels that differ", (diff > 0).float().mean().item())
    assert (diff > 2).float().mean() < 1e-4, (name, "pixels off by more than two levels", diff.max().item())
    plain, _ = batches(folder, [Decode(), Resize(size=SIZE), Output(dtype="uint8")], "torch", monkeypatch, backend,
                       device)
    changed = (torch_form.int() - plain.int()).abs().flatten(1).amax(1) > 0
    assert changed.float().mean() > 0.5, (name, "samples the policy changed", changed.float().mean().item())


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
def test_random_erasing_in_the_torch_form_is_fn_erase_bit_for_bit(folder, backend, device, monkeypatch):
    ops = [Decode(), RandomResizedCrop(size=SIZE), RandomErasing(p=0.5), Output(dtype="uint8")]
    in_graph, _ = batches(folder, ops, "gpu", monkeypatch, backend, device)
    after, _ = batches(folder, ops, "torch", monkeypatch, backend, device)
    assert torch.equal(in_graph, after)
    erased = (after == 0).all(dim=1).flatten(1).float().mean(1) > 0.01  # no Normalize: the mean is 0
    assert 0.35 < erased.float().mean().item() < 0.65


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("dtype, channels_last", [("float32", False), ("bfloat16", True)])
def test_the_heavy_chain_keeps_the_batch_contract(folder, backend, device, dtype, channels_last, monkeypatch):
    """The train preset's heavy chain with Normalize: the same dtype, memory format, labels and order as the
    fused form, values within one level (in normalised units) on all but a few pixels."""
    ops = [Decode(), RandomResizedCrop(size=SIZE), HorizontalFlip(), RandAugment(num_ops=2, magnitude=9),
           RandomErasing(p=0.25), Normalize(), Output(dtype=dtype, channels_last=channels_last)]
    fused, fused_labels = batches(folder, ops, "gpu", monkeypatch, backend, device, samples=96)
    after, labels = batches(folder, ops, "torch", monkeypatch, backend, device, samples=96)
    assert after.dtype == fused.dtype == getattr(torch, dtype)
    assert after.shape == fused.shape == (96, 3, *SIZE)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    assert after.is_contiguous(memory_format=memory_format)
    assert torch.equal(labels, fused_labels)
    level = 1 / (255 * min(Normalize().std)) + (0.05 if dtype == "bfloat16" else 1e-4)
    far = ((after.float() - fused.float()).abs() > level).float().mean()
    assert far < 1e-3, far.item()
    assert after.float().mean().abs() < 1.0 and after.float().std() > 0.5  # normalised, not [0, 255]


def test_the_tail_is_the_specs_trailing_policies_and_erasing():
    from gpupipe.backends.dali.torch_form import tail_of
    from gpupipe.plan.spec import build_spec

    heavy = build_spec([Decode(), RandomResizedCrop(size=SIZE), HorizontalFlip(), RandAugment(), RandomErasing(),
                        Normalize(), Output(channels_last=True)])
    tail = tail_of(heavy, targets_move=False)
    assert tail is not None and [type(op).__name__ for op in tail.ops] == ["RandAugment", "RandomErasing"]
    graph = tail.graph_spec()
    assert [type(op).__name__ for op in graph.ops] == ["Decode", "RandomResizedCrop", "HorizontalFlip"]
    assert graph.sizes == heavy.sizes[:3] and graph.output == Output("uint8", channels_last=True)
    assert graph.normalize == heavy.normalize and graph.size == heavy.size
    # a policy followed by an op the torch form lacks stays in the graph; only the trailing run leaves it
    resized = build_spec([Decode(), Resize(size=SIZE), RandAugment(), Resize(size=(32, 32)), RandomErasing()])
    tail = tail_of(resized, targets_move=False)
    assert tail is not None and [type(op).__name__ for op in tail.ops] == ["RandomErasing"]
    assert tail_of(build_spec([Decode(), Resize(size=SIZE)]), targets_move=False) is None
    assert tail_of(heavy, targets_move=True) is None  # masks and boxes are moved by DALI's graph


def test_with_masks_the_ops_stay_in_the_graph_and_the_masks_stay_aligned(tmp_path, monkeypatch):
    """A segmentation folder with random erasing asked in the torch form: erasing runs in DALI's graph (the masks
    move with the crop there), and the batches are the fused form's exactly."""
    rng = np.random.default_rng(0)
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for i in range(8):
        mask = np.zeros((50, 60), np.uint8)
        mask[rng.integers(0, 25):, rng.integers(0, 30):] = 1
        Image.fromarray((np.stack([mask] * 3, -1) * 200 + 20).astype(np.uint8)).save(tmp_path / "images" / f"{i}.png")
        Image.fromarray(mask).save(tmp_path / "masks" / f"{i}.png")
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", classes=["bg", "fg"])
    ops = [Decode(), RandomResizedCrop(size=SIZE), RandomErasing(p=0.5), Output(dtype="uint8")]
    out = {}
    for form in ("gpu", "torch"):
        monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
        loader = gpupipe.loader(source, ops, batch_size=4, backend="dali-cpu", shuffle=False, seed=1, num_threads=1)
        out[form] = [(x.clone(), y["masks"].clone() if isinstance(y, dict) else y.clone()) for x, y in loader]
    for (x, m), (x2, m2) in zip(out["gpu"], out["torch"], strict=True):
        assert torch.equal(x, x2) and torch.equal(m, m2)


@needs_cuda
def test_the_tail_queues_its_work_without_waiting_for_the_gpu():
    """On the GPU, after a first batch (which copies the constants), the tail and the normalisation after it never
    wait for the stream: a wait there would make ``next()`` wait for the training step queued before it."""
    from gpupipe.backends.dali.torch_form import tail_of
    from gpupipe.loading.batchsteps import finisher
    from gpupipe.loading.transfer import to_device
    from gpupipe.ops import AUGMENT_OPS
    from gpupipe.plan.spec import build_spec

    b, levels = 28, 2
    spec = build_spec([Decode(), RandomResizedCrop(size=SIZE), RandAugment(num_ops=levels, magnitude=9),
                       RandomErasing(p=0.5), Normalize()])
    tail = tail_of(spec, targets_move=False)
    assert tail is not None
    rng = np.random.default_rng(0)
    ops = np.arange(b * levels).reshape(b, levels) % len(AUGMENT_OPS)  # every op, twice
    steps: list = [{}] * len(spec.ops)
    steps[2] = {"ops": ops.astype(np.int32), "signs": rng.integers(0, 2, (b, levels)).astype(np.int32)}
    steps[3] = {"erase": np.ones(b, np.int32), "top": np.full(b, 5), "left": np.full(b, 6), "height": np.full(b, 7),
                "width": np.full(b, 8)}
    params = torch.from_numpy(tail.pack(steps, b)).pin_memory()
    device = torch.device("cuda")
    images = torch.randint(0, 256, (b, 3, *SIZE), dtype=torch.uint8, device=device)
    finish = finisher(spec)
    first = tail.apply(images, to_device(params, device))
    finish(first)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = tail.apply(images, to_device(params, device))
        finished = finish(again)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert finished.dtype == torch.float32 and finished.shape == again.shape
    assert torch.equal(first, again) and again.shape == (b, 3, *SIZE) and again.dtype == torch.uint8
    assert (again[:, :, 5:12, 6:14] == torch.tensor([124, 116, 104], device=device).view(1, 3, 1, 1)).all()
