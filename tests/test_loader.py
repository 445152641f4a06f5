"""The loader: the batch contract on every backend, order, epochs, resume, argument errors."""

import math

import pytest
import torch

import gpupipe
from helpers import BACKEND_DEVICES, collect
from gpupipe.ops import Decode, Normalize, RandomResizedCrop, Resize

SMALL_TRAIN = [Decode(), RandomResizedCrop(size=(32, 40)), gpupipe.HorizontalFlip(p=0.5), Normalize()]
SMALL_VAL = [Decode(), Resize(size=40), gpupipe.CenterCrop(size=32), Normalize()]


def make(folder, backend, device, pipeline=SMALL_TRAIN, **kwargs):
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("num_threads", 1)
    return gpupipe.loader(folder, pipeline, backend=backend, device=device, **kwargs)


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
@pytest.mark.parametrize(
    "dtype, channels_last",
    [(torch.float32, False), (torch.float16, True), (torch.bfloat16, False), (torch.uint8, True)],
)
def test_batch_contract(image_folder, backend, device, dtype, channels_last):
    loader = make(image_folder, backend, device, dtype=dtype, channels_last=channels_last, shuffle=False)
    batches = collect(loader)
    assert len(batches) == len(loader) == math.ceil(18 / 4)
    assert [b[0].shape[0] for b in batches] == [4, 4, 4, 4, 2]  # partial last batch
    for images, labels in batches:
        assert images.shape[1:] == (3, 32, 40)
        assert images.dtype == dtype
        assert images.device.type == device and labels.device == images.device
        assert labels.dtype == torch.int64 and labels.shape == (images.shape[0],)
        want = torch.channels_last if channels_last else torch.contiguous_format
        assert images.is_contiguous(memory_format=want)
        if dtype == torch.uint8:
            assert images.max() > 100  # unnormalised [0, 255]
        else:
            values = images.float()
            # ImageNet-normalised [0, 1] values lie in [-2.12, 2.64].
            assert -2.2 < values.min() < 0 < values.max() < 2.7
    labels = torch.cat([b[1] for b in batches]).cpu()
    assert labels.tolist() == [0] * 7 + [1] * 5 + [2] * 6  # shuffle=False keeps the source order


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_every_sample_once_per_epoch_and_drop_last(image_folder, backend, device):
    loader = make(image_folder, backend, device, pipeline=SMALL_VAL, shuffle=True, seed=3)
    epoch = collect(loader)
    images = torch.cat([b[0] for b in epoch]).cpu()
    # Each image's pixels identify it: all 18 distinct, none repeated.
    fingerprints = {tuple(img.flatten()[::97].tolist()) for img in images}
    assert len(images) == 18 and len(fingerprints) == 18

    dropping = make(image_folder, backend, device, pipeline=SMALL_VAL, drop_last=True, batch_size=5)
    batches = collect(dropping)
    assert len(dropping) == 3 and [b[0].shape[0] for b in batches] == [5, 5, 5]


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_set_epoch_is_reproducible(image_folder, backend, device):
    first = make(image_folder, backend, device, seed=7)
    second = make(image_folder, backend, device, seed=7)
    first.set_epoch(2)
    second.set_epoch(2)
    a, b = collect(first), collect(second)
    assert len(a) == len(b) == math.ceil(18 / 4)
    assert all(torch.equal(x[1], y[1]) for x, y in zip(a, b))
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b)), "same seed and epoch, same augmentations"

    second.set_epoch(3)
    c = collect(second)
    assert torch.cat([x[1] for x in a]).tolist() != torch.cat([x[1] for x in c]).tolist()


def test_epochs_advance_without_set_epoch(image_folder):
    loader = make(image_folder, "torchvision", "cpu", num_threads=0, seed=1)
    orders = [torch.cat([b[1] for b in loader]).tolist() for _ in range(3)]
    assert loader.epoch == 3
    assert orders[0] != orders[1] or orders[1] != orders[2]
    loader.set_epoch(0)
    assert torch.cat([b[1] for b in loader]).tolist() == orders[0]


def test_order_is_the_same_on_every_backend(image_folder):
    orders = []
    for backend in ("dali-cpu", "torchvision"):
        pytest.importorskip("nvidia.dali") if backend == "dali-cpu" else None
        loader = make(image_folder, backend, "cpu", seed=11)
        loader.set_epoch(4)
        orders.append(torch.cat([b[1] for b in loader]).tolist())
    assert orders[0] == orders[1]


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
@pytest.mark.parametrize("pipeline", [SMALL_VAL, SMALL_TRAIN], ids=["val", "train-random"])
def test_state_dict_resumes_after_k_batches(image_folder, backend, device, pipeline):
    original = make(image_folder, backend, device, pipeline=pipeline, seed=5)
    original.set_epoch(1)
    it = iter(original)
    taken = [next(it) for _ in range(2)]
    state = original.state_dict()
    assert {k: state[k] for k in ("epoch", "batches_done", "seed", "rank", "world_size")} == {
        "epoch": 1, "batches_done": 2, "seed": 5, "rank": 0, "world_size": 1
    }
    assert state["backend"] == original.backend
    restored = torch.load(_roundtrip(state), weights_only=True)  # plain data for torch.save
    rest = list(it)

    resumed = make(image_folder, backend, device, pipeline=pipeline, seed=5)
    resumed.load_state_dict(restored)
    again = collect(resumed)
    assert len(taken) + len(again) == len(original) and len(again) == len(rest) == math.ceil(18 / 4) - 2
    for (x, y), (u, v) in zip(rest, again):
        assert torch.equal(y, v)
        assert torch.equal(x, u), "random augmentations continue exactly"
    assert resumed.epoch == 2, "the resumed epoch counts as finished"


def _roundtrip(state):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_state_after_the_last_batch_points_at_the_next_epoch(image_folder):
    loader = make(image_folder, "torchvision", "cpu", num_threads=0)
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batches_done"] == 0


def test_load_state_dict_checks_the_state(image_folder):
    loader = make(image_folder, "torchvision", "cpu", num_threads=0, seed=1)
    with pytest.raises(ValueError, match="seed 2, this loader seed 1"):
        loader.load_state_dict({"epoch": 0, "batches_done": 1, "seed": 2})
    with pytest.raises(ValueError, match="world_size 4"):
        loader.load_state_dict({"epoch": 0, "batches_done": 1, "seed": 1, "world_size": 4})
    with pytest.raises(ValueError, match="outside 0..5"), pytest.warns(UserWarning, match="format 1"):
        loader.load_state_dict({"epoch": 0, "batches_done": 9, "seed": 1})
    with pytest.raises(ValueError, match="not a gpupipe loader state"):
        loader.load_state_dict({"epoch": 0})


def test_loader_attributes(image_folder):
    loader = make(image_folder, "torchvision", "cpu", dtype="uint8")
    assert loader.classes == ["ant", "bee", "cat"]
    assert loader.class_to_idx == {"ant": 0, "bee": 1, "cat": 2}
    assert loader.mean == Normalize().mean and loader.std == Normalize().std
    assert loader.backend == "torchvision" and loader.device == torch.device("cpu")
    assert "torchvision" in repr(loader)


def test_presets_by_name(image_folder):
    loader = gpupipe.loader(image_folder, "val", batch_size=18, backend="torchvision", num_threads=0)
    images, labels = next(iter(loader))
    assert images.shape == (18, 3, 224, 224)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(batch_size=0), "batch_size must be an int >= 1, got 0"),
        (dict(batch_size=2.5), "batch_size must be an int >= 1, got 2.5"),
        (dict(batch_size=4, backend="dalli"), "unknown backend 'dalli'"),
        (dict(batch_size=4, pipeline="training"), "unknown preset 'training'"),
        (dict(batch_size=4, num_threads=-1), "num_threads must be an int >= 0, got -1"),
        (dict(batch_size=4, seed=-2), "seed must be an int >= 0, got -2"),
        (dict(batch_size=4, shuffle="yes"), "shuffle must be a bool, got 'yes'"),
        (dict(batch_size=4, dtype="float64"), "loader(dtype=...) must be one of"),
        (dict(batch_size=4, device="tpu"), "device: cannot parse 'tpu'"),
        (dict(batch_size=4, device="gpu"), "device: cannot parse 'gpu': did you mean 'cuda'?"),
        (dict(batch_size=4, device="GPU:1"), "device: cannot parse 'GPU:1': did you mean 'cuda:1'?"),
        (dict(batch_size=4, prefetch=0), "prefetch must be an int >= 1, got 0"),
        (dict(batch_size=19, drop_last=True), "batch_size 19 is larger than the 18 samples of the dataset with"),
        (dict(batch_size=4, drop_last=True, world_size=8),
         "larger than the 2 samples per rank (8 ranks) of the dataset (18 samples in all)"),
        (dict(batch_size=4, num_threads=0, backend="dali-cpu"), "num_threads=0 (decode in the main process) is for"),
        (dict(batch_size=4, even_batches=1), "even_batches must be a bool, got 1"),
        (dict(batch_size=4, hw_decoder_load=2), "hw_decoder_load must be 'auto' or a number in [0, 1], got 2"),
        (dict(batch_size=4, preallocate="big"), "preallocate must be 'auto', None or (width, height)"),
        (dict(batch_size=4, max_file_size=0), "max_file_size must be an int >= 1, got 0"),
        (dict(batch_size=4, rank=2, world_size=2), "rank must be an int in [0, world_size=2), got 2"),
        (dict(batch_size=4, world_size=0), "world_size must be an int >= 1, got 0"),
        (dict(batch_size=4, pipeline=[Decode(), Resize(size=64)]), "varying size"),
    ],
)
def test_argument_errors(image_folder, kwargs, fragment):
    pipeline = kwargs.pop("pipeline", "train")
    with pytest.raises(ValueError) as info:
        gpupipe.loader(image_folder, pipeline, backend=kwargs.pop("backend", "torchvision"), **kwargs)
    assert fragment in str(info.value)


def test_source_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        gpupipe.loader(tmp_path / "missing", batch_size=4, backend="torchvision")
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(ValueError, match="no images under"):
        gpupipe.loader(tmp_path / "empty", batch_size=4, backend="torchvision")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_requests_fail_clearly_without_a_gpu(image_folder):
    with pytest.raises(ValueError, match="CUDA is not available"):
        gpupipe.loader(image_folder, batch_size=4, device="cuda")
    with pytest.raises(ValueError, match="backend 'dali' needs a CUDA device"):
        gpupipe.loader(image_folder, batch_size=4, backend="dali")
    with pytest.raises(ValueError) as info:
        gpupipe.loader(image_folder, batch_size=4, backend="dali")
    assert "got no device (and CUDA is not available)" in str(info.value)
