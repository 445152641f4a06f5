"""The tutorial loader every backend is compared with, and the train preset the bench feeds
(``config``: a ``gpupipe.bench.runner.BenchConfig``)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

import gpupipe
from gpupipe.env import default_threads
from gpupipe.loading.batchsteps import BatchSteps
from gpupipe.plan.spec import build_spec

#: The ``heavy`` setting: RandAugment, random erasing and MixUp/CutMix, as timm's ImageNet recipes.
HEAVY = dict(auto_augment="rand-m9-n2", random_erasing=0.25, mixup=0.8, cutmix=1.0)


def pipeline_of(config):
    """The train preset, plain or with the heavy augmentations."""
    return gpupipe.presets.train(config.image_size, **(HEAVY if config.augment == "heavy" else {}))


def tutorial_loader(config, source=None) -> Iterable:
    """What the usual tutorials write: ImageFolder + PIL + ToTensor + Normalize in a DataLoader.

    Its ``ImageFolder`` reads the files and classes of ``source`` (gpupipe's ``ImageFolder`` of
    ``config.data``, made here when not given), so that it measures the same data as the gpupipe
    loaders: torchvision's own would also read the formats they leave out (``.tif``) and take a hidden
    folder (``.ipynb_checkpoints``) for a class, failing when it holds no image. Decoding and
    transforms are the tutorials' own.

    The heavy setting adds torchvision's RandAugment (on PIL images) and
    RandomErasing, and mixes batches with gpupipe's own MixUp/CutMix step
    (``gpupipe.loading.batchsteps``), on the device.
    """
    from torchvision import transforms

    heavy = config.augment == "heavy"
    steps = [transforms.RandomResizedCrop(config.image_size), transforms.RandomHorizontalFlip()]
    if heavy:
        steps.append(transforms.RandAugment(num_ops=2, magnitude=9))
    steps += [transforms.ToTensor(), transforms.Normalize(gpupipe.ops.IMAGENET_MEAN, gpupipe.ops.IMAGENET_STD)]
    if heavy:
        steps.append(transforms.RandomErasing(p=HEAVY["random_erasing"]))
    dataset = _same_files(source if source is not None else gpupipe.sources.as_source(config.data), steps)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=config.batch_size,
        shuffle=True,
        num_workers=default_threads(),  # the tutorials' choice: one worker per core
        pin_memory=config.device.type == "cuda",
        drop_last=True,
    )
    if not heavy:
        return loader
    return _Mixed(loader, BatchSteps(build_spec(pipeline_of(config)), len(dataset.classes)), config.device)


def _same_files(source, steps):
    """torchvision's ``ImageFolder`` over ``source``'s files, labels and classes (its own listing
    replaced: an instance of the class itself, which a spawned DataLoader worker can unpickle)."""
    from torchvision import datasets, transforms

    dataset = datasets.ImageFolder(str(source.root), transforms.Compose(steps), is_valid_file=_none, allow_empty=True)
    dataset.classes = list(source.classes)
    dataset.class_to_idx = {name: i for i, name in enumerate(source.classes)}
    dataset.samples = dataset.imgs = [(str(name), int(label)) for name, label in zip(source.names, source.labels)]
    dataset.targets = [label for _, label in dataset.samples]
    return dataset


def _none(path: str) -> bool:
    """Lists no file: ``_same_files`` sets the samples."""
    return False


class _Mixed:
    """A DataLoader whose batches are moved to the device and mixed (MixUp / CutMix) there."""

    def __init__(self, loader, mixer: BatchSteps, device: torch.device) -> None:
        self.loader, self.mixer, self.device = loader, mixer, device

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for step, (images, labels) in enumerate(self.loader):
            images = images.to(self.device, non_blocking=True)
            yield self.mixer(images, labels.to(self.device, non_blocking=True), step)
