"""Runs the bench: every backend feeds the same AMP training loop, measured side by side.

One loop measures everything (``interleaved``): for each repeat, each
phase (loader alone, then training, whose ceiling runs in the same rounds)
and each backend (in a new order each repeat, so that none always
follows the same one), it waits until the previous loader's worker
processes are gone, builds a fresh loader, warms it up, times it under the
resource monitor, and shuts it down. A loader-alone repeat times the same
batches a plain loop would: after ``warmup`` batches, ``steps`` batches,
within the first epoch where it is long enough (``measure.loader_window``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

import gpupipe
from gpupipe.amp import AmpChoice, choose_amp

from . import measure
from .advice import BASELINE
from .baseline import HEAVY, pipeline_of, tutorial_loader  # noqa: F401 -- HEAVY and pipeline_of: part of this API
from .ctrlc import CtrlC, noting
from .monitor import ResourceMonitor
from .summary import CEILING, summarise

logger = logging.getLogger(__name__)

#: Seconds to wait for a finished loader's worker processes to exit before the next round starts.
LEFTOVER_WAIT_S = 10.0


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one bench run (see ``python -m gpupipe.bench --help``)."""

    data: Path | str  # a folder, a pack, or the URL of a pack
    backends: tuple[str, ...]
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


def make_loader(backend: str, config: BenchConfig, source: gpupipe.sources.Source) -> Iterable:
    """The backend's loader for the train preset (``baseline``: the tutorial DataLoader).

    ``source`` is listed and scanned once per bench, not once per repeat.
    """
    if backend == BASELINE:
        return tutorial_loader(config, source)
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


class TrainStep:
    """One SGD step of a torchvision model, channels_last, under the chosen autocast (GradScaler for fp16).

    Attributes:
        amp: the precision of ``__call__`` (set it with ``use``).
    """

    def __init__(self, config: BenchConfig, num_classes: int) -> None:
        import torchvision

        self.device = config.device
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed shapes: pick the fastest kernels once
        model = torchvision.models.get_model(config.model, num_classes=num_classes)
        self.model = model.to(self.device, memory_format=torch.channels_last).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.use(AmpChoice("off", "float32 until chosen"))

    def use(self, amp: AmpChoice) -> None:
        self.amp = amp
        self.scaler = torch.amp.GradScaler(self.device.type) if amp.needs_scaler else None

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.run(images, labels, self.amp.dtype)

    def run(self, images: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype) -> None:
        """One step autocast to ``dtype`` (``torch.float32``: none); the probe calls it with each dtype.
        Without autocast a half-precision batch (``--dtype float16``) is cast to float32, as a float32 script
        must: the model's weights are float32."""
        images = images.to(self.device, non_blocking=True, memory_format=torch.channels_last)
        if dtype == torch.float32 and images.dtype != torch.float32:
            images = images.float()
        labels = labels.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        scaler = self.scaler if dtype == torch.float16 else None
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()
        else:
            loss.backward()
            self.optimizer.step()


def kept_batch(config: BenchConfig, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ceiling's batch: random images and labels, kept on the device."""
    shape = (config.batch_size, 3, config.image_size, config.image_size)
    return (
        torch.randn(shape, device=config.device).contiguous(memory_format=torch.channels_last),
        torch.randint(0, num_classes, (config.batch_size,), device=config.device),
    )


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
def fresh_stream(name: str, config: BenchConfig, source, kept_batch=None, stop=None) -> Iterator[measure.Stream]:
    """An endless batch stream from a new loader (or the kept batch), shut down afterwards.

    A loader left alive would refill its prefetch queue in the background,
    taking CPU from the next backend's measurement and starting its own next
    repeat with free batches.
    """
    loader = measure.repeat_batch(kept_batch) if name == CEILING else make_loader(name, config, source)
    stream = measure.forever(loader, stop)
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
    names: list[str]
    timed: Callable[[measure.Stream], tuple[float, float | None]]
    warm: Callable[[measure.Stream], None]


def interleaved(
    phases: list[Phase],
    config: BenchConfig,
    source,
    kept_batch,
    progress=None,
    on_repeat: Callable[[int], None] | None = None,
) -> dict:
    """Times every loop of every phase ``config.repeats`` times, interleaving loops within each repeat.

    A backend whose round raises is measured no further and left out of the figures, with its reason
    (the ceiling's failure, the model's, ends the bench). Ctrl-C (``KeyboardInterrupt``) ends the
    rounds: the repeats every loop finished are kept, the one under way is dropped.

    Args:
        on_repeat: called with the number of repeats done after each one.

    Returns:
        ``{phase label: {name: {"runs", "waits", "boundaries", "batches", "resources"}}}``; ``batches``
        holds, per repeat, the batches warmed up and timed, the epoch boundaries inside the timed
        window, and the worker processes of earlier loaders still alive when timing began; with
        ``"failed"`` (``{backend: reason}``) and, after Ctrl-C, ``"interrupted"``
        (``{"repeats_done", "repeats_planned"}``).

    Raises:
        KeyboardInterrupt: Ctrl-C before the first repeat ended.
    """
    out: dict = {
        p.label: {n: {"runs": [], "waits": [], "boundaries": [], "batches": []} for n in p.names} for p in phases
    }
    monitors = {p.label: {n: _monitor(config) for n in p.names} for p in phases}
    failed: dict[str, str] = {}
    before = _children()
    done = 0
    ctrl_c = CtrlC()
    try:
        with noting(ctrl_c):
            for r in range(config.repeats):
                for phase in phases:
                    for name in rotated(phase.names, r):
                        if name in failed:
                            continue
                        try:
                            _one_round(phase, name, r, config, source, kept_batch, before, out, monitors, ctrl_c)
                        except Exception as err:  # noqa: BLE001 -- any backend's failure is reported, not fatal
                            # Ctrl-C also stops a DataLoader's workers: their loss is the interrupt, not a failure
                            if ctrl_c.pressed or name == CEILING or os.environ.get("GPUPIPE_DEBUG") == "1":
                                raise
                            failed[name] = f"{PHASE_NAMES[phase.label]}, repeat {r + 1}: {_reason(err)}"
                            logger.warning("backend %s failed (%s): measured no further", name, failed[name])
                        ctrl_c.check()  # pressed while the round's loader shut down
                        if progress is not None:
                            progress.update(1)
                done = r + 1
                if on_repeat is not None:
                    on_repeat(done)
    except (Exception, KeyboardInterrupt) as err:
        if isinstance(err, Exception) and not ctrl_c.pressed:
            raise
        if not done:
            raise KeyboardInterrupt from None
        out["interrupted"] = {"repeats_done": done, "repeats_planned": config.repeats}
        logger.warning("interrupted (Ctrl-C) after %d of %d repeats: reporting those", done, config.repeats)
    for phase in phases:
        for name in phase.names:
            entry = out[phase.label][name]
            for key in ("runs", "waits", "batches", "boundaries"):
                del entry[key][done:]
            entry["boundaries"] = [b for per_repeat in entry["boundaries"] for b in per_repeat]
            entry["resources"] = monitors[phase.label][name].summary()
            if name in failed:
                del out[phase.label][name]
    out["failed"] = failed
    return out


#: How a phase is named in a failed backend's reason.
PHASE_NAMES = {"loader": "loader alone", "train": "training loop"}


def _reason(err: BaseException) -> str:
    """``Type: message``, the message as the command line prints it (a worker's own, without its traceback)."""
    from ..cli import message

    lines = message(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _one_round(
    phase: Phase, name: str, r: int, config: BenchConfig, source, kept_batch, before, out, monitors, ctrl_c=None
):
    """Builds ``name``'s loader, warms it up and times one repeat of ``phase``, appending to ``out``."""
    leftover = wait_for_children(before)
    with fresh_stream(name, config, source, kept_batch, stop=ctrl_c) as stream:
        phase.warm(stream)
        warmed, epochs = stream.yielded, stream.epochs
        with monitors[phase.label][name]:
            rate, wait = phase.timed(stream)
        entry = out[phase.label][name]
        entry["runs"].append(rate)
        entry["waits"].append(wait)
        entry["boundaries"].append(list(stream.boundaries))
        entry["batches"].append(
            {
                "warmup": warmed,
                "timed": stream.yielded - warmed,
                "boundaries_timed": stream.epochs - epochs,
                "leftover_processes": leftover,
            }
        )
    logger.debug("[%s %d/%d] %-12s %8.1f images/s", phase.label, r + 1, config.repeats, name, rate)


def rotated(names: list[str], repeat: int) -> list[str]:
    """``names`` in a new order for each repeat after the first (seeded by ``repeat``), so that no loop
    always runs right after the same one (say, one whose workers take long to exit)."""
    order = list(names)
    if repeat:
        random.Random(repeat).shuffle(order)
    return order


def _children() -> set:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _running(psutil, pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for_children(before: set, timeout: float = LEFTOVER_WAIT_S) -> int:
    """Waits until the child processes not in ``before`` (an earlier loader's workers) have exited.

    Returns:
        how many were still alive after ``timeout`` seconds (0 normally).
    """
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        extra = [pid for pid in _children() - before if _running(psutil, pid)]
        if not extra or time.monotonic() >= deadline:
            if extra:
                logger.warning(
                    "%d worker processes of an earlier loader are still running; the next figure may be low", len(extra)
                )
            return len(extra)
        time.sleep(0.05)


def _monitor(config: BenchConfig) -> ResourceMonitor:
    return ResourceMonitor(gpu_index=config.device.index if config.device.type == "cuda" else None)


def phases_of(config: BenchConfig, train_step=None) -> list[Phase]:
    """The loader-alone phase and, when measured, the training phase (the ceiling included)."""
    sync = _sync_for(config.device)
    names = list(config.backends)

    def timed(stream: measure.Stream) -> tuple[float, None]:
        window = measure.loader_window(config.steps, config.warmup, stream.batches_per_epoch)
        return measure.time_loader(stream, window, sync), None

    phases = [Phase("loader", names, timed, lambda s: measure.warm_up(s, config.warmup, sync=sync))]
    if train_step is not None:
        phases.append(
            Phase(
                "train",
                [CEILING] + names,
                lambda s: measure.time_training(s, train_step, config.train_steps, sync),
                lambda s: measure.warm_up(s, config.train_warmup, train_step, sync),
            )
        )
    return phases


def run(
    config: BenchConfig,
    progress=None,
    train_step: TrainStep | None = None,
    kept=None,
    on_repeat: Callable[[int], None] | None = None,
) -> dict:
    """Measures every backend; returns the figures (see ``gpupipe.bench.report``).

    ``train_step`` and ``kept`` (the ceiling's batch) are made here when not given (autocast as
    ``config.amp`` asks, ``auto`` included).
    """
    source = gpupipe.sources.as_source(config.data)
    if config.measure_training and train_step is None:
        train_step, kept = TrainStep(config, len(source.classes)), kept_batch(config, len(source.classes))
        train_step.use(choose_amp(config.device, config.amp))
    measured = interleaved(
        phases_of(config, train_step if config.measure_training else None), config, source, kept, progress, on_repeat
    )
    return summarise(measured, config)


def rounds(config: BenchConfig) -> int:
    """Timed rounds the bench runs (one per loop, phase and repeat)."""
    loops = len(config.backends) + ((1 + len(config.backends)) if config.measure_training else 0)
    return loops * config.repeats
