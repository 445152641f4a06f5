"""Epochs drawn by weight: torch's ``WeightedRandomSampler`` (and ``RandomSampler(replacement=True)``).

An epoch's order is ``num_samples`` sample indices drawn with ``torch.multinomial`` from the
per-sample weights (with replacement by default, so a sample may come several times and another not at
all), from a generator seeded by ``(seed, epoch)`` alone, as a shuffled epoch's permutation is: every
backend, rank and resume sees the same draws. The order is then split among the ranks and read as any
other (``gpupipe.loading.sampling``); each slot's augmentations are keyed by its position, so a sample
drawn twice is augmented twice, differently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks import positive_int
from ..plan.seeding import order_generator


@dataclass(frozen=True, eq=False)
class Draws:
    """How each epoch's samples are drawn.

    Attributes:
        weights: ``(N,)`` float64, one per sample of the source (not normalised: relative weights).
        num_samples: samples drawn per epoch (all ranks together).
        replacement: draw with replacement (a sample may come several times in an epoch).
    """

    weights: np.ndarray
    num_samples: int
    replacement: bool = True

    @classmethod
    def checked(cls, weights: Any, num_samples: Any, replacement: Any, samples: int) -> Draws:
        """Draws over a source of ``samples`` samples, every argument checked.

        Args:
            weights: a sequence or 1-D tensor/array of ``samples`` finite numbers >= 0, not all 0.
            num_samples: samples per epoch; ``None``: ``samples``.
            replacement: a bool.

        Raises:
            ValueError: naming the argument that is wrong and why.
        """
        try:
            values = np.asarray(_as_numbers(weights), dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"weights must be numbers, one per sample, got {_short(weights)}") from None
        if values.ndim != 1 or len(values) != samples:
            raise ValueError(f"weights must hold one number per sample ({samples:,}), got shape {values.shape}")
        if not np.isfinite(values).all() or (values < 0).any():
            bad = int(np.flatnonzero(~np.isfinite(values) | (values < 0))[0])
            raise ValueError(f"weights must be finite and >= 0: weights[{bad}] is {values[bad]}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement must be a bool, got {replacement!r}")
        drawn = samples if num_samples is None else positive_int("num_samples", num_samples, 1, 2**62)
        nonzero = int(np.count_nonzero(values))
        if nonzero == 0:
            raise ValueError("weights are all 0: no sample can be drawn")
        if not replacement and drawn > nonzero:
            raise ValueError(
                f"num_samples={drawn:,} without replacement needs as many samples of weight > 0; {nonzero:,} have one"
            )
        return cls(values, drawn, replacement)

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """``(num_samples,)`` int64: epoch ``epoch``'s draws (all ranks), from ``(seed, epoch)`` alone."""
        import torch

        generator = order_generator(seed, epoch)
        weights = torch.from_numpy(self.weights)
        return torch.multinomial(weights, self.num_samples, self.replacement, generator=generator).numpy()

    def subset(self, keep: np.ndarray) -> Draws:
        """The draws over the samples at ``keep`` (their weights; bad files left out).

        Raises:
            ValueError: what is left cannot give the draws (all weights 0, too few without replacement).
        """
        return Draws.checked(self.weights[np.asarray(keep, np.int64)], self.num_samples, self.replacement, len(keep))

    def digest(self) -> str:
        """What a resumed loader must draw by: the weights, ``num_samples`` and ``replacement``."""
        h = hashlib.sha256(self.weights.tobytes())
        h.update(f"{self.num_samples}:{self.replacement}".encode())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        kind = "with" if self.replacement else "without"
        return f"Draws({self.num_samples:,} of {len(self.weights):,} samples {kind} replacement)"


def _as_numbers(weights: Any) -> Sequence[float] | np.ndarray:
    """``weights`` as something numpy reads as numbers (a tensor's values, on the CPU)."""
    if hasattr(weights, "detach") and hasattr(weights, "cpu"):  # a torch tensor
        return weights.detach().cpu().double().numpy()
    if isinstance(weights, (str, bytes)) or isinstance(weights, bool):
        raise TypeError("not numbers")
    if isinstance(weights, np.ndarray) and not np.issubdtype(weights.dtype, np.number):
        raise TypeError("not numbers")
    return weights


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def epoch_samples(source: Any) -> int:
    """Samples an epoch of ``source`` holds (all ranks): its draws' ``num_samples``, else its length."""
    draws = getattr(source, "draws", None)
    return draws.num_samples if draws is not None else len(source)


__all__ = ["Draws", "epoch_samples"]
