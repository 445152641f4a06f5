"""What training frameworks look for on a data loader, answered for a :class:`~gpupipe.Loader`.

- ``loader.sampler`` and ``loader.batch_sampler.sampler``: where Lightning
  (and ``DistributedSampler`` habits) call ``set_epoch(e)``; both are one
  :class:`EpochSampler`, which forwards the epoch to the loader, so a loader
  rebuilt every epoch reads epoch ``e``'s order, as gpupipe's own epochs do.
- Accelerate's gradient state: while a pass runs, the loader is
  Accelerate's active data loader (:class:`AccelerateEnd`), which says when
  the batch handed out is the epoch's last (gradient accumulation steps
  there) and how many samples of the last batch gathered over all ranks are
  real (``gather_for_metrics`` drops the padding).

Accelerate's ``prepare()`` hands a gpupipe loader back unchanged, and its
``skip_first_batches`` rebuilds a ``torch.utils.data.DataLoader`` from a
``dataset``, which a gpupipe loader does not have: use ``loader.skip(n)``.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import TYPE_CHECKING, Iterator, List, Optional

if TYPE_CHECKING:
    from .backends import EpochRead
    from .dataloader import Loader

NO_DATASET = (
    "a gpupipe Loader has no `dataset`: it is not a torch DataLoader, so Accelerate's skip_first_batches "
    "cannot rebuild it; call loader.skip(n) (the next pass starts at batch n), or register the loader "
    "with accelerator.register_for_checkpointing(loader) so that load_state() resumes it exactly"
)


class EpochSampler:
    """The loader's order as a sampler: ``set_epoch`` where frameworks call it, and the rank's samples.

    Iterating gives the sample indices this rank reads in the epoch the
    loader is at (see :meth:`Loader.rank_share`).
    """

    def __init__(self, loader: "Loader") -> None:
        self._loader = weakref.ref(loader)

    @property
    def loader(self) -> "Loader":
        loader = self._loader()
        if loader is None:
            raise ReferenceError("the gpupipe loader of this sampler is gone")
        return loader

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the loader's next pass reads (:meth:`Loader.set_epoch`)."""
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(self.loader.rank_share().indices.tolist())

    def __len__(self) -> int:
        return len(self.loader.rank_share())


class EpochBatchSampler:
    """The loader's batches as lists of sample indices; its ``sampler`` is the :class:`EpochSampler`."""

    def __init__(self, sampler: EpochSampler) -> None:
        self.sampler = sampler

    @property
    def batch_size(self) -> int:
        return self.sampler.loader.batch_size

    @property
    def drop_last(self) -> bool:
        return self.sampler.loader.drop_last

    def __iter__(self) -> Iterator[List[int]]:
        indices = list(self.sampler)[: len(self) * self.batch_size]
        return iter([indices[k : k + self.batch_size] for k in range(0, len(indices), self.batch_size)])

    def __len__(self) -> int:
        return len(self.sampler.loader)


class AccelerateEnd:
    """The attributes Accelerate's ``GradientState`` reads from its active data loader.

    Attributes:
        end_of_dataloader: the batch handed out last is the epoch's last.
        remainder: real samples in the epoch's last batch gathered over all
            ranks when some are padding (``gather_for_metrics`` keeps that
            many), else 0.
    """

    def __init__(self, remainder: int) -> None:
        self.end_of_dataloader = False
        self.remainder = remainder


def _gradient_state():
    """Accelerate's ``GradientState`` when an ``Accelerator`` exists in this process, else ``None``."""
    module = sys.modules.get("accelerate.state")
    cls = getattr(module, "GradientState", None)
    if cls is None or not getattr(cls, "_shared_state", None):  # accelerate not imported, or no Accelerator yet
        return None
    state = cls()
    return state if hasattr(state, "_add_dataloader") and hasattr(state, "_remove_dataloader") else None


def begin_pass(read: "EpochRead", *, samples: int, batch_size: int, world_size: int) -> Optional[AccelerateEnd]:
    """Makes a pass over ``read`` (an epoch of ``samples`` samples in all) Accelerate's active data
    loader (as its own loaders do on ``__iter__``); ``None`` without an ``Accelerator``. Pair with
    :func:`end_pass`."""
    state = _gradient_state()
    if state is None:
        return None
    padded = read.share.padded
    # the real samples of the last batch gathered over all ranks (some of it is padding), else 0
    remainder = samples - (read.batches - 1) * batch_size * world_size if padded and read.batches else 0
    if padded > 1:
        warnings.warn(
            f"{padded} samples pad the ranks' shares: gather_for_metrics keeps the right number of samples "
            "of the last batch, but with more than one padded sample some kept may be repeats; use a "
            "dataset whose size is a multiple of the world size for exact metrics",
            stacklevel=3,
        )
    tracker = AccelerateEnd(remainder)
    state._add_dataloader(tracker)  # the hook Accelerate's own DataLoaderShard uses (DataLoaderStateMixin.begin)
    return tracker


def end_pass(tracker: Optional[AccelerateEnd]) -> None:
    """Removes a pass from Accelerate's gradient state (after :func:`begin_pass`)."""
    state = _gradient_state() if tracker is not None else None
    if state is not None:
        state._remove_dataloader(tracker)


__all__ = ["EpochSampler", "EpochBatchSampler", "AccelerateEnd", "begin_pass", "end_pass", "NO_DATASET"]
