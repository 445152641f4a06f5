"""The order samples are read in, decided once per epoch for every backend and rank.

Every backend reads the index list given here, so the same seed gives the
same labels in the same order on DALI and torchvision alike. Sharding
follows ``torch.utils.data.DistributedSampler``: one permutation per epoch
from ``(seed, epoch)``, padded (by repeating its start) or cut to a
multiple of the world size, then rank ``r`` takes every ``world_size``-th
index from position ``r``. Every rank therefore gets the same number of
samples, and so the same number of batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import torch


def epoch_order(num_samples: int, *, seed: int, epoch: int, shuffle: bool) -> List[int]:
    """Returns the sample indices of one epoch (all ranks together).

    Args:
        num_samples: dataset size.
        seed: the loader's seed.
        epoch: the epoch number set with ``set_epoch``.
        shuffle: permute (a function of ``(seed, epoch)`` only) or keep the source order.

    Returns:
        A list of ``num_samples`` distinct indices.
    """
    if not shuffle:
        return list(range(num_samples))
    generator = torch.Generator().manual_seed(epoch_seed(seed, epoch))
    return torch.randperm(num_samples, generator=generator).tolist()


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit seed for ``(seed, epoch)``, also used for the random augmentations."""
    return (seed * 1_000_003 + epoch * 7_919 + 12_345) % (2**63 - 1)


@dataclass(frozen=True)
class Shard:
    """One rank's part of an epoch.

    Attributes:
        indices: sample indices this rank reads, in order.
        padded: samples repeated (over all ranks) so that every rank gets as
            many as the others (``drop_last=False``).
        dropped: samples left out (over all ranks) for the same reason (``drop_last=True``).
    """

    indices: List[int]
    padded: int
    dropped: int


def per_rank(num_samples: int, world_size: int, drop_last: bool) -> int:
    """Samples each rank reads per epoch."""
    return num_samples // world_size if drop_last else -(-num_samples // world_size)


def shard(order: List[int], *, rank: int, world_size: int, drop_last: bool) -> Shard:
    """Splits an epoch's order among ``world_size`` ranks, equally.

    With ``drop_last=False`` the order is padded to a multiple of
    ``world_size`` by repeating it from its start (as often as needed, for a
    dataset smaller than the world); with ``drop_last=True`` the tail is cut.
    """
    n = len(order)
    total = per_rank(n, world_size, drop_last) * world_size
    if total > n:
        repeats = -(-total // n)
        order = (order * repeats)[:total]
    else:
        order = order[:total]
    return Shard(indices=order[rank::world_size], padded=max(0, total - n), dropped=max(0, n - total))
