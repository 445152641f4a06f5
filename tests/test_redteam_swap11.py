"""Red team of the swap, part 11: transforms whose sizes gpupipe's ops cannot batch (a ``CenterCrop`` larger than
the fixed size before it, which torchvision pads; images left at their own sizes, which torch's ``DataLoader``
batches one at a time with ``batch_size=1``), compared with torch's own ``DataLoader`` over the same dataset: each
refused as an ``UnsupportedTransform`` naming the transform, so that ``fallback="torchvision"`` runs it as it is
and gives torch's batches."""

import warnings

import numpy as np
import pytest
import torch
from helpers import textured_image, write_image
from torchvision import transforms as T1
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe.interop.compile import UnsupportedTransform
from gpupipe.interop.datasets import UnsupportedDataset

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CPU = {"device": "cpu", "backend": "torchvision"}
#: Every image of its own size (height, width): no two alike.
SIZES = [(40, 46), (43, 45), (46, 44), (49, 43), (52, 42), (55, 41), (58, 40)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Seven PNGs (lossless), each of its own size, in three classes."""
    base = tmp_path_factory.mktemp("swap11") / "data"
    rng = np.random.default_rng(11)
    for i, (height, width) in enumerate(SIZES):
        write_image(base / ("cat", "dog", "eel")[i % 3] / f"{i}.png", textured_image(rng, height, width))
    return str(base)


def torch_batches(dataset, batch_size):
    return list(torch.utils.data.DataLoader(dataset, batch_size=batch_size))


def gpupipe_batches(dataset, batch_size, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(gpupipe.DataLoader(dataset, batch_size=batch_size, device="cpu", **kwargs))


def assert_same_batches(theirs, ours):
    """As many batches, each of the same shape, dtype, values (exactly: the same transform ran) and labels."""
    assert len(ours) == len(theirs)
    for (their_images, their_labels), (our_images, our_labels) in zip(theirs, ours):
        assert our_images.shape == their_images.shape and our_images.dtype == their_images.dtype
        assert torch.equal(our_images, their_images)
        assert torch.equal(our_labels, their_labels)


# --- 1. A CenterCrop larger than the fixed size before it (torchvision pads) ----------------------------------

PADDED = {
    "v1-pil": lambda: T1.Compose(
        [T1.Resize((30, 31)), T1.CenterCrop((37, 34)), T1.ToTensor(), T1.Normalize(MEAN, STD)]
    ),
    "v2-tensor": lambda: T2.Compose(
        [T2.ToImage(), T2.Resize((30, 31)), T2.CenterCrop(36), T2.ToDtype(torch.float32, scale=True)]
    ),
    "after-random-resized-crop": lambda: T1.Compose([T1.RandomResizedCrop(24), T1.CenterCrop(28), T1.ToTensor()]),
}


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
@pytest.mark.parametrize("name", list(PADDED))
def test_a_center_crop_larger_than_a_fixed_size_compiles_to_torchs_batches(root, name, backend):
    """Before: a bare ``ValueError`` from gpupipe's own op check (``CenterCrop(size=(37, 34)) is larger than the
    (30, 31) images it receives``), which ``fallback="torchvision"`` did not catch either, where torchvision pads
    the image with black, centred. Now: compiled; both backends pad as torchvision does."""
    if backend == "dali-cpu":
        pytest.importorskip("nvidia.dali")
    dataset = ImageFolder(root, PADDED[name]())
    ours = gpupipe_batches(dataset, 3, backend=backend)
    if name == "after-random-resized-crop":  # random windows: the shape, and the padded border is black
        assert [tuple(images.shape) for images, _ in ours] == [(3, 3, 28, 28), (3, 3, 28, 28), (1, 3, 28, 28)]
        assert all((images[..., :2, :] == 0).all() and (images[..., :, -2:] == 0).all() for images, _ in ours)
        return
    theirs = torch_batches(dataset, 3)
    assert len(ours) == len(theirs) and theirs[0][0].shape[-2:] == ours[0][0].shape[-2:]
    for (their_images, their_labels), (our_images, our_labels) in zip(theirs, ours):
        assert torch.equal(our_labels, their_labels)
        assert torch.allclose(our_images[..., :3, :], their_images[..., :3, :], atol=1e-5)  # padding: 37 - 30 = 3 + 4
        assert torch.allclose(our_images, their_images, atol=0.05)  # the resize: within a level or two


# --- 2. Images left at their own sizes: batch_size=1 -----------------------------------------------------------

OWN_SIZES = {
    "to-tensor": lambda: T1.Compose([T1.ToTensor(), T1.Normalize(MEAN, STD)]),
    "resize-shorter-side": lambda: T1.Compose([T1.Resize(30), T1.ToTensor()]),
    "v2-max-size": lambda: T2.Compose([T2.ToImage(), T2.Resize(None, max_size=32), T2.ToDtype(torch.float32)]),
}


@pytest.mark.parametrize("name", list(OWN_SIZES))
def test_images_of_their_own_sizes_are_refused_naming_the_transform(root, name):
    """An evaluation at each image's own size (``batch_size=1``, as torch's ``DataLoader`` batches it). Before: a
    bare ``ValueError`` ("the pipeline gives images of varying size ... end its geometry with RandomResizedCrop,
    ... PadTo", gpupipe's op names), which ``fallback="torchvision"`` did not catch. Now: an
    ``UnsupportedTransform`` naming the transform, how many sizes the images reach, and the fallback."""
    with pytest.raises(UnsupportedTransform, match="varying size") as caught:
        gpupipe.DataLoader(ImageFolder(root, OWN_SIZES[name]()), batch_size=1, **CPU)
    message = str(caught.value)
    assert "7 sizes" in message and "batch_size=1" in message and "fallback='torchvision'" in message
    assert ("Compose:" in message) and "PadTo" not in message


@pytest.mark.parametrize("name", list(OWN_SIZES))
def test_images_of_their_own_sizes_one_per_batch_with_the_fallback_give_torchs_batches(root, name):
    dataset = ImageFolder(root, OWN_SIZES[name]())
    theirs = torch_batches(dataset, 1)
    assert len({tuple(images.shape) for images, _ in theirs}) == len(SIZES)
    assert_same_batches(theirs, gpupipe_batches(dataset, 1, fallback="torchvision"))


def test_images_of_their_own_sizes_in_larger_batches_fail_with_the_fallback_as_torchs_collate_fails(root):
    dataset = ImageFolder(root, OWN_SIZES["to-tensor"]())
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        torch_batches(dataset, 2)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        gpupipe_batches(dataset, 2, fallback="torchvision")


# --- 3. timm's transforms for its prefetcher (uint8 output) -------------------------------------------------------


def timm_transforms():
    return pytest.importorskip("timm.data")


def test_timms_prefetcher_eval_transform_gives_torchs_uint8_batches(root):
    """``create_transform(..., use_prefetcher=True)`` (timm's train.py default) ends with ``MaybePILToTensor``.
    Before: refused ("MaybePILToTensor: no gpupipe op has its meaning"). Now: uint8 batches, as torch's."""
    timm_data = timm_transforms()
    dataset = ImageFolder(root, timm_data.create_transform(input_size=32, is_training=False, use_prefetcher=True))
    theirs, ours = torch_batches(dataset, 3), gpupipe_batches(dataset, 3, backend="torchvision")
    assert len(ours) == len(theirs) == 3
    for (their_images, their_labels), (our_images, our_labels) in zip(theirs, ours):
        assert our_images.dtype == their_images.dtype == torch.uint8
        assert our_images.shape == their_images.shape
        assert torch.equal(our_labels, their_labels)
        assert int((our_images.int() - their_images.int()).abs().max()) <= 1  # PIL's resize and gpupipe's


def test_timms_prefetcher_train_transform_compiles_to_uint8_output():
    timm_data = timm_transforms()
    transform = timm_data.create_transform(input_size=32, is_training=True, use_prefetcher=True)
    ops = gpupipe.from_torchvision(transform)
    assert [op.name for op in ops] == ["Decode", "RandomResizedCrop", "HorizontalFlip", "ColorJitter", "Output"]
    assert ops[-1].dtype == "uint8"


def test_timms_to_numpy_last_gives_torchs_uint8_batches(root):
    """Older timm's prefetcher transform ends with ``ToNumpy`` (a ``(3, H, W)`` uint8 array), which torch's
    default collate batches into a uint8 tensor. Before: refused ("gpupipe batches tensors")."""
    timm_data = timm_transforms()
    from timm.data.transforms import ToNumpy

    dataset = ImageFolder(root, T1.Compose([T1.Resize((30, 31)), ToNumpy()]))
    theirs, ours = torch_batches(dataset, 3), gpupipe_batches(dataset, 3, backend="torchvision")
    assert timm_data is not None and len(ours) == len(theirs)
    for (their_images, their_labels), (our_images, our_labels) in zip(theirs, ours):
        assert our_images.dtype == their_images.dtype == torch.uint8
        assert our_images.shape == their_images.shape and our_images.shape[1:] == (3, 30, 31)
        assert torch.equal(our_labels, their_labels)
        assert int((our_images.int() - their_images.int()).abs().max()) <= 1


def test_a_transform_after_timms_to_numpy_is_refused_naming_it():
    timm_transforms()
    from timm.data.transforms import ToNumpy

    with pytest.raises(UnsupportedTransform, match=r"Compose\[2\] RandomHorizontalFlip: follows ToNumpy"):
        gpupipe.from_torchvision(T1.Compose([T1.Resize((30, 31)), ToNumpy(), T1.RandomHorizontalFlip()]))
    with pytest.raises(UnsupportedTransform, match=r"Compose\[1\] ToNumpy: needs a PIL image"):
        gpupipe.from_torchvision(T1.Compose([T1.PILToTensor(), ToNumpy()]))


def test_timms_resize_keep_ratio_is_refused_for_what_it_does():
    """timm's eval transform for a non-square ``input_size`` resizes with ``ResizeKeepRatio``. Before: refused
    as "crop_mode other than 'center'", an argument the script never gave. Now: the reason is what it does."""
    timm_data = timm_transforms()
    transform = timm_data.create_transform(input_size=(3, 28, 32), is_training=False)
    with pytest.raises(UnsupportedTransform, match="Compose\\[0\\] ResizeKeepRatio: .*rounding") as caught:
        gpupipe.from_torchvision(transform)
    assert "crop_mode other than" not in str(caught.value)
    border = timm_data.create_transform(input_size=32, is_training=False, crop_mode="border")
    with pytest.raises(UnsupportedTransform, match="ResizeKeepRatio: longest=1.0"):
        gpupipe.from_torchvision(border)


# --- 4. persistent_workers=True with the fallbacks: the DataLoader workers last from pass to pass ----------------


class Numbers(torch.utils.data.Dataset):
    """Ten samples, each a ``(3, 4, 4)`` tensor of its index, labelled ``index % 3`` (read as it is)."""

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return torch.full((3, 4, 4), float(index)), index % 3


def note_start(path, worker_id):
    """A ``worker_init_fn``: one line per worker started."""
    with open(path, "a") as f:
        f.write(f"{worker_id}\n")


def started(path):
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_persistent_workers_last_from_pass_to_pass_as_torchs(tmp_path):
    """torch's ``DataLoader(persistent_workers=True)`` starts its workers once (``worker_init_fn`` runs once per
    worker; a dataset's state there, a cache or an opened file, lasts the run). Before: gpupipe's fallback
    started them anew at every pass (the docs said it "keeps its workers from epoch to epoch"). Now: once; a pass
    left after one batch is followed by a whole one; the batches are torch's; ``close()`` stops the workers."""
    import functools
    import multiprocessing

    kwargs = dict(batch_size=3, num_workers=2, persistent_workers=True)
    theirs_log, ours_log = tmp_path / "theirs", tmp_path / "ours"
    theirs = torch.utils.data.DataLoader(Numbers(), worker_init_fn=functools.partial(note_start, theirs_log), **kwargs)
    ours = gpupipe.DataLoader(
        Numbers(),
        worker_init_fn=functools.partial(note_start, ours_log),
        fallback="torchvision",
        device="cpu",
        **kwargs,
    )
    expected = [[(x.clone(), y.clone()) for x, y in theirs] for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        passes = [list(ours)]
        next(iter(ours))  # a pass left after one batch
        passes += [list(ours), list(ours)]
    assert started(theirs_log) == 2
    assert started(ours_log) == 2
    for their_pass, our_pass in zip(expected, passes):
        assert_same_batches(their_pass, our_pass)
    ours.close()
    assert not [p for p in multiprocessing.active_children() if p.is_alive() and "Worker" in p.name]


def test_workers_without_persistent_workers_start_at_every_pass_as_torchs(tmp_path):
    import functools

    log = tmp_path / "ours"
    ours = gpupipe.DataLoader(
        Numbers(),
        batch_size=3,
        num_workers=2,
        worker_init_fn=functools.partial(note_start, log),
        fallback="torchvision",
        device="cpu",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            assert len(list(ours)) == 4
    assert started(log) == 4


# --- 5. RandomErasing on a PIL image: the reason is true for v2 ----------------------------------------------------


def test_random_erasing_on_a_pil_image_is_refused_with_a_reason_true_for_v1_and_v2():
    """v1's ``RandomErasing`` fails on a PIL image; v2's erases it (recent torchvision) or passes it through
    (older ones). Before: both refused as "torchvision refuses a PIL image", false for v2."""
    for erasing in (T1.RandomErasing(p=1.0), T2.RandomErasing(p=1.0)):
        with pytest.raises(UnsupportedTransform, match=r"Compose\[1\] RandomErasing: needs a tensor") as caught:
            gpupipe.from_torchvision(T1.Compose([T1.Resize((8, 8)), erasing, T1.ToTensor()]))
        assert "torchvision refuses" not in str(caught.value)
    with pytest.raises((TypeError, AttributeError)):  # v1's fails, as the refusal says
        T1.RandomErasing(p=1.0)(T1.Resize((8, 8))(T1.ToPILImage()(torch.zeros(3, 8, 8))))


# --- 6. Labels written into samples as tensors (pseudo-labels) -------------------------------------------------------


def test_pseudo_labels_written_as_0d_int64_tensors_give_torchs_labels(root):
    """``for k, p in enumerate(logits.argmax(1)): ds.samples[k] = (path, p)`` writes 0-d int64 tensors, which
    torch's collate stacks into int64 labels. Before: refused as "no index of its 3 classes (an unlabelled
    sample's -1 ...)". Now: read as the class indices they are; another dtype (torch's batch would take it) and
    a tensor of another shape are still refused, naming the sample."""
    dataset = ImageFolder(root, T1.Compose([T1.Resize((16, 16)), T1.ToTensor()]))
    predicted = torch.tensor([2, 0, 1, 1, 2, 0, 0])
    dataset.samples = [(path, p) for (path, _), p in zip(dataset.samples, predicted)]
    theirs, ours = torch_batches(dataset, 3), gpupipe_batches(dataset, 3, backend="torchvision")
    assert [y.dtype for _, y in theirs] == [y.dtype for _, y in ours] == [torch.int64] * 3
    assert torch.equal(torch.cat([y for _, y in ours]), predicted)
    assert [x.shape for x, _ in ours] == [x.shape for x, _ in theirs]
    for odd in (torch.tensor(1, dtype=torch.int32), torch.tensor([1])):
        dataset.samples[3] = (dataset.samples[3][0], odd)
        with pytest.raises(UnsupportedDataset, match=r"samples\[3\] .* a tensor of torch\.int"):
            gpupipe.DataLoader(dataset, batch_size=3, **CPU)


# --- Batches are lists, as torch's default collate gives them ------------------------------------------------


@pytest.mark.parametrize("fallback", [None, "torchvision"])
def test_a_swapped_loaders_batches_are_lists_a_script_may_assign_into_as_torchs(root, fallback):
    refused = [T1.Lambda(lambda image: image)] if fallback else []  # a user function: run as it is by the fallback
    dataset = ImageFolder(root, transform=T1.Compose([T1.Resize((20, 20)), *refused, T1.ToTensor()]))
    theirs = torch_batches(dataset, 4)
    extra = {"fallback": fallback} if fallback else {}
    ours = gpupipe_batches(dataset, 4, **extra)
    assert [type(b) for b in ours] == [type(b) for b in theirs] == [list, list]
    for data in ours:  # a loop of the PyTorch tutorial's shape: data[0] = data[0].to(device)
        data[0] = data[0].to("cpu", torch.float32)
    for (their_images, their_labels), (our_images, our_labels) in zip(theirs, ours, strict=True):
        assert torch.equal(our_labels, their_labels)  # compiled: resized within a level of PIL's; fallback: exact
        assert torch.allclose(our_images, their_images, atol=2.5 / 255 if fallback is None else 0)
    native = gpupipe.loader(root, [gpupipe.Decode(), gpupipe.Resize((20, 20))], batch_size=4, **CPU)
    assert all(type(batch) is tuple for batch in native)  # gpupipe.loader's own batches stay (images, targets)
    native.close()
