"""What every backend shares: the slots of a batch, and replacing bad samples (a lowering-table entry,
``Lowering``, lives with the op registry)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import Error, ErrorPolicy, Skipped
from ..loading.sampling import RankShare
from ..sources import Source


def batch_slots(share: RankShare, batch: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, positions)`` of batch ``batch`` of a rank's share (the last may be short)."""
    start = batch * batch_size
    return share.indices[start : start + batch_size], share.positions[start : start + batch_size]


class NoUsableSample(Error, RuntimeError):
    """Every sample of a rank's share failed: there is nothing to fill a batch with."""


class BadSamples:
    """The samples found bad while loading, and the rule that replaces them.

    A batch never shrinks because a file fails to decode: each bad sample is
    replaced by the next sample of the rank's share for the epoch (wrapping
    around) that is not known to be bad. The replacement keeps the slot (so
    its augmentation is drawn from the slot's key), the batch keeps its size,
    and every rank keeps its number of batches.

    Args:
        source: the samples (for names).
        errors: the loader's ``on_error`` policy (``raise`` stops at the first bad sample, naming it).
    """

    def __init__(self, source: Source, errors: ErrorPolicy) -> None:
        self.source = source
        self.errors = errors
        self.known: set[int] = set()

    def report(self, failures: Iterable[tuple[int, str]]) -> None:
        """Records samples that failed: ``(index, reason)``, the reason as it is listed
        (``"cannot decode: ..."``, ``"cannot read: ..."``, ``"not a regular file"``).

        Raises:
            SampleError: with ``on_error="raise"``, naming the first one.
        """
        for index, reason in failures:
            self.errors.apply([Skipped(self.source.names[index], reason)])
            self.known.add(int(index))

    def replace(self, indices: np.ndarray, share: RankShare, start: int) -> np.ndarray:
        """``indices`` (the slots from ``start`` of ``share``) with every known-bad sample replaced.

        Raises:
            NoUsableSample: every sample of the share is bad.
        """
        if not self.known:
            return indices
        out = np.array(indices, np.int64)
        n = len(share.indices)
        for k, index in enumerate(out):
            if int(index) not in self.known:
                continue
            for step in range(1, n + 1):
                candidate = int(share.indices[(start + k + step) % n])
                if candidate not in self.known:
                    out[k] = candidate
                    break
            else:
                raise NoUsableSample(
                    f"every sample of this rank's share of the epoch failed to load "
                    f"({len(self.known)} bad samples; see loader.skipped)"
                )
        return out
