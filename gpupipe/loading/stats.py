"""Is the input pipeline the bottleneck? Measured inside the user's own training loop.

The loader times, for every batch, how long the consumer waited for it
(inside ``next()``) and how long the consumer spent between batches (its
own work: the training step). The share of wall time spent waiting says
whether training is input-bound, as the bench's verdict does. The cost is
two ``perf_counter`` calls per batch. The suggestion knows the source: a
pack made with ``--max-size`` is not told to pre-resize, and a remote pack
whose cache downloaded shards during the batches measured is said to be
waiting on the network, with the cache's figures.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..errors import plural

logger = logging.getLogger("gpupipe.stats")

#: A loop is input-bound when it waits at least this share of its time for data.
WAIT_SHARE_INPUT_BOUND = 0.10
#: Batches before a verdict is given (the first ones include start-up).
MIN_BATCHES_FOR_VERDICT = 5


@dataclass
class StatsSummary:
    """What ``Loader.stats`` returns.

    Attributes:
        batches, images: delivered since the last reset.
        wait_s: seconds the consumer spent waiting inside ``next()``.
        busy_s: seconds the consumer spent between batches (its own work).
        images_per_s: images over (wait + busy).
        wait_share: wait / (wait + busy).
        verdict: ``"input-bound"``, ``"compute-bound"`` or ``"not enough batches yet"``.
        suggestion: what to try when input-bound.
        dropped: samples that failed to load and were left out of their batch (``even_batches=False``).
    """

    batches: int
    images: int
    wait_s: float
    busy_s: float
    images_per_s: float
    wait_share: float
    verdict: str
    suggestion: str
    dropped: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def __str__(self) -> str:
        return (
            f"{plural(self.batches, 'batch', 'batches')}, {rate_text(self.images_per_s)} images/s, waiting for data "
            f"{100 * self.wait_share:.0f}% of the time: {self.verdict}"
            + (f" ({self.suggestion})" if self.suggestion else "")
            + (f"; {plural(self.dropped, 'sample')} that failed to load left out" if self.dropped else "")
        )


def rate_text(value: float) -> str:
    """A rate that never reads 0 for a slow loop: ``123``, ``4.5``, ``0.41``."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2g}"


class LoadStats:
    """Accumulates wait and busy times per batch; optionally logs a line every ``log_every`` batches.

    Args:
        backend: the loader's backend (for the suggestion).
        on_gpu: whether batches land on a GPU.
        log_every: batches between INFO log lines (logger ``gpupipe.stats``); ``None``: never.
        clock: the time source (a fake in tests).
        source: the loader's source, asked (if it can tell) whether its images were packed pre-resized
            (``packed_max_size``) and what its remote tars' cache downloaded (``fetched_since``).
    """

    def __init__(
        self, backend: str, on_gpu: bool, log_every: int | None = None, clock=time.perf_counter, source=None
    ) -> None:
        self.backend = backend
        self.on_gpu = on_gpu
        self.log_every = log_every
        self.clock = clock
        self.source = source
        self.reset()

    def reset(self) -> None:
        self.since = time.time()  # wall time, as the cache records its downloads
        self.batches = self.images = 0
        self.wait_s = self.busy_s = 0.0
        self._handed_out: float | None = None

    def pass_started(self) -> None:
        """A new pass: the time since the last batch of the previous one is not the consumer's step."""
        self._handed_out = None

    def asking(self) -> float:
        """The consumer asks for the next batch; returns the time."""
        now = self.clock()
        if self._handed_out is not None:
            self.busy_s += now - self._handed_out
        return now

    def delivered(self, asked_at: float, images: int) -> None:
        """The batch asked for at ``asked_at`` is handed out."""
        now = self.clock()
        self.wait_s += now - asked_at
        self._handed_out = now
        self.batches += 1
        self.images += images
        if self.log_every and self.batches % self.log_every == 0 and logger.isEnabledFor(logging.INFO):
            logger.info("gpupipe: %s", self.summary())  # the summary may read the cache's records: only when shown

    def summary(self) -> StatsSummary:
        total = self.wait_s + self.busy_s
        share = self.wait_s / total if total > 0 else 0.0
        if self.batches < MIN_BATCHES_FOR_VERDICT:
            verdict, suggestion = "not enough batches yet", ""
        elif share >= WAIT_SHARE_INPUT_BOUND:
            verdict, suggestion = "input-bound", self._suggestion()
        else:
            verdict, suggestion = "compute-bound", ""
        return StatsSummary(
            batches=self.batches,
            images=self.images,
            wait_s=self.wait_s,
            busy_s=self.busy_s,
            images_per_s=self.images / total if total > 0 else 0.0,
            wait_share=share,
            verdict=verdict,
            suggestion=suggestion,
        )

    def _suggestion(self) -> str:
        advice = self._advice()
        network = self._network()
        return f"{network}; if it stays input-bound with a warm cache: {advice}" if network else advice

    def _advice(self) -> str:
        resized = getattr(self.source, "packed_max_size", None)
        if self.on_gpu and self.backend != "dali":
            return "decode and augment on the GPU: backend='dali'"
        if self.on_gpu:
            return "more CPU threads (num_threads)" + (
                "" if resized else ", pre-resized shards (python -m gpupipe.pack --max-size 256)"
            )
        if resized:
            return (
                f"the pack is already pre-resized (--max-size {resized}): train on a GPU with backend='dali', "
                "or give the loader more CPU cores (num_threads)"
            )
        return "pre-resize the images (python -m gpupipe.pack --max-size 256), or train on a GPU with backend='dali'"

    def _network(self) -> str:
        """What the remote source's cache downloaded during the batches measured, if anything."""
        fetched_since = getattr(self.source, "fetched_since", None)
        fetched = fetched_since(self.since) if fetched_since is not None else None
        if not fetched or not fetched.files:
            return ""
        return (
            f"the pack is remote and its cache downloaded {plural(fetched.files, 'shard')} "
            f"({fetched.bytes / 2**20:.1f} MiB in {fetched.seconds:.1f} s) during these batches: they may be "
            "waiting on the network (a warm cache reads as fast as a local pack; keep cache_limit above the "
            "pack's size)"
        )
