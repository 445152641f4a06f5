"""The order samples are read in, decided once per epoch for every backend.

Every backend reads the same index list, so the same seed gives the same
labels in the same order on DALI and torchvision alike.
"""

from __future__ import annotations

from typing import List

import torch


def epoch_order(num_samples: int, *, seed: int, epoch: int, shuffle: bool) -> List[int]:
    """Returns the sample indices of one epoch.

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
