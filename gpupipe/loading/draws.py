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
from ..errors import Error, plural, short_repr
from ..plan.seeding import order_generator

#: The most categories ``torch.multinomial`` draws from.
MAX_CATEGORIES = 2**24
#: The most draws an epoch holds (its order is held in memory, 8 bytes a draw: 8 GiB).
MAX_DRAWS = 2**30


@dataclass(frozen=True, eq=False)
class Draws:
    """How each epoch's samples are drawn.

    Attributes:
        weights: ``(N,)`` float64, one per sample of the source (not normalised: relative weights).
        num_samples: samples drawn per epoch (all ranks together).
        replacement: draw with replacement (a sample may come several times in an epoch).
        given: ``num_samples`` was given; else it is the source's samples, and a subset's are its own.
    """

    weights: np.ndarray
    num_samples: int
    replacement: bool = True
    given: bool = True

    @classmethod
    def checked(cls, weights: Any, num_samples: Any, replacement: Any, samples: int) -> Draws:
        """Draws over a source of ``samples`` samples, every argument checked.

        Args:
            weights: a sequence or 1-D tensor/array of ``samples`` real, finite numbers >= 0, not all 0, whose
                sum is finite; at most ``MAX_CATEGORIES`` of them (``torch.multinomial``'s limit).
            num_samples: samples per epoch, at most ``MAX_DRAWS``; ``None``: ``samples``.
            replacement: a bool.

        Raises:
            ValueError: naming the argument that is wrong and why.
        """
        try:
            values = np.asarray(_as_numbers(weights), dtype=np.float64)
        except _Complex:
            raise ValueError(f"weights must be real numbers, got complex ones: {short_repr(weights, 60)}") from None
        except (TypeError, ValueError):
            raise ValueError(f"weights must be numbers, one per sample, got {short_repr(weights, 60)}") from None
        if values.ndim != 1 or len(values) != samples:
            raise ValueError(f"weights must hold one number per sample ({samples:,}), got shape {values.shape}")
        if not np.isfinite(values).all() or (values < 0).any():
            bad = int(np.flatnonzero(~np.isfinite(values) | (values < 0))[0])
            raise ValueError(f"weights must be finite and >= 0: weights[{bad}] is {values[bad]}")
        with np.errstate(over="ignore"):
            total = values.sum()
        if not np.isfinite(total):
            raise ValueError(
                f"weights sum to inf ({values.max():.3g} the largest): torch.multinomial would draw one sample every "
                "time; the weights are relative, so scale them down"
            )
        if samples > MAX_CATEGORIES:
            raise ValueError(
                f"weights over {samples:,} samples: torch.multinomial draws from at most 2**24 "
                f"({MAX_CATEGORIES:,}) categories, as torch's WeightedRandomSampler does; draw over fewer samples "
                "(a subset, or groups of samples)"
            )
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement must be a bool, got {replacement!r}")
        drawn = samples if num_samples is None else positive_int("num_samples", num_samples, 1, MAX_DRAWS)
        nonzero = int(np.count_nonzero(values))
        if nonzero == 0:
            raise ValueError("weights are all 0: no sample can be drawn")
        if not replacement and drawn > nonzero:
            raise ValueError(
                f"num_samples={drawn:,} without replacement needs as many samples of weight > 0; {nonzero:,} have one"
            )
        return cls(values, drawn, replacement, num_samples is not None)

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """``(num_samples,)`` int64: epoch ``epoch``'s draws (all ranks), from ``(seed, epoch)`` alone."""
        import torch

        generator = order_generator(seed, epoch)
        weights = torch.from_numpy(self.weights)
        return torch.multinomial(weights, self.num_samples, self.replacement, generator=generator).numpy()

    def subset(self, keep: np.ndarray, names: Sequence[str] = ()) -> Draws:
        """The draws over the samples at ``keep`` (their weights; bad files left out): ``num_samples`` as given,
        else the samples kept.

        Args:
            keep: the samples kept.
            names: every sample's name (messages name the samples left out).

        Raises:
            ValueError: what is left cannot give the draws (all weights 0, too few without replacement), naming
                the samples left out.
        """
        keep = np.asarray(keep, np.int64)
        try:
            return Draws.checked(
                self.weights[keep], self.num_samples if self.given else None, self.replacement, len(keep)
            )
        except ValueError as err:
            out = np.setdiff1d(np.arange(len(self.weights)), keep)
            shown = ", ".join(str(names[i]) for i in out[:3]) + (", ..." if len(out) > 3 else "") if names else ""
            raise ValueError(
                f"{err}, once the {plural(len(out), 'bad file')} {'was' if len(out) == 1 else 'were'} left out "
                f"({shown or 'on_error=skip'})"
            ) from None

    def digest(self) -> str:
        """What a resumed loader must draw by: the weights, ``num_samples`` and ``replacement``."""
        h = hashlib.sha256(self.weights.tobytes())
        h.update(f"{self.num_samples}:{self.replacement}".encode())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        kind = "with" if self.replacement else "without"
        return f"Draws({self.num_samples:,} of {len(self.weights):,} samples {kind} replacement)"


class _Complex(Error, TypeError):
    """Complex weights (numpy and torch would keep their real part, with a warning at most)."""


def _as_numbers(weights: Any) -> Sequence[float] | np.ndarray:
    """``weights`` as something numpy reads as real numbers (a tensor's values, on the CPU).

    Raises:
        TypeError: not numbers; ``_Complex``: complex ones.
    """
    if hasattr(weights, "detach") and hasattr(weights, "cpu"):  # a torch tensor
        if weights.is_complex():
            raise _Complex
        return weights.detach().cpu().double().numpy()
    if isinstance(weights, (str, bytes)) or isinstance(weights, bool):
        raise TypeError("not numbers")
    if isinstance(weights, np.ndarray):
        if np.issubdtype(weights.dtype, np.complexfloating):
            raise _Complex
        if not (np.issubdtype(weights.dtype, np.number) or weights.dtype == np.bool_):
            raise TypeError("not numbers")
    return weights


def epoch_samples(source: Any) -> int:
    """Samples an epoch of ``source`` holds (all ranks): its draws' ``num_samples``, else its length."""
    draws = getattr(source, "draws", None)
    return draws.num_samples if draws is not None else len(source)


__all__ = ["Draws", "epoch_samples"]
