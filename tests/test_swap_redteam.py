"""Red team of the swap: training scripts written for torch's ``DataLoader`` and torchvision's datasets,
given to ``gpupipe.DataLoader`` as they are. Each case is one a user's script met: gpupipe must give the
same data, or refuse clearly, never differ silently."""

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch.utils.data import DistributedSampler, Subset, SubsetRandomSampler
from torchvision import transforms as T

import gpupipe
from gpupipe.interop.dataloader import UnsupportedArgument
from gpupipe.interop.datasets import UnsupportedDataset
from helpers import flat_folder, sample_ids

SMALL = T.Compose([T.CenterCrop(8), T.PILToTensor()])  # uint8: flat_folder's colours read back as sample ids
CPU = {"device": "cpu", "backend": "torchvision"}


@pytest.fixture
def folder(tmp_path):
    return flat_folder(tmp_path / "flat", 22, classes=3)


def ids(loader):
    return [i for images, _ in loader for i in sample_ids(images)]


def file_ids(dataset, indices):
    return [int(dataset.samples[i][0].split("s")[-1][:4]) for i in indices]


# -- a dataset class of the user's own ------------------------------------------------------------


class WithPaths(torchvision.datasets.ImageFolder):
    """The usual "ImageFolder with paths": its samples are (image, label, path) triples."""

    def __getitem__(self, index):
        image, label = super().__getitem__(index)
        return image, label, self.samples[index][0]


class Renamed(torchvision.datasets.ImageFolder):
    """A subclass that only names the folder (as torchvision's ImageNet, EuroSAT, Country211)."""

    def __len__(self):  # as EuroSAT's: the same length
        return len(self.samples)


class Shorter(torchvision.datasets.ImageFolder):
    def __len__(self):
        return 10


class Every2nd(Subset):
    def __getitem__(self, index):
        return super().__getitem__(2 * index)

    def __getitems__(self, indices):  # torch requires both
        return [self[i] for i in indices]


def test_a_folder_subclass_with_its_own_getitem_is_refused_not_ignored(folder):
    # Before: gpupipe read the subclass's files as ImageFolder does and never ran its __getitem__:
    # the loop's `for images, labels, paths in loader` got pairs (or, worse, other data, silently).
    with pytest.raises(UnsupportedDataset, match=r"WithPaths.*__getitem__"):
        gpupipe.DataLoader(WithPaths(str(folder), SMALL), batch_size=4, **CPU)
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    with pytest.raises(UnsupportedDataset, match=r"Every2nd.*__getitem__"):
        gpupipe.DataLoader(Every2nd(dataset, range(10)), batch_size=4, **CPU)
    with pytest.raises(UnsupportedDataset, match=r"Shorter.*__len__"):
        gpupipe.DataLoader(Shorter(str(folder), SMALL), batch_size=4, **CPU)
    renamed = Renamed(str(folder), SMALL)  # nothing that changes what is read: read as its samples say
    loader = gpupipe.DataLoader(renamed, batch_size=4, **CPU)
    assert ids(loader) == file_ids(renamed, range(22))


def test_a_dataset_gpupipe_cannot_read_is_refused_with_what_to_use_instead():
    class Pairs(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return torch.zeros(3, 8, 8), index

    with pytest.raises(UnsupportedDataset) as caught:
        gpupipe.DataLoader(Pairs(), batch_size=2, **CPU)
    message = str(caught.value)
    for hint in ("Pairs", "FileList", "SegmentationFolder", "CocoDetection", "torch.utils.data.DataLoader"):
        assert hint in message, hint


# -- torch DataLoader attributes that scripts read -----------------------------------------------


def test_the_loader_answers_the_dataloader_attributes_scripts_read(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    generator = torch.Generator().manual_seed(5)
    given = {"num_workers": 2, "pin_memory": True, "persistent_workers": True, "generator": generator}
    theirs = torch.utils.data.DataLoader(dataset, batch_size=4, **given)
    ours = gpupipe.DataLoader(dataset, batch_size=4, **given, **CPU)
    names = (
        "num_workers",
        "pin_memory",
        "persistent_workers",
        "generator",
        "prefetch_factor",
        "collate_fn",
        "timeout",
        "worker_init_fn",
        "multiprocessing_context",
        "pin_memory_device",
        "in_order",
    )
    for name in names:
        assert getattr(ours, name) == getattr(theirs, name), name
    plain = gpupipe.DataLoader(dataset, batch_size=4, **CPU)
    assert plain.num_workers == 0 and plain.prefetch_factor is None and plain.pin_memory is False


# -- samplers --------------------------------------------------------------------------------------


def test_a_subset_random_sampler_reads_its_indices_shuffled(folder):
    # The tutorials' train/validation split: SubsetRandomSampler(train_indices) over one dataset.
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    chosen = [3, 17, 0, 8, 21, 5, 12]
    sampler = SubsetRandomSampler(chosen, generator=torch.Generator().manual_seed(9))
    theirs = torch.utils.data.DataLoader(dataset, batch_size=3, sampler=sampler)
    loader = gpupipe.DataLoader(dataset, batch_size=3, sampler=sampler, **CPU)
    assert len(loader) == len(theirs) == 3 and loader.dataset is dataset
    first, second = ids(loader), ids(loader)
    assert sorted(first) == sorted(second) == sorted(file_ids(dataset, chosen))
    assert loader.shuffle and loader.seed == 9
    epochs = {tuple(ids(loader)) for _ in range(4)}
    assert len(epochs) > 1, "a new order every pass, as torch's sampler gives"
    dropped = gpupipe.DataLoader(dataset, batch_size=3, sampler=sampler, drop_last=True, **CPU)
    assert len(dropped) == 2 and len(ids(dropped)) == 6


def test_a_sampler_of_the_users_own_is_refused_saying_what_is_taken(folder):
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)

    class EveryOther(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(range(0, 22, 2))

        def __len__(self):
            return 11

    with pytest.raises(UnsupportedArgument, match=r"DataLoader\(sampler=.*a SubsetRandomSampler or a WeightedRandomSampler"):
        gpupipe.DataLoader(dataset, batch_size=3, sampler=EveryOther(), **CPU)


# -- a transform gpupipe cannot compile ------------------------------------------------------------


def test_the_refusal_of_a_transform_says_how_to_run_it_anyway(folder):
    recipe = T.Compose([T.Resize(12, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(8), T.ToTensor()])
    dataset = torchvision.datasets.ImageFolder(str(folder), recipe)
    with pytest.raises(gpupipe.UnsupportedTransform, match=r"Compose\[0\] Resize") as caught:
        gpupipe.DataLoader(dataset, batch_size=4, **CPU)
    assert "fallback='torchvision'" in str(caught.value)
    with pytest.warns(UserWarning) as warned:
        loader = gpupipe.DataLoader(dataset, batch_size=4, fallback="torchvision", num_threads=0, device="cpu")
    text = str(warned[0].message)
    assert "Compose[0] Resize" in text and "supported:" not in text and "pass fallback" not in text
    images, labels = next(iter(loader))
    assert torch.equal(images[0], dataset[0][0]) and labels.tolist() == dataset.targets[:4]


def test_a_padding_distributed_sampler_with_a_dropping_loader_reads_what_torch_reads(folder):
    # DistributedSampler(drop_last=False) pads the ranks even; DataLoader(drop_last=True) then drops each
    # rank's partial batch: the usual training loader, refused before whenever 22 % world != 0.
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)  # 22 samples
    for rank in range(4):
        sampler = DistributedSampler(dataset, num_replicas=4, rank=rank, shuffle=False)  # 6 each, 2 padded
        theirs = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True)
        loader = gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True, **CPU)
        assert len(loader) == len(theirs) == 1
        assert ids(loader) == file_ids(dataset, list(sampler)[:4])
    shuffled = DistributedSampler(dataset, num_replicas=4, rank=1, shuffle=True, seed=3)
    theirs = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=shuffled, drop_last=True)
    loader = gpupipe.DataLoader(dataset, batch_size=4, sampler=shuffled, drop_last=True, **CPU)
    assert len(loader) == len(theirs) == 1 and len(ids(loader)) == 4, "as many full batches as torch's"
    with pytest.raises(UnsupportedArgument, match="drop_last"):  # torch: 6 a rank, 2 batches; cut to 5: 1
        gpupipe.DataLoader(dataset, batch_size=3, sampler=shuffled, drop_last=True, **CPU)


# -- a dataset changed after the loader was built ----------------------------------------------------


def test_a_dataset_changed_after_the_loader_was_built_is_refused_at_the_next_pass(folder):
    # Before: the loader kept the transform and samples it had compiled, silently: torch's DataLoader
    # applies the new transform (8 px) and reads the new samples; gpupipe gave 16 px from all 22 files.
    dataset = torchvision.datasets.ImageFolder(str(folder), T.Compose([T.CenterCrop(16), T.PILToTensor()]))
    built = {how: gpupipe.DataLoader(dataset, batch_size=4, **CPU) for how in ("DataLoader",)}
    built["loader"] = gpupipe.loader(dataset, batch_size=4, shuffle=False, **CPU)
    given = gpupipe.DataLoader(dataset, batch_size=4, pipeline=SMALL, **CPU)  # the transform is not used
    subset = Subset(dataset, list(range(10)))
    of_subset = gpupipe.DataLoader(subset, batch_size=4, **CPU)
    assert len(ids(given)) == 22 and len(ids(of_subset)) == 10
    dataset.transform = SMALL
    for loader in built.values():
        with pytest.raises(UnsupportedDataset, match=r"ImageFolder\.transform .*changed after the loader was built"):
            next(iter(loader))
    assert len(ids(given)) == 22, "a pipeline given replaces the transform: its change does not matter"
    subset.indices = [0, 1, 2]
    with pytest.raises(UnsupportedDataset, match=r"Subset\.indices"):
        next(iter(of_subset))
    dataset.samples = dataset.samples[:5]
    with pytest.raises(UnsupportedDataset, match=r"ImageFolder\.samples"):
        next(iter(given))


# -- fallback="torchvision" with targets it cannot carry ----------------------------------------------


def test_the_fallback_refuses_a_source_of_masks_rather_than_drop_them(tmp_path):
    # Before: the fallback ran the transform on the image alone and gave labels of -1: masks lost, silently.
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for i in range(3):
        Image.fromarray(np.full((20, 24, 3), 40 * i, np.uint8)).save(tmp_path / "images" / f"{i}.png")
        Image.fromarray(np.full((20, 24), i, np.uint8)).save(tmp_path / "masks" / f"{i}.png")
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    recipe = T.Compose([T.Lambda(lambda image: image), T.PILToTensor()])
    with pytest.raises(ValueError, match=r"fallback='torchvision'.*class labels.*masks, which it would not move"):
        gpupipe.loader(source, recipe, batch_size=3, fallback="torchvision", device="cpu")


# -- the reproducibility recipe of torch's documentation ---------------------------------------------


def test_the_reproducibility_recipe_with_worker_init_fn_runs_unchanged(folder, tmp_path):
    # torch's "Reproducibility" page: DataLoader(..., worker_init_fn=seed_worker, generator=g). It was refused.
    def seed_worker(worker_id):
        (tmp_path / f"worker{worker_id}").touch()

    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    runs = []
    for _ in range(2):
        g = torch.Generator().manual_seed(0)
        runs.append(
            ids(
                gpupipe.DataLoader(
                    dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=seed_worker, generator=g, **CPU
                )
            )
        )
    assert runs[0] == runs[1] and sorted(runs[0]) == list(range(22)), "the generator decides the order"
    assert not list(tmp_path.glob("worker*")), "compiled: no worker runs user code"
    lambdas = torchvision.datasets.ImageFolder(str(folder), T.Compose([T.Lambda(lambda image: image), SMALL]))
    with pytest.warns(UserWarning, match="fallback"):
        loader = gpupipe.DataLoader(
            lambdas, batch_size=4, worker_init_fn=seed_worker, fallback="torchvision", num_threads=2, device="cpu"
        )
    assert sorted(ids(loader)) == list(range(22))
    assert sorted(p.name for p in tmp_path.glob("worker*")) == ["worker0", "worker1"], "the fallback's workers ran it"


# -- a second pass begun during a pass -----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_peeking_at_a_batch_during_a_pass_is_an_error_not_a_short_epoch(folder, backend):
    # `next(iter(loader))` inside `for ... in loader` (to log a few images): torch's DataLoader starts a
    # second, independent pass and the loop reads all 6 batches. gpupipe runs one pass at a time: before,
    # the loop ended after 2 batches, silently.
    dataset = torchvision.datasets.ImageFolder(str(folder), SMALL)
    loader = gpupipe.DataLoader(dataset, batch_size=4, shuffle=True, device="cpu", backend=backend)
    seen = 0
    with pytest.raises(gpupipe.Error, match=r"a new pass over this loader began .*iter\(loader\)"):
        for i, _ in enumerate(loader):
            seen += 1
            if i == 1:
                peeked, _ = next(iter(loader))
    assert seen == 2 and peeked.shape == (4, 3, 8, 8)
    assert len(ids(loader)) == 22, "the loader goes on working"
    it = iter(loader)
    next(it)
    del it  # a pass left behind (break) and a new one: no error
    assert len(ids(loader)) == 22
    finished = iter(loader)
    assert len(list(finished)) == 6
    iter(loader)
    with pytest.raises(StopIteration):  # a pass that had ended by itself stays ended, as torch's
        next(finished)


# -- a transform without a resize, over images of one size ---------------------------------------------


def test_a_transform_without_resize_over_images_of_one_size_batches_as_torch_does(tmp_path):
    # CIFAR's test transform, ToTensor() + Normalize(), over a folder of 32 x 32 PNGs: torch's default
    # collate batches them; gpupipe refused the pipeline as one "of varying size".
    rng = np.random.default_rng(0)
    for i in range(6):
        (tmp_path / "cifar" / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (12, 10, 3), np.uint8)).save(tmp_path / "cifar" / f"c{i % 2}" / f"{i}.png")
    recipe = T.Compose([T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
    dataset = torchvision.datasets.ImageFolder(str(tmp_path / "cifar"), recipe)
    theirs = torch.cat([images for images, _ in torch.utils.data.DataLoader(dataset, batch_size=4)])
    for backend in ("torchvision", "dali-cpu"):
        ours = torch.cat(
            [images for images, _ in gpupipe.DataLoader(dataset, batch_size=4, device="cpu", backend=backend)]
        )
        assert ours.shape == theirs.shape == (6, 3, 12, 10)
        assert (ours - theirs).abs().max() < 1e-5, backend
    Image.fromarray(rng.integers(0, 256, (14, 10, 3), np.uint8)).save(tmp_path / "cifar" / "c0" / "other.png")
    with pytest.raises(ValueError, match="varying size"):  # torch's collate fails there too
        gpupipe.DataLoader(torchvision.datasets.ImageFolder(str(tmp_path / "cifar"), recipe), batch_size=4, **CPU)


def test_the_fallback_gives_multi_label_targets_from_the_source(tmp_path):
    # Before: the fallback batched source.labels, -1 for every multi-label sample, silently.
    lines = []
    for i, tags in enumerate(["cat", "cat,dog", "dog", "bird,cat"]):
        Image.fromarray(np.full((20, 24, 3), 40 * i, np.uint8)).save(tmp_path / f"{i}.png")
        lines.append(f"{i}.png {tags}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    source = gpupipe.FileList(tmp_path / "list.txt")
    recipe = T.Compose([T.Lambda(lambda image: image), T.CenterCrop(8), T.PILToTensor()])
    with pytest.warns(UserWarning, match="fallback"):
        loader = gpupipe.loader(source, recipe, batch_size=4, shuffle=False, fallback="torchvision", device="cpu")
    images, targets = next(iter(loader))
    assert images.shape == (4, 3, 8, 8) and targets.dtype == torch.float32
    expected = torch.zeros(4, len(source.classes))
    for row, tags in enumerate(["cat", "cat,dog", "dog", "bird,cat"]):
        for tag in tags.split(","):
            expected[row, source.classes.index(tag)] = 1
    assert torch.equal(targets, expected)
