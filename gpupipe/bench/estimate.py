"""How long the bench will take: an estimate from this machine's measured speed, revised as it runs.

Before the run, two short measurements stand for the machine: the time to
make one demo image (``time_demo_image``, which also scales the
assumed loader rates) and the training step's time on the kept batch (the
mixed-precision probe's). After the first repeat, the rest is projected
from that repeat's measured time (``revised``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..demo import photos as demo
from .runner import BenchConfig

#: Seconds to make one demo image on the machine the rates below were measured on (2-core Xeon VM).
REFERENCE_DEMO_IMAGE_S = 0.1
#: Loader-alone images/s per CPU core there (the slowest backend; DataLoader workers, DALI threads), or on a GPU.
LOADER_RATE = {"cpu": 250.0, "cuda": 4000.0}
#: The training loop fed by a real loader runs at this share of the ceiling (on a CPU they share the cores).
TRAIN_EFFICIENCY = {"cpu": 0.7, "cuda": 0.9}
#: Seconds to build, warm up and shut down a loader, per timed round (more on a CPU: worker processes).
ROUND_OVERHEAD_S = {"cpu": 1.5, "cuda": 3.0}
#: Start-up after the estimate (model, source) and the report at the end (chart), seconds.
FIXED_S = 8.0


@dataclass(frozen=True)
class Estimate:
    """The parts of an estimate, in seconds."""

    demo: float
    rounds: float
    fixed: float = FIXED_S

    @property
    def total(self) -> float:
        return self.demo + self.rounds + self.fixed


def time_demo_image() -> float:
    """Seconds to make one demo image here (its scene and its JPEG), the best of two."""
    import io

    from PIL import Image

    best = float("inf")
    for i in range(2):
        started = time.perf_counter()
        image = demo.demo_image(np.random.default_rng([1, 2, i]), 0, 10)
        Image.fromarray(image).save(io.BytesIO(), format="JPEG", quality=90)
        best = min(best, time.perf_counter() - started)
    return best


def estimate(
    config: BenchConfig, *, demo_images: int, demo_image_s: float, step_s: float | None, workers: int
) -> Estimate:
    """The bench's duration on this machine.

    Args:
        demo_images: images to generate first (0: the demo set is there already).
        demo_image_s: ``time_demo_image``'s figure.
        step_s: seconds per training step on the kept batch (``None``: no training measured).
        workers: processes generating the demo set.
    """
    kind = config.device.type
    speed = REFERENCE_DEMO_IMAGE_S / max(demo_image_s, 1e-3)
    loader_rate = LOADER_RATE[kind] * (config.threads * speed if kind == "cpu" else 1.0)
    backends = len(config.backends)
    per_repeat = backends * ((config.warmup + config.steps) * config.batch_size / loader_rate + ROUND_OVERHEAD_S[kind])
    if config.measure_training and step_s is not None:
        steps = config.train_warmup + config.train_steps
        per_repeat += steps * step_s + ROUND_OVERHEAD_S[kind] / 2  # the ceiling: no loader to build
        per_repeat += backends * (steps * step_s / TRAIN_EFFICIENCY[kind] + ROUND_OVERHEAD_S[kind])
    generate = demo_image_s * demo_images / max(1, min(workers, demo_images)) if demo_images else 0.0
    return Estimate(demo=generate, rounds=config.repeats * per_repeat)


def revised(config: BenchConfig, repeats_done: int, seconds_so_far: float) -> float:
    """Seconds left, projected from the repeats measured so far (each repeat runs the same rounds)."""
    return (config.repeats - repeats_done) * seconds_so_far / max(1, repeats_done) + FIXED_S / 2


def duration(seconds: float) -> str:
    """``"about 45 s"`` under two minutes, ``"about 3.5 min"`` above; never "about 0 minutes"."""
    if seconds < 120:
        return f"about {max(5, 5 * round(seconds / 5))} s"
    return f"about {round(seconds / 30) / 2:g} min"
