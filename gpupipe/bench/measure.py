"""Timing: loader alone, the training loop (with its data-wait share), the ceiling, and the spread.

Everything here takes plain iterators and callables, so the same code
measures every backend (and the ceiling, fed by ``repeat_batch``) and
is tested with fakes that sleep. The runner calls one repeat at a time,
interleaving backends, so that drift on a noisy machine hits all alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from ..errors import plural
from ..loading.stats import WAIT_SHARE_INPUT_BOUND

Batch = tuple[torch.Tensor, torch.Tensor]

#: ...or when it reaches less than this fraction of the ceiling.
CEILING_FRACTION_COMPUTE_BOUND = 0.90
#: A figure whose repeats spread more than this (max - min over the median) is unreliable.
SPREAD_WARNING = 0.20


class Stream:
    """Batches across epoch boundaries, as a training run sees them, noting each boundary's cost.

    Attributes:
        boundaries: seconds ``next()`` took for the first batch of each epoch after the first.
        epochs: epochs started.
        yielded: batches handed out.
    """

    def __init__(self, loader: Iterable[Batch], clock=time.perf_counter, stop=None) -> None:
        self.loader = loader
        self.stop = stop  # a ``ctrlc.CtrlC``: checked before each batch
        self.clock = clock
        self.boundaries: list[float] = []
        self.epochs = 0
        self.yielded = 0
        self._iterator: Iterator[Batch] | None = None

    @property
    def batches_per_epoch(self) -> int | None:
        """``len(loader)``, where the loader has one."""
        try:
            return len(self.loader)  # type: ignore[arg-type]
        except TypeError:
            return None

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Batch:
        if self.stop is not None:
            self.stop.check()
        if self._iterator is not None:
            try:
                batch = next(self._iterator)
                self.yielded += 1
                return batch
            except StopIteration:
                self._iterator = None
        started = self.clock()
        self._iterator = iter(self.loader)
        self.epochs += 1
        try:
            batch = next(self._iterator)
        except StopIteration:
            raise ValueError("the loader yielded no batch") from None
        if self.epochs > 1:
            self.boundaries.append(self.clock() - started)
        self.yielded += 1
        return batch

    def close(self) -> None:
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()
        self._iterator = None


def forever(loader: Iterable[Batch], stop=None) -> Stream:
    """Yields batches across epoch boundaries (see ``Stream``); ``stop``: a ``ctrlc.CtrlC`` checked before each."""
    return Stream(loader, stop=stop)


@dataclass
class Result:
    """Medians over repeats, with the spread.

    Attributes:
        images_per_s: median images per second.
        wait_share: median share of step time spent waiting for the next batch (train loops only).
        runs: images/s of each repeat.
        wait_shares: the wait share of each repeat (train loops only).
    """

    images_per_s: float
    wait_share: float | None = None
    runs: list[float] = field(default_factory=list)
    wait_shares: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, runs: list[float], wait_shares: list[float] | None = None) -> Result:
        shares = list(wait_shares or [])
        return cls(
            images_per_s=statistics.median(runs),
            wait_share=statistics.median(shares) if shares else None,
            runs=list(runs),
            wait_shares=shares,
        )

    @property
    def low(self) -> float:
        return min(self.runs)

    @property
    def high(self) -> float:
        return max(self.runs)

    @property
    def spread(self) -> float:
        """``(max - min) / median`` of the repeats."""
        return (self.high - self.low) / self.images_per_s if self.images_per_s else 0.0


#: The fewest batches a loader-alone repeat times when it shortens its window to fit in one epoch.
MIN_WINDOW = 5


def loader_window(steps: int, warmup: int, per_epoch: int | None) -> int:
    """Batches to time in a loader-alone repeat that starts at an epoch's first batch.

    Warm-up and timing fit in one epoch where the epoch holds at least
    ``warmup + MIN_WINDOW`` batches: an epoch boundary inside the window
    would count the next epoch's start-up (the loader's and its workers')
    as loading time, which a long training epoch spreads over thousands of
    batches. The boundaries are measured on their own (``epoch_boundary_s``).
    """
    if per_epoch is None or warmup + steps <= per_epoch or per_epoch - warmup < MIN_WINDOW:
        return steps
    return per_epoch - warmup


def warm_up(batches: Iterator[Batch], count: int, train_step: Callable | None = None, sync=lambda: None) -> None:
    """Consumes ``count`` batches (through ``train_step`` when given) before timing."""
    for _ in range(count):
        batch = next(batches)
        if train_step is not None:
            train_step(*batch)
    sync()


def time_loader(batches: Iterator[Batch], steps: int, sync: Callable[[], None] = lambda: None) -> float:
    """One repeat of the loader alone: images/s over ``steps`` batches.

    Args:
        batches: an endless batch iterator (see ``forever``).
        sync: waits for the device (``torch.cuda.synchronize``) so that
            asynchronous GPU work is counted.
    """
    images = 0
    start = time.perf_counter()
    for _ in range(steps):
        images += int(next(batches)[0].shape[0])
    sync()
    return images / (time.perf_counter() - start)


def time_training(
    batches: Iterator[Batch],
    train_step: Callable[[torch.Tensor, torch.Tensor], None],
    steps: int,
    sync: Callable[[], None] = lambda: None,
) -> tuple[float, float]:
    """One repeat of the training loop: ``(images/s, share of time waiting for data)``.

    The wait is the time ``next(batches)`` takes; each step ends when the
    device has finished (``sync``), so waiting and computing add up to the
    wall time.
    """
    images, waited = 0, 0.0
    start = time.perf_counter()
    for _ in range(steps):
        before = time.perf_counter()
        batch = next(batches)
        waited += time.perf_counter() - before
        train_step(*batch)
        sync()
        images += int(batch[0].shape[0])
    elapsed = time.perf_counter() - start
    return images / elapsed, waited / elapsed


def repeat_batch(batch: Batch) -> Iterator[Batch]:
    """The ceiling's "loader": one batch kept on the device, forever."""
    while True:
        yield batch


@dataclass(frozen=True)
class Verdict:
    """What limits a backend's training loop, and what to try."""

    bound: str  # "input-bound" or "compute-bound"
    fraction_of_ceiling: float
    suggestion: str


def verdict(train: Result, ceiling_result: Result, *, backend: str, on_gpu: bool, threads: int) -> Verdict:
    """Classifies a training run against the ceiling.

    Input-bound: the step waits >= 10 % of its time for data, or reaches
    < 90 % of the ceiling (on a CPU, loading then steals the model's cores).
    """
    fraction = train.images_per_s / ceiling_result.images_per_s if ceiling_result.images_per_s else 0.0
    input_bound = (train.wait_share or 0.0) >= WAIT_SHARE_INPUT_BOUND or fraction < CEILING_FRACTION_COMPUTE_BOUND
    if not input_bound:
        return Verdict("compute-bound", fraction, "")
    return Verdict("input-bound", fraction, advice(backend, on_gpu, threads))


#: On a CPU, loading is short of cores where the training loop kept at least this share of them busy.
CPU_SHARE_BUSY = 0.75


def advice(
    backend: str,
    on_gpu: bool,
    threads: int,
    resize: int = 256,
    small: int | None = None,
    cpu_share: float | None = None,
) -> str:
    """What to try for an input-bound ``backend`` (``""``: advice that names no backend).

    Args:
        resize: the shorter side to pre-resize the images to (~256 px for ImageNet's 224 px crop).
        small: the data's largest shorter side, where it is ``resize`` or less: pre-resizing would shrink no
            image, so it is not advised (``None``: not known, or larger).
        cpu_share: on a CPU, the share of the ``threads`` cores the training loop's process tree kept busy
            (its measured CPU time over the wall time; ``None``: not measured, e.g. an older ``bench.json``).
            Under ``CPU_SHARE_BUSY`` the cores are not what holds loading back, and the advice says so.
    """
    if backend in ("baseline", "torchvision") and on_gpu:
        return "decode and augment on the GPU: backend='dali'"
    if backend == "baseline":
        return "use gpupipe's dali-cpu backend (fused ROI decode, no PIL)"
    if backend == "dali-cpu" and on_gpu:
        return "move decoding to the GPU: backend='dali'"
    dali = " with backend='dali'" if backend else ""
    shared = f"loading and the model share the same {plural(threads, 'CPU core')}"
    if not on_gpu and cpu_share is not None:
        only = "" if cpu_share >= CPU_SHARE_BUSY else "only "
        shared += f", which the training loop kept {only}{100 * cpu_share:.0f}% busy (measured CPU time)"
        if only:
            return (
                f"{shared}: the cores are not what holds it back; look at the data's storage (a slow or network "
                f"disk) and the loader's workers, or train on a GPU{dali}"
            )
    if not on_gpu and small is not None:
        return (
            f"{shared}, and the images are already small (shorter sides up to {small} px, pre-resizing would not "
            f"shrink them): train on a GPU{dali}"
        )
    if not on_gpu:
        return f"{shared}: pre-resize the images (shorter side ~{resize} px) or train on a GPU{dali}"
    if small is not None:
        return (
            f"more CPU threads than {threads} (--threads); the images"
            f" are already small (shorter sides up to {small} px)"
        )
    return f"more CPU threads than {threads} (--threads), or pre-resized images (shorter side ~{resize} px)"
