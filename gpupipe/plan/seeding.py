"""Every random stream gpupipe derives, and the constants that separate them.

All randomness is a pure function of the loader's ``seed`` and a few
integers, hashed with SplitMix64 (a well-mixed 64-bit bijection), so that
no two streams collide and nothing depends on the backend, the number of
workers or the history of the process:

* the order of an epoch: ``(seed, epoch)``, see ``order_generator``;
* the random parameters of one sample's augmentations: ``(seed, epoch,
  position)``, where ``position`` is the sample's slot in the epoch's
  (padded) global order, unique across ranks; see ``sample_keys`` and
  ``uniforms``. Every backend draws the same parameters for a slot;
* MixUp / CutMix of one batch: ``(seed, epoch, rank, batch)``, ``batch_key``;
* the packer's write order: ``(seed,)``, ``pack_order``.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

#: Stream tags: the first word hashed into each kind of seed.
ORDER, SAMPLE, BATCH_MIX, PACK = 1, 2, 3, 4


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def mix(*words) -> np.ndarray:
    """Hashes integers (or uint64 arrays, broadcast together) into uint64 keys."""
    h = np.zeros((), np.uint64)
    for word in words:
        w = np.asarray(word)
        w = w.astype(np.uint64) if w.dtype != np.uint64 else w
        h = _splitmix(h ^ w)
    return h


def mix_int(*words: int) -> int:
    """``mix`` of plain integers, as a Python int in ``[0, 2**63)``."""
    return int(mix(*[w & 0xFFFFFFFFFFFFFFFF for w in words])) >> 1


def order_generator(seed: int, epoch: int):
    """The ``torch.Generator`` that permutes epoch ``epoch`` (samples, or shards then samples)."""
    import torch

    return torch.Generator().manual_seed(mix_int(ORDER, seed, epoch))


def sample_keys(seed: int, epoch: int | np.ndarray, positions: np.ndarray) -> np.ndarray:
    """One uint64 key per slot: the root of that slot's augmentation draws.

    Args:
        seed: the loader's seed.
        epoch: the epoch, or ``(B,)`` each slot's epoch (a run spanning epochs).
        positions: ``(B,)`` slots in the epoch's global order.
    """
    return mix(SAMPLE, seed, epoch, np.asarray(positions, np.int64))


def uniforms(keys: np.ndarray, stream: int, count: int = 1) -> np.ndarray:
    """``(B, count)`` float64 draws in ``[0, 1)``: draw ``k`` of stream ``stream`` of each key.

    The same key, stream and index give the same number whether computed for
    one sample or a whole batch.
    """
    keys = np.asarray(keys, np.uint64).reshape(-1, 1)
    counters = np.uint64(stream) * np.uint64(1 << 20) + np.arange(count, dtype=np.uint64)
    bits = _splitmix(keys ^ _splitmix(counters)[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def batch_key(seed: int, epoch: int, rank: int, batch: int) -> int:
    """The seed of one batch's MixUp / CutMix draw."""
    return mix_int(BATCH_MIX, seed, epoch, rank, batch)


def pack_order(seed: int, count: int) -> np.ndarray:
    """The packer's fixed shuffled write order of ``count`` inputs."""
    return np.random.default_rng(mix_int(PACK, seed)).permutation(count)
