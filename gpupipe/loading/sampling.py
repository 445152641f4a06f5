"""The order samples are read in, decided once per epoch for every backend and rank.

Every backend reads the slots given here, so the same seed gives the same
samples in the same order on DALI and torchvision alike. With
``even_batches=True`` (the default) sharding follows
``torch.utils.data.DistributedSampler``: the epoch's order is padded (by
repeating its start) or cut to a multiple of the world size, then rank
``r`` takes every ``world_size``-th slot from position ``r``, so every rank
gets as many samples. With ``even_batches=False`` nothing is padded or cut:
each sample is read exactly once over all ranks, and ranks differ by at
most one sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..plan.seeding import order_generator


def epoch_order(num_samples: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The sample indices of one epoch (all ranks together), ``(num_samples,)`` int64.

    A permutation of ``(seed, epoch)`` alone, or ``0 .. num_samples - 1``.
    """
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    import torch

    return torch.randperm(num_samples, generator=order_generator(seed, epoch)).numpy()


@dataclass(frozen=True, repr=False)
class RankShare:
    """One rank's part of an epoch.

    Attributes:
        indices: ``(n,)`` sample indices this rank reads, in order.
        positions: ``(n,)`` their slots in the epoch's global (padded) order;
            unique over all ranks, they key each sample's random augmentation.
        padded: samples repeated (over all ranks) so that every rank gets as
            many as the others (``drop_last=False``, ``even_batches=True``).
        dropped: samples left out (over all ranks) for the same reason (``drop_last=True``).
    """

    indices: np.ndarray
    positions: np.ndarray
    padded: int = 0
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.indices)

    def __repr__(self) -> str:
        return f"RankShare({len(self.indices)} samples, padded={self.padded}, dropped={self.dropped})"


def per_rank(num_samples: int, world_size: int, *, drop_last: bool, even_batches: bool = True, rank: int = 0) -> int:
    """Samples rank ``rank`` reads per epoch."""
    if not even_batches:
        return num_samples // world_size + (1 if rank < num_samples % world_size else 0)
    return num_samples // world_size if drop_last else -(-num_samples // world_size)


def batches_per_epoch(samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches that ``samples`` samples make."""
    return samples // batch_size if drop_last else -(-samples // batch_size)


def split(
    order: Sequence[int] | np.ndarray,
    *,
    rank: int,
    world_size: int,
    drop_last: bool,
    even_batches: bool = True,
    start: int = 0,
) -> RankShare:
    """Splits an epoch's order (from its slot ``start``) among ``world_size`` ranks.

    With ``even_batches=True`` every rank gets the same number of samples:
    with ``drop_last=False`` the order is padded to a multiple of
    ``world_size`` by repeating it from its start (as often as needed, for a
    dataset smaller than the world); with ``drop_last=True`` the tail is cut.
    With ``even_batches=False`` rank ``r`` takes slots ``r, r + W, ...`` of
    the order as it is. ``start`` > 0 splits only the slots from ``start`` on (the rest of an epoch resumed
    on another split, ``gpupipe.loading.resplit``): each keeps its slot as its position, and padding repeats
    them from ``start``, at positions from ``len(order)`` on (as an epoch's own padding).
    """
    order = np.asarray(order, np.int64)
    n = len(order)
    rest = order[start:]
    m = len(rest)
    if not even_batches:
        slots = np.arange(rank, m, world_size, dtype=np.int64)
        return RankShare(indices=rest[slots], positions=start + slots)
    total = per_rank(m, world_size, drop_last=drop_last) * world_size
    slots = np.arange(rank, total, world_size, dtype=np.int64)
    indices = rest[slots % m] if m else slots  # padding repeats the slots from ``start``
    positions = np.where(slots < m, start + slots, n + slots - m)
    return RankShare(indices=indices, positions=positions, padded=max(0, total - m), dropped=max(0, m - total))
