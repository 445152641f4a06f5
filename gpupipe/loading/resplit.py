"""The rest of an epoch resumed on another split: another world size, per-rank batch size, ``drop_last`` or
``even_batches`` (rule 5 of ``gpupipe.loading.epochs``).

With the ranks in step (each at the same batch, as DDP keeps them), ``done`` batches of ``batch_size`` on
``world_size`` ranks have read the first ``done * batch_size * world_size`` slots of the epoch's order
(``gpupipe.loading.sampling.split``: rank ``r`` reads slots ``r, r + W, ...``), or all its real slots: with
``even_batches=False`` a rank with a sample fewer ends its share a batch earlier, having read it all. Padding
comes after every real slot and a pass has batches left only while a real slot is unread, so none of the slots
read is padding. A state records the slot its pass starts at (``offset``: 0, or where a resumed pass began) and
its batches; a loader of another split reads the slots after those read, split among its own ranks as an epoch is
(``split(start=...)``: padded or cut by its own settings), each sample at its own slot, which keys its
augmentation: the same as in the run saved. Per-batch draws (batch ops such as MixUp, a dataset read as it is
with its own transforms) follow the new batches.

Lightning's fit loop fixes ``num_training_batches`` from ``len(loader)`` before it loads the loader's state, and
counts the resumed epoch on from the checkpoint's batch index: under its loops ``len()`` of a pass from an offset
stays the whole epoch of the split (``left_out``), and a rest that would run past what it counts (that epoch, cut
by its ``limit_train_batches``: ``counted``) is refused (``check_loop``): it would stop short, losing the rest of the
epoch without a word. A new ``drop_last`` that leaves a rest without a batch says so (``warn_empty``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..env import lightning_trainer
from .sampling import batches_per_epoch, per_rank

#: The fields that only split an epoch among ranks and batches: a state at an epoch's start resumes with other
#: values of them as a run with the new values reads it; a state mid-epoch reads the rest of the epoch (``resumed``).
SPLIT = ("world_size", "batch_size", "drop_last", "even_batches")


@dataclass(frozen=True)
class Split:
    """How a loader splits the slots of a pass among its ranks and batches (its ``SPLIT`` fields)."""

    world_size: int
    batch_size: int
    drop_last: bool
    even_batches: bool = True

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> Split:
        """The split ``fields`` (``resume_fields``, or a state) record; ``even_batches`` only with several ranks."""
        return cls(fields["world_size"], fields["batch_size"], fields["drop_last"], fields.get("even_batches", True))

    def batches(self, slots: int, rank: int) -> int:
        """Batches rank ``rank`` reads of a pass over ``slots`` slots."""
        share = per_rank(slots, self.world_size, drop_last=self.drop_last, even_batches=self.even_batches, rank=rank)
        return batches_per_epoch(share, self.batch_size, self.drop_last)

    def read(self, slots: int, done: int, rank: int) -> int:
        """Slots of a pass over ``slots`` read over all ranks once rank ``rank`` took ``done`` batches (every one
        after its last batch: what its ``drop_last`` left out stays out)."""
        if done >= self.batches(slots, rank):
            return slots
        return min(done * self.batch_size * self.world_size, slots)


def resumed(state: Mapping[str, Any], ours: Mapping[str, Any], *, samples: int, offset: int, done: int) -> int | None:
    """The slot a loader whose ``resume_fields`` are ``ours`` reads the rest of an epoch of ``samples`` slots from,
    for ``state`` taken ``done`` batches into a pass from slot ``offset``; ``None`` where the split is the same (the
    pass resumes at batch ``done`` of its own split).

    Raises:
        ValueError: the state does not record its split (an older format), or ``batches_done`` is past its pass.
    """
    differs = [name for name in SPLIT if name in state and name in ours and state[name] != ours[name]]
    if not differs:
        return None
    several = state["world_size"] > 1
    lacking = [name for name in SPLIT[1:] if name not in state and (name != "even_batches" or several)]
    if lacking:
        raise ValueError(
            f"load_state_dict: {differs[0]} differs: the state has {differs[0]} {state[differs[0]]!r}, this loader "
            f"{differs[0]} {ours[differs[0]]!r}, and the state (format {state.get('format', 1)}) does not record "
            f"{', '.join(lacking)}: which samples of epoch {state['epoch']} it read cannot be worked out, so the rest "
            "of the epoch cannot be read on another split; resume it with the settings it was saved with"
        )
    saved, rank = Split.of(state), int(state.get("rank", 0))
    if done > saved.batches(samples - offset, rank):
        raise ValueError(
            f"load_state_dict: batches_done {done} is past the {saved.batches(samples - offset, rank)} batches of "
            f"rank {rank} of the state's split (epoch {state['epoch']})"
        )
    moved = offset + saved.read(samples - offset, done, rank)
    warn_empty(state, Split.of(ours), samples - moved)
    return moved


def warn_empty(state: Mapping[str, Any], split: Split, left: int) -> None:
    """Warns where the ``left`` slots of a rest make no batch on ``split`` (its ``drop_last`` cuts them all): the
    rest is then left out, where a whole epoch of that split would be refused up front (``check_batch_fits``)."""
    if left <= 0 or split.batches(left, 0):  # rank 0's share is the largest
        return
    warnings.warn(
        f"load_state_dict: the rest of epoch {state['epoch']} ({left} samples) makes no batch on this split "
        f"(world_size {split.world_size}, batch_size {split.batch_size}, drop_last=True): it is left out (the pass "
        "over it has no batch); load the state with drop_last=False to read the rest",
        stacklevel=5,
    )


def left_out(offset: int) -> int:
    """The slots ``len(loader)`` leaves out of a pass from slot ``offset``: ``offset`` (it counts the batches
    left), but 0 under Lightning's loops: they take ``len()`` as every epoch's batch count, the resumed one's
    included (whose batches they count on from the checkpoint's: ``check_loop``)."""
    return 0 if offset and lightning_trainer() is not None else offset


def loop_ended(done: int) -> bool:
    """Whether Lightning's fit loop, ``done`` batches into an epoch, ended it where it ends every epoch (its
    ``num_training_batches``, which ``limit_train_batches`` cuts) and counts it done: the next epoch is then what a
    resume reads, for a pass the loop left there and for one still live (a checkpoint after that last batch)."""
    trainer = lightning_trainer()
    return trainer is not None and done >= getattr(trainer, "num_training_batches", float("inf"))


def counted(trainer: Any, whole: int) -> tuple[int, str]:
    """The batches Lightning's fit loop counts in an epoch of ``whole`` batches (its ``num_training_batches``, as its
    ``_parse_num_batches`` takes them from ``len()``), and how: ``limit_train_batches`` cuts it, an int to that many
    batches, a float to that fraction of ``whole`` (rounded down)."""
    limit = getattr(trainer, "limit_train_batches", 1.0)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit == 1.0 and isinstance(limit, float):
        return whole, ""
    count = min(whole, limit) if isinstance(limit, int) else int(whole * limit)
    return count, f": limit_train_batches={limit!r} of the split's {whole}"


def check_loop(state: Mapping[str, Any], left: int, whole: int) -> None:
    """Under Lightning's fit loop, refuses a rest of ``left`` batches that the loop, counting on from the batch of
    its checkpoint up to its ``num_training_batches`` (``whole``, this split's epoch, cut by ``limit_train_batches``:
    ``counted``), would not read to its end.

    Raises:
        ValueError: naming both counts and what resumes instead.
    """
    trainer = lightning_trainer()
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    at = getattr(getattr(getattr(loop, "batch_progress", None), "current", None), "ready", None)
    count, how = counted(trainer, whole)
    if not isinstance(at, int) or at + left <= count:
        return
    raise ValueError(
        f"load_state_dict: Lightning resumes epoch {state['epoch']} at its batch {at} of {count} "
        f"(num_training_batches, counted before the state loaded{how}), but the rest of the epoch on this split is "
        f"{left} batches: Lightning would read {max(count - at, 0)} of them and lose the others without a word; "
        f"resume with world_size {state['world_size']} and batch_size {state.get('batch_size')} as saved, or from a "
        "checkpoint at an epoch's end (batches_done 0), which resumes on any split"
    )
