"""Red team of the swap, part 5: a list of indices as ``sampler``, ``ToDtype(scale=False)`` with a
``Normalize`` in [0, 255] units, and a segmentation / detection loader's ``dataset[i]`` lined up with its
target for EXIF-rotated photos; each compared with torch's own ``DataLoader`` / torchvision on tiny images."""

import re
import warnings

import numpy as np
import pytest
import torch
from exif_helpers import scene, turned_png
from helpers import CPU_BACKENDS, textured_image, write_image
from PIL import Image
from torch.utils.data import Subset
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe import ops
from gpupipe.interop.dataloader import UnsupportedArgument

F32 = torch.float32
#: Image sizes (h, w): no two alike.
SIZES = [(41, 57), (60, 44), (48, 48), (75, 52), (43, 70), (66, 61), (52, 40)]
RESIZED = T2.Compose([T2.ToImage(), T2.Resize((24, 24)), T2.ToDtype(F32, scale=True)])


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Seven PNGs (lossless: PIL and gpupipe decode the same pixels) in two classes."""
    base = tmp_path_factory.mktemp("swap5")
    rng = np.random.default_rng(5)
    for i, (h, w) in enumerate(SIZES):
        write_image(base / "data" / ("cat" if i % 3 else "dog") / f"{i}.png", textured_image(rng, h, w))
    return str(base / "data")


def theirs(dataset, **kwargs):
    """``(images, labels, batch sizes)`` of one epoch from torch's own ``DataLoader``."""
    batches = list(torch.utils.data.DataLoader(dataset, **kwargs))
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]), [len(y) for _, y in batches]


def ours(loader):
    """``(images, labels, batch sizes)`` of one pass of a gpupipe loader."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(loader)
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]), [len(y) for _, y in batches]


# --- 1. a list of indices as the sampler -------------------------------------------------------------------

INDEX_LISTS = {
    "list with duplicates": [3, 0, 3, 6, 1],
    "range": range(5, 1, -1),
    "numpy array": np.array([6, 2, 2, 0, 4], dtype=np.int64),
    "tensor": torch.tensor([1, 5, 0, 0, 3, 2]),
    "tuple with a negative index": (0, -1, 2),
}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(INDEX_LISTS))
def test_a_list_of_indices_as_sampler_reads_them_in_order_at_every_pass_as_torch(root, backend, name):
    dataset = ImageFolder(root, RESIZED)
    indices = INDEX_LISTS[name]
    want = theirs(dataset, batch_size=2, sampler=indices)
    loader = gpupipe.DataLoader(dataset, batch_size=2, sampler=indices, backend=backend, device="cpu")
    assert len(loader) == len(torch.utils.data.DataLoader(dataset, batch_size=2, sampler=indices))
    as_subset = gpupipe.DataLoader(Subset(dataset, indices), batch_size=2, backend=backend, device="cpu")
    for epoch in range(2):  # the same order at every pass, no shuffle
        loader.set_epoch(epoch)
        images, labels, sizes = ours(loader)
        assert labels.tolist() == want[1].tolist() and sizes == want[2]
        assert float((images - want[0]).abs().max()) * 255 < 1.01
        other = ours(as_subset)
        assert torch.equal(other[0], images) and torch.equal(other[1], labels)
    assert loader.dataset is dataset


def test_a_list_sampler_keeps_drop_last_as_torch(root):
    dataset = ImageFolder(root, RESIZED)
    indices = [4, 4, 1, 0, 2]
    want = theirs(dataset, batch_size=2, sampler=indices, drop_last=True)
    loader = gpupipe.DataLoader(
        dataset, batch_size=2, sampler=indices, drop_last=True, backend="torchvision", device="cpu"
    )
    got = ours(loader)
    assert len(loader) == 2 and got[2] == want[2] == [2, 2] and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize(
    "sampler, named",
    [
        (iter([0, 1, 2]), "read once"),
        ((i for i in range(3)), "read once"),
        ([0, 1.5], r"item \[1\] = 1.5"),
        (np.array([[0, 1], [2, 3]]), "one flat sequence"),
        (torch.tensor([0.0, 1.0]), r"item \[0\] = 0.0"),
        ([0, True], r"item \[1\] = True"),
    ],
)
def test_a_sampler_that_is_not_a_list_of_indices_is_refused_naming_sampler(root, sampler, named):
    with pytest.raises(UnsupportedArgument, match=rf"(?s)DataLoader\(sampler=.*{named}"):
        gpupipe.DataLoader(ImageFolder(root, RESIZED), batch_size=2, sampler=sampler, device="cpu")


class _DuckSampler:
    """A sampler class of the user's own, not a ``torch.utils.data.Sampler``, which torch takes as well: it may
    give another order at every pass, so it is not read once as a list."""

    def __iter__(self):
        return iter(torch.randperm(7).tolist())

    def __len__(self):
        return 7


def test_a_sampler_class_of_the_users_own_is_refused_even_with_a_len(root):
    with pytest.raises(UnsupportedArgument, match=r"(?s)DataLoader\(sampler=.*own __iter__ at every pass"):
        gpupipe.DataLoader(ImageFolder(root, RESIZED), batch_size=2, sampler=_DuckSampler(), device="cpu")
    with pytest.raises(UnsupportedArgument, match=r"(?s)DataLoader\(sampler=.*own __iter__"):
        gpupipe.DataLoader(ImageFolder(root, RESIZED), batch_size=2, sampler={0, 1}, device="cpu")


def test_a_list_sampler_with_shuffle_is_torchs_value_error(root):
    dataset = ImageFolder(root, RESIZED)
    with pytest.raises(ValueError):
        torch.utils.data.DataLoader(dataset, batch_size=2, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match=r"DataLoader\(shuffle=True\)"):
        gpupipe.DataLoader(dataset, batch_size=2, sampler=[0, 1], shuffle=True, device="cpu")


def test_a_list_sampler_with_an_index_out_of_range_is_refused_before_reading(root):
    dataset = ImageFolder(root, RESIZED)
    with pytest.raises(IndexError):
        list(torch.utils.data.DataLoader(dataset, batch_size=2, sampler=[0, 7]))
    with pytest.raises(IndexError):
        gpupipe.DataLoader(dataset, batch_size=2, sampler=[0, 7], device="cpu")


def test_a_list_sampler_split_over_ranks_as_a_subset(root):
    """Given ``rank``/``world_size`` (the DDP of a script that splits its list itself is out of torch's reach:
    one sampler per DataLoader), each rank reads its share of the list, as of the same Subset."""
    dataset = ImageFolder(root, RESIZED)
    indices = [6, 5, 4, 3, 2, 1]
    shares = []
    for rank in range(2):
        loader = gpupipe.DataLoader(dataset, batch_size=1, sampler=indices, rank=rank, world_size=2, device="cpu")
        twin = gpupipe.DataLoader(Subset(dataset, indices), batch_size=1, rank=rank, world_size=2, device="cpu")
        shares.append(ours(loader)[1].tolist())
        assert shares[-1] == ours(twin)[1].tolist()
    assert sorted(shares[0] + shares[1]) == sorted(dataset.targets[i] for i in indices)


# --- 2. ToDtype(scale=False): floats in [0, 255], Normalize in those units ------------------------------------

MEAN255, STD255 = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]

UNSCALED = {
    "ToDtype(scale=False)+Normalize in [0, 255] units (mmcv)": T2.Compose(
        [T2.ToImage(), T2.CenterCrop(30), T2.ToDtype(F32, scale=False), T2.Normalize(MEAN255, STD255)]
    ),
    "PILToTensor+ToDtype(scale=False) alone: [0, 255] floats": T2.Compose(
        [T2.PILToTensor(), T2.CenterCrop(30), T2.ToDtype(F32)]
    ),
    "ToDtype(scale=False) then a Resize and a flip, then Normalize": T2.Compose(
        [
            T2.ToImage(),
            T2.ToDtype(F32),
            T2.Resize((24, 24)),
            T2.RandomHorizontalFlip(p=1.0),
            T2.Normalize(MEAN255, STD255),
        ]
    ),
    "ToDtype(scale=False) with a [0, 1] Normalize (a user's mistake, kept as torch computes it)": T2.Compose(
        [T2.ToImage(), T2.CenterCrop(30), T2.ToDtype(F32), T2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    ),
}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(UNSCALED))
def test_to_dtype_without_scale_gives_torchvisions_values(root, backend, name):
    dataset = ImageFolder(root, UNSCALED[name])
    want = theirs(dataset, batch_size=3)
    got = ours(gpupipe.DataLoader(dataset, batch_size=3, backend=backend, device="cpu"))
    assert got[0].dtype == want[0].dtype == F32 and got[0].shape == want[0].shape
    assert torch.equal(got[1], want[1])
    resized = "Resize" in name
    span = float(want[0].abs().max())
    assert span > (200 if "alone" in name else 1.5)  # not [0, 1] floats
    tolerance = 1.5 / 57.12 if resized else span * 1e-5  # resized: up to 1.5 levels, as tests/test_redteam_swap4.py
    assert float((got[0] - want[0]).abs().max()) <= tolerance


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_to_dtype_without_scale_alone_gives_whole_numbers_up_to_255(root, backend):
    dataset = ImageFolder(root, UNSCALED["PILToTensor+ToDtype(scale=False) alone: [0, 255] floats"])
    loader = gpupipe.DataLoader(dataset, batch_size=7, backend=backend, device="cpu")
    images = ours(loader)[0]
    assert torch.equal(images, theirs(dataset, batch_size=7)[0])
    assert torch.equal(images, images.round()) and float(images.max()) <= 255
    assert loader.mean == (0.0, 0.0, 0.0) and all(abs(s * 255 - 1) < 1e-12 for s in loader.std)


@pytest.mark.parametrize(
    "transform, named",
    [
        (
            T2.Compose([T2.ToImage(), T2.ToDtype(F32), T2.ColorJitter(0.4), T2.Normalize(MEAN255, STD255)]),
            "ToDtype(scale=False) at Compose[1]",
        ),
        (T2.Compose([T2.PILToTensor(), T2.ToDtype(F32), T2.RandAugment()]), "clamp such floats to 1"),
    ],
)
def test_what_torchvision_clamps_on_unscaled_floats_is_refused_naming_it(root, transform, named):
    with pytest.raises(gpupipe.UnsupportedTransform, match=re.escape(named)):
        gpupipe.DataLoader(ImageFolder(root, transform), batch_size=2, device="cpu")


def test_color_jitter_before_an_unscaled_to_dtype_is_kept(root):
    transform = T2.Compose(
        [
            T2.ToImage(),
            T2.ColorJitter(brightness=(1.3, 1.3)),
            T2.CenterCrop(30),
            T2.ToDtype(F32),
            T2.Normalize(MEAN255, STD255),
        ]
    )
    dataset = ImageFolder(root, transform)
    got, want = ours(gpupipe.DataLoader(dataset, batch_size=7, device="cpu"))[0], theirs(dataset, batch_size=7)[0]
    assert float((got - want).abs().max()) <= 1.01 / 57.12


# --- 3. loader.dataset[i] of a mask or boxes: the image upright, as the target and the batches -------------------


def _photos(tmp_path, orientation):
    """``images/a.png``: the scene stored turned, with the EXIF ``orientation`` that shows it upright (40x24);
    ``masks/a.png``: its mask drawn upright; ``a.json``: a COCO box around the rectangle, upright."""
    image, mask = scene()
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(turned_png(image, orientation, before=True))
    Image.fromarray(mask).save(tmp_path / "masks" / "a.png")
    coco = {
        "images": [{"id": 1, "file_name": "a.png", "width": 40, "height": 24}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [4, 3, 10, 6], "iscrowd": 0}],
        "categories": [{"id": 1, "name": "box"}],
    }
    (tmp_path / "a.json").write_text(__import__("json").dumps(coco))
    return image, mask


def _batch_image(source, backend):
    loader = gpupipe.loader(
        source,
        [ops.Decode(), ops.CenterCrop((24, 40)), ops.Output("uint8")],
        batch_size=1,
        backend=backend,
        device="cpu",
        shuffle=False,
        num_threads=1,
    )
    return next(iter(loader))[0][0].permute(1, 2, 0).numpy(), loader


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_a_segmentation_datasets_item_gives_the_image_upright_over_its_mask(tmp_path, backend, orientation):
    image, mask = _photos(tmp_path, orientation)
    batched, loader = _batch_image(gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks"), backend)
    shown, its_mask = loader.dataset[0]
    assert shown.mode == "RGB" and shown.size == its_mask.size == (40, 24)
    assert np.array_equal(np.asarray(shown), image) and np.array_equal(np.asarray(shown), batched)
    assert np.array_equal(np.asarray(its_mask), mask)
    bright = np.asarray(shown).min(axis=2) == 255  # the rectangle lies over class 3
    assert set(np.unique(np.asarray(its_mask)[bright]).tolist()) == {3}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_detection_datasets_item_gives_the_image_upright_under_its_boxes(tmp_path, backend):
    image, _ = _photos(tmp_path, 6)
    batched, loader = _batch_image(gpupipe.CocoDetection(tmp_path / "images", tmp_path / "a.json"), backend)
    shown, target = loader.dataset[0]
    assert shown.size == (40, 24) and np.array_equal(np.asarray(shown), batched)
    x0, y0, x1, y1 = (int(v) for v in target["boxes"][0].tolist())
    assert (np.asarray(shown)[y0:y1, x0:x1] == 255).all() and int(np.asarray(shown).sum()) == 255 * 3 * 60


def test_a_classification_datasets_item_stays_as_imagefolder_shows_it(tmp_path):
    image, _ = scene()
    (tmp_path / "c" / "cls").mkdir(parents=True)
    (tmp_path / "c" / "cls" / "a.png").write_bytes(turned_png(image, 6, before=True))
    loader = gpupipe.loader(
        str(tmp_path / "c"),
        [ops.Decode(), ops.CenterCrop((24, 40)), ops.Output("uint8")],
        batch_size=1,
        device="cpu",
        backend="torchvision",
    )
    shown, label = loader.dataset[0]
    theirs_shown, their_label = ImageFolder(str(tmp_path / "c"))[0]
    assert label == their_label == 0 and shown.size == theirs_shown.size == (24, 40)
    assert np.array_equal(np.asarray(shown), np.asarray(theirs_shown))
