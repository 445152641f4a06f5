"""Issue 33: torchvision datasets as sources, gpupipe.DataLoader with torch's signature, and
``loader.dataset`` / ``loader.sampler`` as training scripts use them."""

import inspect

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch.utils.data import DistributedSampler, RandomSampler, Subset
from torchvision import transforms as T

import gpupipe
from gpupipe.interop.dataloader import IGNORED, UnsupportedArgument
from gpupipe.interop.datasets import UnsupportedDataset
from helpers import flat_folder, sample_ids

SMALL = T.Compose([T.CenterCrop(8), T.PILToTensor()])  # uint8: flat_folder's colours read back as sample ids


@pytest.fixture
def folder(tmp_path):
    return flat_folder(tmp_path / "flat", 22, classes=3)


def ids(loader):
    return [i for images, _ in loader for i in sample_ids(images)]


def test_an_image_folder_is_read_with_its_own_samples_classes_labels_and_transform(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    loader = gpupipe.loader(dataset, batch_size=5, shuffle=False, device="cpu", backend="torchvision")
    assert loader.dataset is dataset
    assert loader.classes == dataset.classes and loader.class_to_idx == dataset.class_to_idx
    images, labels = next(iter(loader))
    assert images.dtype == torch.uint8 and images.shape == (5, 3, 8, 8)
    assert labels.tolist() == [dataset.targets[i] for i in range(5)]
    assert ids(loader) == [int(p.split("s")[-1][:4]) for p, _ in dataset.samples], "the dataset's own order"


def test_a_subset_reads_its_indices_and_stays_the_loaders_dataset(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    part = Subset(Subset(dataset, list(range(2, 20))), [5, 1, 7])
    loader = gpupipe.loader(part, batch_size=8, shuffle=False, device="cpu", backend="torchvision")
    assert loader.dataset is part and len(loader.dataset) == 3
    expected = [dataset.samples[i] for i in (7, 3, 9)]
    assert ids(loader) == [int(p.split("s")[-1][:4]) for p, _ in expected]
    assert next(iter(loader))[1].tolist() == [label for _, label in expected]


def test_what_gpupipe_cannot_keep_is_refused_by_name(folder):
    with pytest.raises(UnsupportedDataset, match="target_transform"):  # one that gives no one value per class
        gpupipe.loader(torchvision.datasets.ImageFolder(str(folder), SMALL, target_transform=str), batch_size=2)
    custom = torchvision.datasets.ImageFolder(str(folder), SMALL, loader=lambda p: Image.open(p).convert("L"))
    with pytest.raises(UnsupportedDataset, match="loader="):
        gpupipe.loader(custom, batch_size=2)
    with pytest.raises(UnsupportedDataset, match="has no transform: pass pipeline="):
        gpupipe.loader(torchvision.datasets.ImageFolder(str(folder)), batch_size=2)
    with pytest.raises(gpupipe.Error, match="cannot read a TensorDataset; it takes a path, .*ImageFolder"):
        gpupipe.loader(torch.utils.data.TensorDataset(torch.zeros(3)), batch_size=2)
    with pytest.raises(gpupipe.Error, match=r"cannot read a list; it takes"):
        gpupipe.loader([1, 2, 3], batch_size=2)


def test_a_pipeline_given_replaces_the_datasets_transform_and_transforms_are_pipelines(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    loader = gpupipe.loader(dataset, T.Compose([T.CenterCrop(4), T.ToTensor()]), batch_size=2, device="cpu",
                            backend="torchvision")
    images, _ = next(iter(loader))
    assert images.shape == (2, 3, 4, 4) and images.dtype == torch.float32 and float(images.max()) <= 1.0
    by_path = gpupipe.loader(str(folder), SMALL, batch_size=2, device="cpu", backend="torchvision")
    assert next(iter(by_path))[0].dtype == torch.uint8


def test_every_loader_has_a_dataset_and_a_sampler_as_training_scripts_use_them(folder):
    loader = gpupipe.loader(str(folder), SMALL, batch_size=4, device="cpu", backend="torchvision", rank=1,
                            world_size=2, shuffle=False)
    data = loader.dataset
    reference = torchvision.datasets.ImageFolder(str(folder))
    assert len(data) == 22 and data.classes == reference.classes and data.class_to_idx == reference.class_to_idx
    assert data.samples == reference.samples and data.targets == reference.targets
    image, label = data[3]
    assert image.size == (24, 20) and label == reference.targets[3]
    assert len(loader.sampler) == 11, "this rank's share"
    loader.sampler.set_epoch(4)
    assert loader.epoch == 4
    part = gpupipe.loader(Subset(loader.dataset, range(3, 9)), SMALL, batch_size=8, device="cpu",
                          backend="torchvision", shuffle=False)
    assert ids(part) == [int(p.split("s")[-1][:4]) for p, _ in reference.samples[3:9]]


# -- gpupipe.DataLoader ------------------------------------------------------------------------


def test_the_signature_is_torchs():
    theirs = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    ours = inspect.signature(gpupipe.DataLoader).parameters
    for name, param in theirs.items():
        if name == "self":
            continue
        assert name in ours, name
        assert ours[name].default == param.default, name
        assert ours[name].kind == param.kind, name
    assert set(IGNORED) == {"num_workers", "pin_memory", "pin_memory_device", "persistent_workers",
                            "multiprocessing_context", "in_order", "worker_init_fn"}


def test_dataloader_swaps_in_with_torchs_defaults(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    loader = gpupipe.DataLoader(dataset, batch_size=4, num_workers=3, pin_memory=True, persistent_workers=True,
                                prefetch_factor=3, device="cpu", backend="torchvision")
    assert loader.dataset is dataset and loader.shuffle is False and loader.drop_last is False
    assert loader.config.prefetch == 3 and loader.world_size == 1 and len(loader) == 6
    assert ids(loader) == ids(torch.utils.data.DataLoader(dataset, batch_size=4, collate_fn=_ids_collate))


def _ids_collate(batch):
    return torch.stack([image for image, _ in batch]), torch.tensor([label for _, label in batch])


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"batch_size": None}, "batch_size"),
        ({"batch_sampler": [[0, 1]]}, "batch_sampler"),
        ({"collate_fn": _ids_collate}, "collate_fn"),
        ({"timeout": 5}, "timeout"),
        ({"sampler": iter([0, 1, 2])}, "sampler"),  # a list of indices is read (tests/test_redteam_swap5.py)
        ({"shuffle": True, "sampler": "dist"}, "shuffle"),
        ({"num_workers": -1}, "num_workers"),
        ({"num_workers": 1.0}, "num_workers"),
        ({"prefetch_factor": 0}, "prefetch_factor"),  # named as given, not as gpupipe's prefetch
        ({"prefetch_factor": 2000}, "prefetch_factor"),
    ],
)
def test_arguments_gpupipe_cannot_honour_are_refused_by_name(folder, kwargs, name):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    if kwargs.get("sampler") == "dist":
        kwargs["sampler"] = DistributedSampler(dataset, num_replicas=2, rank=0)
    with pytest.raises(UnsupportedArgument, match=rf"DataLoader\({name}="):
        gpupipe.DataLoader(dataset, **kwargs)


def test_numpy_counts_are_taken_as_torch_takes_them(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    loader = gpupipe.DataLoader(dataset, batch_size=4, num_workers=np.int64(2), prefetch_factor=np.int32(3),
                                device="cpu", backend="torchvision")
    assert loader.config.prefetch == 3 and type(loader.config.prefetch) is int and len(loader) == 6


def test_a_distributed_sampler_gives_its_share_and_its_set_epoch_decides_the_order(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=7)
    loader = gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, device="cpu", backend="torchvision")
    assert (loader.rank, loader.world_size, loader.seed, loader.shuffle) == (1, 2, 7, True)
    assert loader.sampler is sampler and len(loader.sampler) == 11 and len(loader) == 3
    first, again = ids(loader), ids(loader)
    assert first == again, "without set_epoch every pass reads epoch 0, as with torch"
    sampler.set_epoch(1)
    assert ids(loader) != first, "epoch 1"


def test_distributed_sampler_drop_last_is_kept(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)  # 22 samples
    val = DistributedSampler(dataset, num_replicas=4, rank=3, shuffle=False, drop_last=True)
    loader = gpupipe.DataLoader(dataset, batch_size=4, sampler=val, device="cpu", backend="torchvision")
    assert len(val) == 5 and len(loader) == 2, "5 samples on this rank, the last batch partial"
    assert ids(loader) == [int(dataset.samples[i][0].split("s")[-1][:4]) for i in list(val)]
    assert loader.dataset is dataset
    shuffled = DistributedSampler(dataset, num_replicas=4, rank=0, shuffle=True, drop_last=True)
    with pytest.raises(UnsupportedArgument, match="drop_last"):
        gpupipe.DataLoader(dataset, batch_size=4, sampler=shuffled)


def test_random_and_sequential_samplers_map_to_shuffle(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    generator = torch.Generator().manual_seed(11)
    loader = gpupipe.DataLoader(dataset, batch_size=4, sampler=RandomSampler(dataset, generator=generator),
                                device="cpu", backend="torchvision")
    assert loader.shuffle and loader.seed == 11
    assert sorted(ids(loader)) == list(range(22))


# -- fallback="torchvision" --------------------------------------------------------------------


def test_fallback_runs_the_users_own_transform_unchanged_and_says_so_once(folder):
    calls = []

    def mine(image):  # a user function: no gpupipe op has its meaning
        calls.append(image.size)
        return T.functional.pil_to_tensor(image)[:, :4, :4]

    recipe = T.Compose([T.Lambda(mine)])
    dataset = torchvision.datasets.ImageFolder(str(folder), recipe)
    with pytest.raises(gpupipe.UnsupportedTransform, match=r"Compose\[0\] Lambda"):
        gpupipe.loader(dataset, batch_size=4)
    with pytest.warns(UserWarning, match="fallback='torchvision' runs it as it is") as caught:
        loader = gpupipe.DataLoader(dataset, batch_size=4, fallback="torchvision", num_threads=0, device="cpu")
    assert len(caught) == 1 and "Compose[0] Lambda" in str(caught[0].message)
    assert loader.backend == "torchvision-transform" and loader.dataset is dataset
    batches = list(loader)
    assert len(batches) == 6 and calls, "the user's function ran"
    images = torch.cat([images for images, _ in batches])
    assert ids_of(images) == list(range(22)) or sorted(ids_of(images)) == sorted(
        int(p.split("s")[-1][:4]) for p, _ in dataset.samples)
    assert torch.equal(images[0], dataset[0][0]), "exactly the transform's output"
    with pytest.raises(ValueError, match="not 'dali-cpu'"):
        gpupipe.loader(dataset, batch_size=4, fallback="torchvision", backend="dali-cpu")


def ids_of(images):
    return sample_ids(images)
