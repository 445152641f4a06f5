"""Red team of the swap, part 3: torchvision's own datasets built from local files (ImageFolder with a
``loader=`` or ``is_valid_file=``, CIFAR10 from its pickled batches, MNIST and FashionMNIST from idx files,
VOCDetection from its folder layout, FakeData), wrapped in ``Subset``, ``ConcatDataset`` and ``random_split``,
given to ``gpupipe.DataLoader`` as a training script gives them to torch's and compared with torch's own
``DataLoader``: the same batches, labels per sample, every sample once per epoch, and clear refusals."""

import pickle
import struct
import warnings

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch.utils.data import ConcatDataset, Subset, random_split
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
from torchvision.io import decode_image
from torchvision.transforms import v2

import gpupipe
from gpupipe.interop.compile import UnsupportedTransform
from gpupipe.interop.datasets import UnsupportedDataset
from helpers import CPU_BACKENDS, two_ranks

CPU = {"device": "cpu"}


def torch_epoch(dataset, **kwargs):
    """Every batch of one pass of torch's own ``DataLoader`` (its warning of pinning without a GPU silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(torch.utils.data.DataLoader(dataset, **kwargs))


def gpupipe_epoch(dataset, **kwargs):
    """Every batch of one pass of ``gpupipe.DataLoader`` (its fallback's warning silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(gpupipe.DataLoader(dataset, **CPU, **kwargs))


def _folder(root, sizes, classes=("cat", "dog", "emu"), seed=0):
    """PNGs of noise (lossless) of the given ``(h, w)`` sizes, dealt over ``classes``."""
    rng = np.random.default_rng(seed)
    for i, (h, w) in enumerate(sizes):
        folder = root / classes[i % len(classes)]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(folder / f"{i}.png")
    return str(root)


# --- Resize by the shorter side over images of one size --------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    "recipe",
    [
        T.Compose([T.Resize(16), T.ToTensor()]),  # CIFAR PNGs scaled for a pretrained model: Resize(224)
        T.Compose([T.Resize([24]), T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))]),
        v2.Compose([v2.ToImage(), v2.Resize(None, max_size=20), v2.ToDtype(torch.float32, scale=True)]),
        T.Compose([T.Resize(40), T.RandomHorizontalFlip(1.0), T.PILToTensor()]),  # upscaled
    ],
    ids=["resize-int", "resize-list-normalize", "v2-max-size", "upscale-uint8"],
)
def test_resize_by_the_shorter_side_over_images_of_one_size_batches_as_torch_does(tmp_path, backend, recipe):
    # Before: every image of the folder resized to one size, which torch's default collate batches, but
    # gpupipe refused the pipeline as one "of varying size" (it knew the size only after a crop). Two stored
    # sizes of one aspect ratio resize alike, and are batched alike.
    dataset = ImageFolder(_folder(tmp_path, [(32, 32)] * 5 + [(64, 64)] * 2), recipe)
    theirs = torch_epoch(dataset, batch_size=3)
    ours = gpupipe_epoch(dataset, batch_size=3, backend=backend)
    assert len(ours) == len(theirs) == 3
    for (x, y), (x_t, y_t) in zip(ours, theirs):
        assert x.shape == x_t.shape and x.dtype == x_t.dtype and torch.equal(y, y_t)
        diff = (x.float() - x_t.float()).abs() * (1 if x.dtype == torch.uint8 else 255)
        if "Normalize" in repr(recipe):
            diff = diff * torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
        # torchvision: PIL's pixels; dali-cpu: within the documented edge tolerance (docs/torchvision.md)
        inner = diff[..., 2:-2, 2:-2]
        assert (diff.max() if backend == "torchvision" else inner.max()) <= 1.01, backend
        assert diff.max() <= 16


def test_resize_by_the_shorter_side_over_images_of_several_shapes_is_still_refused(tmp_path):
    dataset = ImageFolder(_folder(tmp_path, [(32, 32), (32, 48), (32, 32)]), T.Compose([T.Resize(16), T.ToTensor()]))
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        torch_epoch(dataset, batch_size=3)
    with pytest.raises(ValueError, match="varying size"):  # refused when the loader is built
        gpupipe.DataLoader(dataset, batch_size=3, **CPU)


# --- Refusals that say what to do ------------------------------------------------------------------------------


def test_a_file_loader_of_the_users_own_is_refused_saying_how_to_read_it_as_it_is(tmp_path):
    # torchvision's docs give ImageFolder(loader=decode_image) for tensor transforms. Before: the refusal said
    # only that "only torchvision's default (PIL) loader has its meaning", not what to do.
    recipe = v2.Compose([v2.Resize((12, 12)), v2.ToDtype(torch.float32, scale=True)])
    dataset = ImageFolder(_folder(tmp_path, [(20, 24)] * 5), recipe, loader=decode_image)
    with pytest.raises(UnsupportedDataset) as refused:
        gpupipe.DataLoader(dataset, batch_size=2, **CPU)
    message = str(refused.value)
    assert "ImageFolder(loader='decode_image')" in message and "fallback='torchvision'" in message
    assert "leave loader= out" in message
    theirs, ours = torch_epoch(dataset, batch_size=2), gpupipe_epoch(dataset, batch_size=2, fallback="torchvision")
    assert len(ours) == len(theirs) == 3
    for (x, y), (x_t, y_t) in zip(ours, theirs):
        assert torch.equal(x, x_t) and torch.equal(y, y_t)


def test_a_float_image_made_uint8_again_is_refused_saying_what_gpupipe_gives(tmp_path):
    # Before: "dtype=torch.uint8: gpupipe gives float32, float16, bfloat16 or uint8 images", refusing uint8
    # by saying that uint8 is given.
    dataset = ImageFolder(_folder(tmp_path, [(20, 24)] * 3), T.Compose([T.ToTensor(), T.ConvertImageDtype(torch.uint8)]))
    with pytest.raises(UnsupportedTransform) as refused:
        gpupipe.DataLoader(dataset, batch_size=2, **CPU)
    assert "Compose[1] ConvertImageDtype: dtype=torch.uint8 after a float image" in str(refused.value)
    assert "PILToTensor() or ToImage() instead of ToTensor()" in str(refused.value)


# --- torchvision's datasets built from local files, read as they are --------------------------------------------


def _cifar10(root, rng):
    """CIFAR10's folder layout (5 train batches of 3 images each, a test batch, the meta), as pickled by CIFAR."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (3, 3072), np.uint8), "labels": rng.integers(0, 10, 3).tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"class{i}" for i in range(10)]}))


def _idx(path, array):
    """An idx file (MNIST's format) of a uint8 array."""
    path.write_bytes(struct.pack(">BBBB", 0, 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
                     + array.tobytes())


def _mnist(root, name, rng, count=7):
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", count), ("t10k", 2)):
        _idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), np.uint8))
        _idx(raw / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, n).astype(np.uint8))


def _same(ours, theirs):
    """The same batches: as many, each the same structure with equal tensors (dtype and shape included)."""
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b)
        elif isinstance(b, (list, tuple)):
            assert type(a) is type(b) and len(a) == len(b)
            _same(list(a), list(b))
        elif isinstance(b, dict):
            assert a.keys() == b.keys()
            _same(list(a.values()), list(b.values()))
        else:
            assert a == b


def test_torchvisions_datasets_from_local_files_give_torchs_batches(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)  # md5s of CIFAR's own files
    rng = np.random.default_rng(1)
    _cifar10(tmp_path / "cifar", rng)
    _mnist(tmp_path / "mnist", "MNIST", rng)
    _mnist(tmp_path / "mnist", "FashionMNIST", rng)
    cifar10 = torchvision.datasets.CIFAR10(str(tmp_path / "cifar"), transform=T.ToTensor(), download=False)
    mnist = torchvision.datasets.MNIST(str(tmp_path / "mnist"), download=False, target_transform=lambda y: y % 2,
                                       transform=T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))]))
    fashion = torchvision.datasets.FashionMNIST(str(tmp_path / "mnist"), transform=v2.Compose(
        [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]), download=False)
    train, val = random_split(cifar10, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    cases = [
        (cifar10, dict(batch_size=4)),
        (train, dict(batch_size=5, drop_last=True)),
        (Subset(val, [2, 0]), dict(batch_size=5, num_workers=2, pin_memory=True)),
        (mnist, dict(batch_size=3)),
        (ConcatDataset([mnist, fashion]), dict(batch_size=4, collate_fn=None)),
        (torchvision.datasets.FakeData(5, (3, 8, 8), 4, T.ToTensor()), dict(batch_size=2)),
    ]
    for dataset, kwargs in cases:
        _same(gpupipe_epoch(dataset, fallback="torchvision", **kwargs), torch_epoch(dataset, **kwargs))


def test_voc_detection_with_the_references_collate_gives_torchs_batches(tmp_path):
    base = tmp_path / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (base / sub).mkdir(parents=True)
    ids, rng = [f"2008_{i:06d}" for i in range(5)], np.random.default_rng(2)
    for i, name in enumerate(ids):
        Image.fromarray(rng.integers(0, 256, (20 + i, 30, 3), np.uint8)).save(base / "JPEGImages" / f"{name}.jpg")
        box = f"<xmin>{1 + i}</xmin><ymin>2</ymin><xmax>20</xmax><ymax>{12 + i}</ymax>"
        (base / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename><size><width>30</width><height>{20 + i}</height>"
            f"<depth>3</depth></size><object><name>dog</name><difficult>0</difficult><bndbox>{box}</bndbox>"
            "</object></annotation>")
    (base / "ImageSets/Main/train.txt").write_text("\n".join(ids) + "\n")
    plain = torchvision.datasets.VOCDetection(str(tmp_path), "2012", "train", transform=T.ToTensor())
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(torchvision.datasets.VOCDetection(
        str(tmp_path), "2012", "train", transforms=v2.Compose([v2.ToImage(), v2.Resize((16, 16))])))
    for dataset in (plain, wrapped):
        kwargs = dict(batch_size=2, collate_fn=lambda batch: tuple(zip(*batch)))
        _same(gpupipe_epoch(dataset, fallback="torchvision", **kwargs), torch_epoch(dataset, **kwargs))
    with pytest.raises(UnsupportedDataset, match="gpupipe.CocoDetection"):  # what to use for boxes instead
        gpupipe.DataLoader(plain, batch_size=2, **CPU)


# --- Every sample once per epoch, with its own label -------------------------------------------------------------


def _coded_folder(root, count=21):
    """PNGs of one flat colour each, ``10 * i``, dealt over three classes, and a note that is no image."""
    for i in range(count):
        folder = root / "abc"[i % 3]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((24, 20 + i % 4, 3), 10 * i, np.uint8)).save(folder / f"{i}.png")
    (root / "a" / "notes.txt").write_text("not an image")
    return str(root)


def _ids_and_labels(loader, epoch):
    """``{image id: label}`` of one pass (the id read back from the flat colour), checking no id comes twice."""
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    seen = {}
    for images, labels in loader:
        level = images[:, 0, 4, 4].float() * (0.25 if images.is_floating_point() else 1 / 255) + 0.5
        for sample, label in zip((level * 255 / 10).round().long().tolist(), labels.tolist()):
            assert sample not in seen
            seen[sample] = label
    return seen


def test_random_transforms_over_splits_and_concats_read_each_sample_once_with_its_label(tmp_path):
    recipe = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(8, antialias=True), v2.RandomHorizontalFlip(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.25] * 3)])
    folder = ImageFolder(_coded_folder(tmp_path), recipe, target_transform=lambda y: 2 - y,
                         is_valid_file=lambda path: path.endswith(".png") and not path.endswith("/7.png"))
    truth = {int(path.rsplit("/", 1)[1][:-4]): 2 - label for path, label in folder.samples}
    assert len(truth) == 20
    train, val = random_split(folder, [14, 6], generator=torch.Generator().manual_seed(3))
    ids = [int(folder.samples[i][0].rsplit("/", 1)[1][:-4]) for i in train.indices]
    cases = [
        (folder, dict(shuffle=True, generator=torch.Generator().manual_seed(1)), truth),
        (train, dict(shuffle=True, drop_last=True, num_workers=2, persistent_workers=True),
         {i: truth[i] for i in ids}),
        (ConcatDataset([val, Subset(folder, train.indices[:2])]), dict(shuffle=True), None),
    ]
    for dataset, kwargs, expected in cases:
        loader = gpupipe.DataLoader(dataset, batch_size=4, **CPU, **kwargs)
        for epoch in range(2):
            seen = _ids_and_labels(loader, epoch)
            assert all(truth[i] == label for i, label in seen.items())
            if expected is not None and kwargs.get("drop_last"):
                assert len(seen) == 12 and set(seen) <= set(expected)
            elif expected is not None:
                assert seen == expected
            else:
                assert len(seen) == 8
    shares = []
    for rank in range(2):  # a DistributedSampler's two shares: every sample once (the padded one twice)
        sampler = torch.utils.data.DistributedSampler(folder, num_replicas=2, rank=rank, seed=4)
        shares.append(_ids_and_labels(gpupipe.DataLoader(folder, batch_size=4, sampler=sampler, **CPU), 1))
    assert {**shares[0], **shares[1]} == truth and len(shares[0]) == len(shares[1]) == 10


@pytest.mark.parametrize("relabel", [lambda k, y: -1 if k % 3 else y, lambda k, y: y + 5, lambda k, y: float(y)],
                         ids=["unlabelled-minus-one", "past-the-classes", "float"])
def test_samples_labelled_outside_the_classes_are_refused_by_name_and_read_as_they_are(tmp_path, relabel):
    # A semi-supervised script marks its unlabelled samples -1 in ImageFolder.samples; torch's DataLoader gives
    # those labels. Before: FileList's ValueError ("outside the class range"), with fallback='torchvision' too.
    dataset = ImageFolder(_folder(tmp_path, [(12, 12)] * 6), T.ToTensor())
    dataset.samples = [(path, relabel(k, y)) for k, (path, y) in enumerate(dataset.samples)]
    with pytest.raises(UnsupportedDataset, match=r"ImageFolder\.samples\[\d\] \(.*\.png\) has the label .*"
                       r"fallback='torchvision'"):
        gpupipe.DataLoader(dataset, batch_size=4, **CPU)
    _same(gpupipe_epoch(dataset, batch_size=4, fallback="torchvision"), torch_epoch(dataset, batch_size=4))


def test_a_distributed_sampler_under_torchrun_gives_each_rank_its_share_with_its_labels(tmp_path):
    # Two gloo ranks, as a DDP script swapped: shuffle=False reads exactly the sampler's indices (torch's
    # batches' samples and labels); shuffled, the two shares hold every sample (one padded) with its label.
    root = _coded_folder(tmp_path / "data")
    results = two_ranks(tmp_path, f"""
        import torchvision
        from torchvision.transforms import v2
        from torch.utils.data import DataLoader, DistributedSampler, Subset
        recipe = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(8), v2.ToDtype(torch.float32, scale=True)])
        folder = torchvision.datasets.ImageFolder({root!r}, recipe, target_transform=lambda y: 2 - y)
        dataset = Subset(folder, list(range(1, 20)))
        result = {{}}
        for shuffle in (False, True):
            sampler = DistributedSampler(dataset, shuffle=shuffle, seed=7)
            sampler.set_epoch(1)
            ours = [(((x[:, 0, 4, 4] * 255 / 10).round().long().tolist()), y.tolist())
                    for x, y in gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, device="cpu")]
            theirs = [(((x[:, 0, 4, 4] * 255 / 10).round().long().tolist()), y.tolist())
                      for x, y in DataLoader(dataset, batch_size=4, sampler=sampler)]
            result[str(shuffle)] = [ours, theirs]
    """)
    folder = ImageFolder(root)
    ids = [int(folder.samples[i][0].rsplit("/", 1)[1][:-4]) for i in range(1, 20)]
    label_of = {i: 2 - folder.samples[k][1] for k, i in zip(range(1, 20), ids)}
    for rank in results:
        ours, theirs = rank["False"]
        assert ours == theirs  # the sampler's samples, in its order, with torch's labels and batches
    shares = [rank["True"][0] for rank in results]
    assert [len(share) for share in shares] == [3, 3]  # 10 samples a rank: batches of 4, 4 and 2
    seen = [(i, y) for share in shares for batch in share for i, y in zip(*batch)]
    assert len(seen) == 20 and {i for i, _ in seen} == set(ids) and all(label_of[i] == y for i, y in seen)
