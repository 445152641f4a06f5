"""Runs the bench: every backend feeds the same AMP training loop, measured side by side.

One loop measures everything (:func:`interleaved`): for each repeat, each
phase (loader alone, then training, whose ceiling runs in the same rounds)
and each backend, it builds a fresh loader, warms it up, times it under
the resource monitor, and shuts it down.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

import gpupipe
from gpupipe.backends import default_threads
from gpupipe.batchaug import BatchMixer

from . import measure
from .monitor import ResourceMonitor

logger = logging.getLogger(__name__)

#: The tutorial loader every backend is compared with.
BASELINE = "baseline"
CEILING = "ceiling"

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
    return gpupipe.loader(source, pipeline_of(config), batch_size=config.batch_size, backend=backend,
                          device=config.device, num_threads=config.threads, dtype=config.dtype, channels_last=True,
                          drop_last=True)


def make_train_step(config: BenchConfig, num_classes: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One SGD step of a torchvision model, channels_last, under autocast (GradScaler for fp16)."""
    import torchvision

    device = config.device
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes: pick the fastest kernels once
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


def release_memory(device: torch.device) -> None:
    """Frees what the last loader left: Python garbage, torch's cached GPU blocks and DALI's pools."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        try:
            from nvidia.dali.backend import ReleaseUnusedMemory
        except ImportError:
            return
        ReleaseUnusedMemory()


@contextlib.contextmanager
def fresh_stream(name: str, config: BenchConfig, source, kept_batch=None) -> Iterator[measure.Stream]:
    """An endless batch stream from a new loader (or the kept batch), shut down afterwards.

    A loader left alive would refill its prefetch queue in the background,
    taking CPU from the next backend's measurement and starting its own next
    repeat with free batches.
    """
    loader = measure.repeat_batch(kept_batch) if name == CEILING else make_loader(name, config, source)
    stream = measure.forever(loader)
    try:
        yield stream
    finally:
        stream.close()
        close = getattr(loader, "close", None)
        if close is not None:
            close()
        del stream, loader
        release_memory(config.device)


@dataclass
class Phase:
    """One kind of measurement: its label, the loops measured, and how one repeat is timed."""

    label: str
    names: List[str]
    timed: Callable[[measure.Stream], Tuple[float, Optional[float]]]
    warm: Callable[[measure.Stream], None]


def interleaved(phases: List[Phase], config: BenchConfig, source, kept_batch, progress=None) -> Dict:
    """Times every loop of every phase ``config.repeats`` times, interleaving loops within each repeat.

    Returns:
        ``{phase label: {name: {"runs", "waits", "boundaries", "resources"}}}``.
    """
    out: Dict = {p.label: {n: {"runs": [], "waits": [], "boundaries": []} for n in p.names} for p in phases}
    monitors = {p.label: {n: _monitor(config) for n in p.names} for p in phases}
    for r in range(config.repeats):
        for phase in phases:
            for name in phase.names:
                with fresh_stream(name, config, source, kept_batch) as stream:
                    phase.warm(stream)
                    with monitors[phase.label][name]:
                        rate, wait = phase.timed(stream)
                    entry = out[phase.label][name]
                    entry["runs"].append(rate)
                    entry["waits"].append(wait)
                    entry["boundaries"].extend(stream.boundaries)
                logger.debug("[%s %d/%d] %-12s %8.1f images/s", phase.label, r + 1, config.repeats, name, rate)
                if progress is not None:
                    progress.update(1)
    for phase in phases:
        for name in phase.names:
            out[phase.label][name]["resources"] = monitors[phase.label][name].summary()
    return out


def _monitor(config: BenchConfig) -> ResourceMonitor:
    return ResourceMonitor(gpu_index=config.device.index if config.device.type == "cuda" else None)


def phases_of(config: BenchConfig, train_step=None) -> List[Phase]:
    """The loader-alone phase and, when measured, the training phase (the ceiling included)."""
    sync = _sync_for(config.device)
    names = list(config.backends)
    phases = [Phase("loader", names, lambda s: (measure.time_loader(s, config.steps, sync), None),
                    lambda s: measure.warm_up(s, config.warmup, sync=sync))]
    if train_step is not None:
        phases.append(Phase("train", [CEILING] + names,
                            lambda s: measure.time_training(s, train_step, config.train_steps, sync),
                            lambda s: measure.warm_up(s, config.train_warmup, train_step, sync)))
    return phases


def run(config: BenchConfig, progress=None) -> Dict:
    """Measures every backend; returns the figures (see :mod:`gpupipe.bench.report`)."""
    source = gpupipe.sources.as_source(config.data)
    num_classes = len(source.classes)
    train_step, kept = None, None
    if config.measure_training:
        train_step = make_train_step(config, num_classes)
        shape = (config.batch_size, 3, config.image_size, config.image_size)
        kept = (torch.randn(shape, device=config.device).contiguous(memory_format=torch.channels_last),
                torch.randint(0, num_classes, (config.batch_size,), device=config.device))
    measured = interleaved(phases_of(config, train_step), config, source, kept, progress)
    return summarise(measured, config)


def rounds(config: BenchConfig) -> int:
    """Timed rounds the bench runs (one per loop, phase and repeat)."""
    loops = len(config.backends) + ((1 + len(config.backends)) if config.measure_training else 0)
    return loops * config.repeats


def summarise(measured: Dict, config: BenchConfig) -> Dict:
    """Medians, spreads, ratios to the baseline, fractions of the ceiling and verdicts."""
    results: Dict = {name: {} for name in config.backends}
    for name in config.backends:
        loader = measured["loader"][name]
        results[name]["loader"] = _figures(measure.Result.of(loader["runs"]), loader["boundaries"])
        results[name]["loader_resources"] = loader["resources"]
    figures: Dict = {"results": results}
    if "train" in measured:
        top = measure.Result.of(measured["train"][CEILING]["runs"])
        figures["ceiling"] = {**_figures(top), "resources": measured["train"][CEILING]["resources"]}
        for name in config.backends:
            entry = measured["train"][name]
            train = measure.Result.of(entry["runs"], entry["waits"])
            v = measure.verdict(train, top, backend=name, on_gpu=config.device.type == "cuda", threads=config.threads)
            results[name]["train"] = {
                **_figures(train),
                "wait_share": round(train.wait_share, 3),
                "wait_shares": [round(x, 3) for x in train.wait_shares],
                "fraction_of_ceiling": round(v.fraction_of_ceiling, 3),
            }
            results[name]["train_resources"] = entry["resources"]
            results[name]["verdict"] = {"bound": v.bound, "suggestion": v.suggestion}
    _add_speedups(results)
    return figures


def _figures(result: measure.Result, boundaries: Optional[List[float]] = None) -> Dict:
    out = {"images_per_s": round(result.images_per_s, 1), "min": round(result.low, 1),
           "max": round(result.high, 1), "spread": round(result.spread, 3), "runs": [round(v, 1) for v in result.runs]}
    if boundaries:
        out["epoch_boundary_s"] = round(sorted(boundaries)[len(boundaries) // 2], 4)
    return out


def _add_speedups(results: Dict[str, Dict]) -> None:
    """Adds each backend's ratio to the baseline, measured in the same run."""
    base = results.get(BASELINE)
    if not base:
        return
    for entry in results.values():
        entry["loader"]["x_baseline"] = round(entry["loader"]["images_per_s"] / base["loader"]["images_per_s"], 2)
        if "train" in entry:
            entry["train"]["x_baseline"] = round(entry["train"]["images_per_s"] / base["train"]["images_per_s"], 2)
