"""``gpupipe.DataLoader``: ``torch.utils.data.DataLoader``'s signature and defaults, building a gpupipe loader.

The swap is ``from gpupipe import DataLoader``: the dataset (a torchvision
``ImageFolder`` / ``DatasetFolder``, a ``Subset`` or ``ConcatDataset`` of those, a
path or a gpupipe source) is read with its own transform compiled to gpupipe ops. Arguments
that have no meaning for gpupipe are accepted; those it cannot honour are
refused by name (``UnsupportedArgument``), before any work starts.
"""

from __future__ import annotations

import logging
from typing import Any

from ..checks import is_int, positive_int
from ..env import World
from ..errors import Error
from ..loading.config import INT_BOUNDS
from .dataset_fallback import NAME as AS_IS
from .fallback import NAME as FALLBACK

logger = logging.getLogger("gpupipe.loader")

#: Arguments accepted without effect, and why (the documentation's table says the same).
IGNORED = {
    "num_workers": "gpupipe chooses its threads (DALI threads or worker processes); pass num_threads= to set them "
    "(a dataset read as it is, with fallback='torchvision', runs in num_workers processes, as torch runs it)",
    "pin_memory": "batches land on the device already (CUDA when there is one)",
    "pin_memory_device": "batches land on the device already",
    "persistent_workers": "gpupipe keeps its workers from epoch to epoch (with fallback='torchvision', the "
    "DataLoader workers that run your transform or dataset last from pass to pass when it is True, as torch's)",
    "multiprocessing_context": "gpupipe starts its own workers (a dataset read as it is, with "
    "fallback='torchvision', runs in workers started with it, as torch runs it)",
    "in_order": "batches always come in order",
    "worker_init_fn": "gpupipe's workers run no user code and its augmentations are seeded by the generator; "
    "with fallback='torchvision' the transform's DataLoader workers run it",
}


#: Why a ``collate_fn`` is refused where gpupipe makes the batches.
COLLATED_BY_GPUPIPE = (
    "gpupipe batches images itself: images (B, 3, H, W) with labels (B,), masks (B, H, W), or for boxes a "
    "dict of padded boxes (B, N, 4) and labels (B, N) (gpupipe.to_detection_targets turns it into the list of "
    "dicts that torchvision's detection models take, as the detection references' collate_fn gives them); a "
    "collate_fn runs only where a dataset gpupipe cannot read is read as it is (fallback='torchvision')"
)


class UnsupportedArgument(Error, ValueError):
    """A ``DataLoader`` argument gpupipe cannot honour."""


def _count(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int (a numpy int too, as torch takes it) in ``minimum..maximum``, or refused naming ``name``."""
    try:
        return positive_int(name, value, minimum, maximum)
    except ValueError:
        most = "" if maximum is None else f", and at most {maximum} here"
        raise _refuse(name, value, f"must be an int >= {minimum}, as torch's DataLoader requires{most}") from None


def _refuse(name: str, value: Any, why: str) -> UnsupportedArgument:
    return UnsupportedArgument(f"DataLoader({name}={value!r}): {why}")


def _default_collate() -> Any:
    from torch.utils.data import default_collate

    return default_collate


def _is_default_collate(fn: Any) -> bool:
    return fn is None or fn is _default_collate()


def _sampler_options(
    sampler: Any, dataset: Any, shuffle: bool, drop_last: bool, generator: Any, batch_size: int
) -> dict[str, Any]:
    """The loader's ``shuffle``, ``seed``, ``drop_last``, ``rank``, ``world_size`` (and ``indices``: the
    dataset's samples to read, in their order, when the sampler reads only some) for a torch sampler."""
    from collections import abc

    import numpy as np
    import torch
    from torch.utils.data import (
        DistributedSampler,
        RandomSampler,
        SequentialSampler,
        SubsetRandomSampler,
        WeightedRandomSampler,
    )

    seed = (generator.initial_seed() if generator is not None else torch.initial_seed()) % 2**63
    if sampler is None:  # a torch DataLoader without a sampler reads every sample in every process
        return {"shuffle": shuffle, "seed": seed, "drop_last": drop_last, "rank": 0, "world_size": 1}
    if shuffle:
        raise _refuse("shuffle", shuffle, "sampler and shuffle=True cannot go together (torch refuses it too)")
    if type(sampler) is SequentialSampler or type(sampler) is RandomSampler:
        random = type(sampler) is RandomSampler
        drawn_from = _over(sampler, sampler.data_source, dataset, random and getattr(sampler, "replacement", False))
        if drawn_from is not None and random and getattr(sampler, "_num_samples", None) is None:  # shuffled
            return _seeded_by(sampler, seed, drop_last, shuffle=True, indices=drawn_from)
        if drawn_from is not None and not random:  # torch's reads range(len(data_source))
            return {
                "shuffle": False,
                "seed": seed,
                "drop_last": drop_last,
                "rank": 0,
                "world_size": 1,
                "indices": drawn_from,
            }
        if drawn_from is not None:
            raise _refuse("sampler", sampler, _shorter(drawn_from, dataset, "draws from"))
        own: Any = getattr(sampler, "generator", None)
        if random and own is not None:
            seed = own.initial_seed() % 2**63
        chosen = {"shuffle": random, "seed": seed, "drop_last": drop_last, "rank": 0, "world_size": 1}
        drawn: Any = sampler if random else None
        if drawn is not None and (drawn.replacement or drawn._num_samples is not None):  # drawn: uniform weights
            n = len(dataset)
            if not drawn.replacement and drawn.num_samples > n:
                raise _refuse(
                    "sampler",
                    sampler,
                    f"num_samples={drawn.num_samples} over {n} samples without replacement reads the dataset "
                    "several times an epoch; give replacement=True",
                )
            chosen.update(weights=[1.0] * n, num_samples=drawn.num_samples, replacement=drawn.replacement)
        return chosen
    if type(sampler) is WeightedRandomSampler:  # epochs drawn by weight (gpupipe.loading.draws)
        if len(sampler.weights) != len(dataset):  # torch's draws among its weights' first indices only
            raise _refuse(
                "sampler",
                sampler,
                f"its {len(sampler.weights)} weights are over other samples than the dataset's {len(dataset)} "
                "samples: give one weight per sample of the dataset",
            )
        drawn_by = {"weights": sampler.weights, "num_samples": sampler.num_samples, "replacement": sampler.replacement}
        return _seeded_by(sampler, seed, drop_last, shuffle=False, **drawn_by)
    if type(sampler) is SubsetRandomSampler:  # the tutorials' split: a shuffled subset, a new order every pass
        return _seeded_by(sampler, seed, drop_last, shuffle=True, indices=[int(i) for i in sampler.indices])
    if isinstance(sampler, (abc.Sequence, np.ndarray, torch.Tensor)):  # not a class of the user's: fixed
        # torch reads a list (range, array, tensor) of indices in its order at every pass: Subset's order
        indices = _listed_indices(sampler)
        return {"shuffle": False, "seed": seed, "drop_last": drop_last, "rank": 0, "world_size": 1, "indices": indices}
    if not isinstance(sampler, DistributedSampler):
        once = hasattr(sampler, "__next__") or (hasattr(sampler, "__iter__") and iter(sampler) is sampler)
        raise _refuse(
            "sampler",
            sampler,
            "an iterator is read once: torch's DataLoader reads it in its first epoch only (and no batch after); "
            "give the indices as a list (read in its order at every pass)"
            if once
            else "gpupipe decides the order itself (it cannot run a sampler's own __iter__ at every pass); it takes "
            "a list (tuple, range, 1-D array or tensor) of indices, a "
            "DistributedSampler, a RandomSampler, a SequentialSampler, a SubsetRandomSampler or a "
            "WeightedRandomSampler (or none)",
        )
    shorter = _over(sampler, sampler.dataset, dataset, False)
    options = _distributed_options(sampler, drop_last, batch_size)
    return options if shorter is None or "indices" in options else {**options, "indices": shorter}


def _shorter(indices: range, dataset: Any, what: str) -> str:
    return f"the sampler {what} {len(indices)} items, the dataset has {len(dataset)} samples"


def _over(sampler: Any, source: Any, dataset: Any, drawn: bool) -> range | None:
    """``None`` where the sampler is over the dataset or over another object of its length (torch's samplers
    read only ``len()`` of it, so they mean the same); ``range(k)``, the first samples it reads, where its
    source is shorter; refused where it is longer (torch's would read past the dataset's end: ``IndexError``)."""
    if source is dataset:
        return None
    try:
        k, n = len(source), len(dataset)
    except TypeError:
        raise _refuse("sampler", sampler, "the sampler is over an object without len()") from None
    if k > n or (drawn and k != n):
        reads = "draws with replacement from" if drawn else "is over"
        why = "torch's would read past the dataset's end (IndexError)" if k > n else "give it the dataset"
        raise _refuse("sampler", sampler, f"{_shorter(range(k), dataset, reads)}: {why}")
    return None if k == n else range(k)


def _listed_indices(sampler: Any) -> list[int]:
    """The dataset indices a list-like sampler (list, tuple, range, 1-D array or tensor) reads, in its order."""
    shape = getattr(sampler, "shape", None)
    if isinstance(sampler, (str, bytes)) or (shape is not None and len(shape) != 1):
        raise _refuse("sampler", sampler, "a sampler given as indices must be one flat sequence of ints")
    indices = []
    for k, i in enumerate(sampler):
        value = i.item() if hasattr(i, "item") and getattr(i, "ndim", 0) == 0 else i
        if isinstance(value, bool) or not is_int(value):
            raise _refuse("sampler", sampler, f"its item [{k}] = {value!r} is not a sample index (an int)")
        indices.append(int(value))
    return indices


def _seeded_by(sampler: Any, seed: int, drop_last: bool, **chosen: Any) -> dict[str, Any]:
    """The loader's options for a sampler of one process seeded by its own ``generator`` (else ``seed``)."""
    own = sampler.generator
    seed = own.initial_seed() % 2**63 if own is not None else seed
    return {"seed": seed, "drop_last": drop_last, "rank": 0, "world_size": 1, **chosen}


def _distributed_options(sampler: Any, drop_last: bool, batch_size: int) -> dict[str, Any]:
    """The loader's options for a ``DistributedSampler``: its share, kept exactly where the sampler's
    ``drop_last`` differs from the loader's (or refused, where it cannot be)."""
    world, n = int(sampler.num_replicas), len(sampler.dataset)
    options = {
        "shuffle": bool(sampler.shuffle),
        "seed": int(sampler.seed),
        "rank": int(sampler.rank),
        "world_size": world,
        "drop_last": drop_last,
    }
    if bool(sampler.drop_last) == drop_last or n % world == 0:
        return options
    if sampler.drop_last and not sampler.shuffle:  # the sampler cuts the tail; batches keep a partial last one
        return {**options, "indices": range(world * (n // world))}
    padded = -(-n // world)  # the sampler's share: the order padded with its start, as torch pads it
    if not sampler.shuffle:
        return {**options, "indices": [i % n for i in range(world * padded)]}
    if not sampler.drop_last and padded // batch_size == (n // world) // batch_size:
        return options  # as many full batches as torch's; a shuffled order is gpupipe's own in any case
    raise _refuse(
        "drop_last",
        drop_last,
        f"with DistributedSampler(drop_last={sampler.drop_last}, shuffle={sampler.shuffle}) over {n} samples "
        f"on {world} ranks: gpupipe's drop_last both evens the ranks and drops the partial batch, which gives "
        f"another number of batches than torch's here; pass the same drop_last to both",
    )


def DataLoader(  # noqa: N802 -- torch's name, for a one-import swap
    dataset: Any,
    batch_size: int | None = 1,
    shuffle: bool | None = None,
    sampler: Any = None,
    batch_sampler: Any = None,
    num_workers: int = 0,
    collate_fn: Any = None,
    pin_memory: bool = False,
    drop_last: bool = False,
    timeout: float = 0,
    worker_init_fn: Any = None,
    multiprocessing_context: Any = None,
    generator: Any = None,
    *,
    prefetch_factor: int | None = None,
    persistent_workers: bool = False,
    pin_memory_device: str = "",
    in_order: bool = True,
    **options: Any,
):
    """A gpupipe loader with ``torch.utils.data.DataLoader``'s signature and defaults.

    Args:
        dataset: a torchvision ``ImageFolder`` / ``DatasetFolder``, a ``Subset`` or ``ConcatDataset``
            of those, a path or a gpupipe source; its ``transform`` becomes the pipeline (``gpupipe.from_torchvision``).
        batch_size: samples per batch (per process).
        shuffle: a new order every epoch (``None``: no).
        sampler: ``None`` (every process reads every sample, as torch's), a ``DistributedSampler``
            (its rank, world size, shuffle, seed and drop_last; its ``set_epoch`` sets the epoch),
            a ``RandomSampler`` (with replacement or ``num_samples`` too) or a ``SequentialSampler`` over
            ``dataset``, a ``SubsetRandomSampler`` (its indices, shuffled every pass), or a
            ``WeightedRandomSampler`` (its weights, ``num_samples`` and replacement: ``gpupipe.loader``'s
            ``weights=``), or a list (range, 1-D array or tensor) of indices, read in its order at every pass
            (as ``Subset(dataset, indices)``; an iterator, read once by torch, is refused).
        drop_last: drop the last, partial batch.
        generator: seeds the order and the augmentations (``initial_seed()``); default
            ``torch.initial_seed()``.
        prefetch_factor: batches prepared ahead (gpupipe's ``prefetch``).
        num_workers: accepted, without effect (gpupipe decodes with its own threads; see ``IGNORED``), except
            for a dataset read as it is (``fallback="torchvision"``), which runs in that many processes.
        collate_fn: torch's default, or, for a dataset read as it is, any.
        pin_memory: accepted, without effect (batches arrive on the loader's device).
        pin_memory_device: accepted, without effect.
        persistent_workers: accepted, without effect.
        multiprocessing_context: accepted; how the fallback's DataLoader workers start (``fallback="torchvision"``),
            without effect otherwise.
        in_order: accepted, without effect (gpupipe's order is always the planned one).
        worker_init_fn: accepted; run by the fallback's DataLoader workers (``fallback="torchvision"``),
            without effect otherwise (no gpupipe worker runs user code).
        **options: more ``gpupipe.loader`` arguments (``backend``, ``device``, ``dtype``, ``pipeline``, ...).

    Returns:
        A [`Loader`][gpupipe.Loader] whose ``dataset`` is ``dataset`` and whose ``sampler`` is ``sampler``
        when it is a ``DistributedSampler``; its ``num_workers``, ``pin_memory``, ``prefetch_factor``,
        ``generator``, ``collate_fn`` and torch's other ``DataLoader`` attributes read as torch's would.

    Raises:
        UnsupportedArgument: ``batch_size=None``, a ``batch_sampler``, a ``collate_fn`` (but for a dataset
            read as it is), a ``timeout``, a negative ``num_workers``, another sampler, each named; for a dataset
            read as it is, ``prefetch_factor`` or ``persistent_workers=True`` with ``num_workers=0`` (as torch).
        UnsupportedTransform, UnsupportedDataset: see [`gpupipe.loader`][gpupipe.loader].
    """
    from ..loading.factory import loader

    if batch_size is None:
        raise _refuse("batch_size", None, "gpupipe always batches; give a batch size")
    if batch_sampler is not None:
        raise _refuse("batch_sampler", batch_sampler, "gpupipe makes its batches itself; use batch_size and sampler")
    own_collate = not _is_default_collate(collate_fn)
    if own_collate and options.get("fallback") is None:
        raise _refuse("collate_fn", collate_fn, COLLATED_BY_GPUPIPE)
    if timeout:
        raise _refuse("timeout", timeout, "gpupipe has no per-batch timeout")
    num_workers = _count("num_workers", num_workers, 0)
    chosen = _sampler_options(sampler, dataset, bool(shuffle), bool(drop_last), generator, batch_size)
    indices = chosen.pop("indices", None)
    if prefetch_factor is not None:
        chosen["prefetch"] = prefetch_factor = _count("prefetch_factor", prefetch_factor, *INT_BOUNDS["prefetch"])
    given = {**chosen, **options}
    source = dataset
    if indices is not None:
        from torch.utils.data import Subset

        source = Subset(dataset, indices)
    built = loader(source, given.pop("pipeline", None), batch_size=batch_size, **given)
    built._dataset = dataset
    built._seeded_by_sampler = getattr(sampler, "generator", None) is not None  # type: ignore[attr-defined]
    if chosen["world_size"] == 1 and "rank" not in options and "world_size" not in options:
        # no DistributedSampler: every sample in every process, as torch's, unless Lightning or Accelerate
        # (which shard a torch DataLoader given without one) drives the loader (gpupipe.env.settle_world)
        built._world = World(0, 1, "unsampled")
    if sampler is not None and hasattr(sampler, "set_epoch"):
        built.sampler = sampler  # its set_epoch decides the epoch (gpupipe.loading.frameworks.follow_sampler)
    torch_side = {
        "num_workers": num_workers,
        "pin_memory": pin_memory,
        "pin_memory_device": pin_memory_device,
        "persistent_workers": persistent_workers,
        "prefetch_factor": prefetch_factor if prefetch_factor is not None or not num_workers else 2,
        "multiprocessing_context": multiprocessing_context,
        "in_order": in_order,
        "generator": generator,
        "collate_fn": _default_collate(),
        "timeout": timeout,
        "worker_init_fn": worker_init_fn,
    }
    if own_collate:
        if built.backend != AS_IS:
            raise _refuse("collate_fn", collate_fn, COLLATED_BY_GPUPIPE)
        built.source.user_collate_fn = torch_side["collate_fn"] = collate_fn  # type: ignore[attr-defined]
    if built.backend == AS_IS and "num_threads" not in options:
        built.source.user_num_workers = num_workers  # type: ignore[attr-defined]  # a dataset read as torch reads it
        for name, value in (("prefetch_factor", prefetch_factor), ("persistent_workers", persistent_workers or None)):
            if value is not None and not num_workers:  # torch's DataLoader refuses them alike
                raise _refuse(name, value, "needs worker processes for a dataset read as it is; num_workers=0")
    for name, value in torch_side.items():  # what scripts read back from a torch DataLoader, as given
        setattr(built, name, value)
    built.batch_type = list  # torch's default collate gives [images, labels] (a script may assign into it)
    if built.backend in (FALLBACK, AS_IS):  # the fallback's DataLoader workers: run and started as torch's
        built.source.user_worker_init_fn = worker_init_fn  # type: ignore[attr-defined]
        built.source.user_multiprocessing_context = multiprocessing_context  # type: ignore[attr-defined]
        built.source.user_persistent_workers = persistent_workers  # type: ignore[attr-defined]
    return built


__all__ = ["DataLoader", "UnsupportedArgument", "IGNORED"]
