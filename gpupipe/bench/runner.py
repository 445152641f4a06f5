"""Runs the bench: every backend feeds the same AMP training loop, measured side by side."""

from __future__ import annotations

import contextlib
import gc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, Tuple

import torch

import gpupipe
from gpupipe.backends import default_threads
from gpupipe.batchaug import BatchMixer

from . import measure
from .monitor import ResourceMonitor

logger = logging.getLogger(__name__)

#: The tutorial loader every backend is compared with.
BASELINE = "baseline"

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one bench run (see ``python -m gpupipe.bench --help``)."""

    data: Path
    backends: Tuple[str, ...]
    model: str
    batch_size: int
    image_size: int
    steps: int
    train_steps: int
    warmup: int
    train_warmup: int
    repeats: int
    amp: str
    threads: int
    device: torch.device
    dtype: str = "float32"
    measure_training: bool = True
    augment: str = "standard"


#: The ``heavy`` setting: RandAugment, random erasing and MixUp/CutMix, as timm's ImageNet recipes.
HEAVY = dict(auto_augment="rand-m9-n2", random_erasing=0.25, mixup=0.8, cutmix=1.0)


def pipeline_of(config: BenchConfig):
    """The train preset, plain or with the heavy augmentations."""
    return gpupipe.presets.train(config.image_size, **(HEAVY if config.augment == "heavy" else {}))


def tutorial_loader(config: BenchConfig) -> Iterable:
    """What the usual tutorials write: ImageFolder + PIL + ToTensor + Normalize in a DataLoader.

    The heavy setting adds torchvision's RandAugment (on PIL images) and
    RandomErasing, and mixes batches with the same MixUp/CutMix code as
    gpupipe, on the device.
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
    mixes = [op for op in pipeline_of(config) if isinstance(op, gpupipe.ops.BatchOp)]
    return _Mixed(loader, BatchMixer(mixes, len(dataset.classes)), config.device)


class _Mixed:
    """A DataLoader whose batches are moved to the device and mixed (MixUp / CutMix) there."""

    def __init__(self, loader, mixer: BatchMixer, device: torch.device) -> None:
        self.loader, self.mixer, self.device = loader, mixer, device

    def __iter__(self):
        for step, (images, labels) in enumerate(self.loader):
            images = images.to(self.device, non_blocking=True)
            yield self.mixer(images, labels.to(self.device, non_blocking=True), key=step)


def make_loader(backend: str, config: BenchConfig, source: gpupipe.sources.Source) -> Iterable:
    """The backend's loader for the train preset (``baseline``: the tutorial DataLoader).

    ``source`` is listed and scanned once per bench, not once per repeat.
    """
    if backend == BASELINE:
        return tutorial_loader(config)
    return gpupipe.loader(
        source,
        pipeline_of(config),
        batch_size=config.batch_size,
        backend=backend,
        device=config.device,
        num_threads=config.threads,
        dtype=config.dtype,
        channels_last=True,
        drop_last=True,
    )


def make_train_step(config: BenchConfig, num_classes: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One SGD step of a torchvision model, channels_last, under autocast (GradScaler for fp16)."""
    import torchvision

    device = config.device
    model = torchvision.models.get_model(config.model, num_classes=num_classes)
    model = model.to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    amp_dtype = AMP_DTYPES[config.amp]
    scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None

    def train_step(images: torch.Tensor, labels: torch.Tensor) -> None:
        images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    return train_step


def _sync_for(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _monitor(config: BenchConfig) -> ResourceMonitor:
    return ResourceMonitor(gpu_index=config.device.index if config.device.type == "cuda" else None)


CEILING = "ceiling"


@contextlib.contextmanager
def _fresh_stream(name: str, config: BenchConfig, kept_batch, source: gpupipe.sources.Source) -> Iterator:
    """An endless batch stream from a new loader (or the kept batch), closed afterwards.

    Every repeat gets a fresh loader, warmed up inside the repeat and shut
    down after it: a loader left alive would refill its prefetch queue in the
    background, taking CPU from the next backend's measurement and starting
    its own next repeat with free batches.
    """
    if name == CEILING:
        stream = measure.repeat_batch(kept_batch)
    else:
        stream = measure.forever(make_loader(name, config, source))
    try:
        yield stream
    finally:
        stream.close()
        del stream
        gc.collect()


def run(config: BenchConfig) -> Dict:
    """Measures every backend; returns the figures (see :mod:`gpupipe.bench.report`).

    Repeats are interleaved (repeat 1 of every backend, then repeat 2, ...)
    so that a noisy machine's drift hits every backend alike; medians are
    reported.
    """
    sync = _sync_for(config.device)
    source = gpupipe.ImageFolder(config.data)
    num_classes = len(source.classes)
    names = list(config.backends)
    figures: Dict = {"results": {name: {} for name in names}}
    results = figures["results"]

    loader_runs: Dict[str, list] = {name: [] for name in names}
    loader_monitors = {name: _monitor(config) for name in names}
    for r in range(config.repeats):
        for name in names:
            with _fresh_stream(name, config, None, source) as stream:
                measure.warm_up(stream, config.warmup, sync=sync)
                with loader_monitors[name]:
                    loader_runs[name].append(measure.time_loader(stream, config.steps, sync))
            logger.info("[loader alone %d/%d] %-12s %8.1f images/s", r + 1, config.repeats, name, loader_runs[name][-1])
    for name in names:
        alone = measure.Result.of(loader_runs[name])
        results[name]["loader"] = {"images_per_s": round(alone.images_per_s, 1), "runs": _rounded(alone.runs)}
        results[name]["loader_resources"] = loader_monitors[name].summary()
    if not config.measure_training:
        _add_speedups(results)
        return figures

    train_step = make_train_step(config, num_classes)
    shape = (config.batch_size, 3, config.image_size, config.image_size)
    kept = (
        torch.randn(shape, device=config.device).contiguous(memory_format=torch.channels_last),
        torch.randint(0, num_classes, (config.batch_size,), device=config.device),
    )
    loops = [CEILING] + names
    train_runs: Dict[str, list] = {name: [] for name in loops}
    train_shares: Dict[str, list] = {name: [] for name in loops}
    train_monitors = {name: _monitor(config) for name in loops}
    for r in range(config.repeats):
        for name in loops:
            with _fresh_stream(name, config, kept, source) as stream:
                measure.warm_up(stream, config.train_warmup, train_step, sync)
                with train_monitors[name]:
                    ips, share = measure.time_training(stream, train_step, config.train_steps, sync)
            train_runs[name].append(ips)
            train_shares[name].append(share)
            logger.info(
                "[training %d/%d] %-12s %8.1f images/s, waiting %3.0f%%", r + 1, config.repeats, name, ips, 100 * share
            )
    top = measure.Result.of(train_runs[CEILING])
    figures["ceiling"] = {
        "images_per_s": round(top.images_per_s, 1),
        "runs": _rounded(top.runs),
        "resources": train_monitors[CEILING].summary(),
    }
    for name in names:
        train = measure.Result.of(train_runs[name], train_shares[name])
        v = measure.verdict(train, top, backend=name, on_gpu=config.device.type == "cuda", threads=config.threads)
        results[name]["train"] = {
            "images_per_s": round(train.images_per_s, 1),
            "wait_share": round(train.wait_share, 3),
            "runs": _rounded(train.runs),
            "wait_shares": [round(x, 3) for x in train.wait_shares],
            "fraction_of_ceiling": round(v.fraction_of_ceiling, 3),
        }
        results[name]["train_resources"] = train_monitors[name].summary()
        results[name]["verdict"] = {"bound": v.bound, "suggestion": v.suggestion}
    _add_speedups(results)
    return figures


def _rounded(values) -> list:
    return [round(v, 1) for v in values]


def _add_speedups(results: Dict[str, Dict]) -> None:
    """Adds each backend's ratio to the baseline, measured in the same run."""
    base = results.get(BASELINE)
    if not base:
        return
    for entry in results.values():
        entry["loader"]["x_baseline"] = round(entry["loader"]["images_per_s"] / base["loader"]["images_per_s"], 2)
        if "train" in entry:
            entry["train"]["x_baseline"] = round(entry["train"]["images_per_s"] / base["train"]["images_per_s"], 2)
