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


def tutorial_loader(config) -> Iterable:
    """What the usual tutorials write: ImageFolder + PIL + ToTensor + Normalize in a DataLoader.

    The heavy setting adds torchvision's RandAugment (on PIL images) and
    RandomErasing, and mixes batches with gpupipe's own MixUp/CutMix step
    (``gpupipe.loading.batchsteps``), on the device.
    """
    from torchvision import datasets, transforms

    heavy = config.augment == "heavy"
    steps = [transforms.RandomResizedCrop(config.image_size), transforms.RandomHorizontalFlip()]
    if heavy:
        steps.append(transforms.RandAugment(num_ops=2, magnitude=9))
    steps += [transforms.ToTensor(), transforms.Normalize(gpupipe.ops.IMAGENET_MEAN, gpupipe.ops.IMAGENET_STD)]
    if heavy:
        steps.append(transforms.RandomErasing(p=HEAVY["random_erasing"]))
    dataset = datasets.ImageFolder(str(config.data), transforms.Compose(steps))
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
