"""Accelerate's gradient state, answered for a gpupipe loader's pass: while a pass runs, the loader is
Accelerate's active data loader (``AccelerateEnd``), which says when the batch handed out is the epoch's last
(gradient accumulation steps there) and how many samples of the last batch gathered over all ranks are real
(``gather_for_metrics`` drops the padding). Re-exported by ``gpupipe.loading.frameworks``."""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backends import EpochRead


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


def gradient_state():
    """Accelerate's ``GradientState`` when an ``Accelerator`` exists in this process, else ``None``."""
    module = sys.modules.get("accelerate.state")
    cls = getattr(module, "GradientState", None)
    if cls is None or not getattr(cls, "_shared_state", None):  # accelerate not imported, or no Accelerator yet
        return None
    state = cls()
    return state if hasattr(state, "_add_dataloader") and hasattr(state, "_remove_dataloader") else None


def begin_pass(read: EpochRead, *, samples: int, batch_size: int, world_size: int) -> AccelerateEnd | None:
    """Makes a pass over ``read`` (an epoch of ``samples`` samples in all) Accelerate's active data
    loader (as its own loaders do on ``__iter__``); ``None`` without an ``Accelerator``. Pair with
    ``end_pass``."""
    state = gradient_state()
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


def end_pass(tracker: AccelerateEnd | None) -> None:
    """Removes a pass from Accelerate's gradient state (after ``begin_pass``)."""
    state = gradient_state() if tracker is not None else None
    if state is not None:
        state._remove_dataloader(tracker)


__all__ = ["AccelerateEnd", "begin_pass", "end_pass", "gradient_state"]
