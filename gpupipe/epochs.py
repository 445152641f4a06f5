"""Which epoch a pass reads, where it starts, and what a checkpoint says: the epoch cursor.

The rule (the README states it too):

1. Each ``iter(loader)`` starts a pass over one epoch: the epoch given to
   ``set_epoch`` if it was called since the last pass started, else the
   epoch of a loaded state, else the previous pass's epoch + 1 (the first
   pass reads epoch 0). So a loop written for ``DataLoader`` sees a new
   order every pass, and ``set_epoch(3)`` followed by three passes reads
   epochs 3, 4, 5. Starting a pass ends the previous one.
2. A pass starts at its first batch, or, after ``load_state_dict``, at the
   batch the saved state points at (when its epoch is the one read).
3. ``state_dict()`` says where the next batch comes from: during a pass that
   has batches left, ``(its epoch, batches delivered)``; otherwise (before
   any pass, after a finished or ended pass) ``(the epoch the next pass
   reads, 0)``, or the loaded state not yet used. So a checkpoint taken
   right after an epoch's last batch resumes at the next epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

#: The loader state format (``state_dict()["format"]``).
STATE_FORMAT = 2


@dataclass
class Pass:
    """One pass over one epoch.

    Attributes:
        epoch: the epoch read.
        start: the first batch read (0, or a resume point).
        done: batches delivered so far, counting from the epoch's start.
        total: batches in the epoch.
        live: the pass has not finished or been ended.
    """

    epoch: int
    start: int
    done: int
    total: int
    live: bool = True

    @property
    def remaining(self) -> int:
        return self.total - self.done


class EpochCursor:
    """The epoch bookkeeping of a loader (see the module docstring for the rule)."""

    def __init__(self) -> None:
        self._next_epoch = 0
        self._resume: Optional[Tuple[int, int]] = None  # (epoch, batches done) of a loaded state
        self._pass: Optional[Pass] = None

    def set_epoch(self, epoch: int) -> None:
        """The next pass reads ``epoch`` (a loaded state for another epoch is dropped)."""
        self._next_epoch = epoch
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None

    def begin(self, total: int) -> Pass:
        """Starts a pass over the next epoch, which has ``total`` batches; ends any pass still live."""
        if self._pass is not None:
            self._pass.live = False
        epoch = self._next_epoch
        start = 0
        if self._resume is not None:
            start = min(self._resume[1], total)
            self._resume = None
        self._pass = Pass(epoch=epoch, start=start, done=start, total=total)
        self._next_epoch = epoch + 1
        return self._pass

    def load(self, epoch: int, done: int) -> None:
        """The next pass reads ``epoch`` from batch ``done``."""
        if self._pass is not None:
            self._pass.live = False
        self._pass = None
        self._next_epoch = epoch
        self._resume = (epoch, done) if done else None

    def skip(self, done: int) -> None:
        """The next pass starts at batch ``done`` of the epoch it reads (as :meth:`load` of that epoch)."""
        self.load(self._next_epoch, done)

    def state(self) -> Tuple[int, int]:
        """``(epoch, batches done)``: where the next batch comes from."""
        current = self._pass
        if current is not None and current.live and current.remaining > 0:
            return current.epoch, current.done
        if self._resume is not None:
            return self._resume
        return self._next_epoch, 0

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way, else the epoch the next pass reads."""
        current = self._pass
        if current is not None and current.live:
            return current.epoch
        return self._next_epoch

    @property
    def current(self) -> Optional[Pass]:
        """The pass under way, if any."""
        return self._pass if self._pass is not None and self._pass.live else None

    def state_dict(self, *, seed: int, rank: int, world_size: int, backend: str) -> Dict[str, Any]:
        """A loader's checkpoint: :meth:`state` with what must match on resuming."""
        epoch, done = self.state()
        return {
            "format": STATE_FORMAT,
            "epoch": epoch,
            "batches_done": done,
            "seed": seed,
            "rank": rank,
            "world_size": world_size,
            "backend": backend,
        }

    def load_state_dict(self, state: Dict[str, Any], *, seed: int, world_size: int, batches: int) -> None:
        """Loads a checkpoint of :meth:`state_dict` made by a loader with ``seed`` and ``world_size``
        (epochs of ``batches`` batches).

        Raises:
            ValueError: another seed or world size (the order would differ), or a malformed state.
        """
        try:
            epoch, done, saved_seed = int(state["epoch"]), int(state["batches_done"]), int(state["seed"])
            saved_world = int(state.get("world_size", 1))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"load_state_dict: not a gpupipe loader state: {state!r}") from err
        if saved_seed != seed:
            raise ValueError(f"load_state_dict: state has seed {saved_seed}, this loader seed {seed}")
        if saved_world != world_size:
            raise ValueError(
                f"load_state_dict: state comes from world_size {saved_world}, this loader has {world_size}; "
                "the order of an epoch depends on the world size"
            )
        if epoch < 0 or not 0 <= done <= batches:
            raise ValueError(f"load_state_dict: batches_done {done} is outside 0..{batches} (epoch {epoch})")
        self.load(epoch, done)
