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
   right after an epoch's last batch resumes at the next epoch (also after
   the batch where Lightning's ``limit_train_batches`` ends it: ``resplit.loop_ended``).
4. Under several ranks with ``shuffle``, a pass that reads the epoch after an unfinished pass
   without ``set_epoch`` or a loaded state in between warns (``RanksMayPart``): a pass only some
   ranks start (a peek at a batch on rank 0) moves only their epoch on, and the ranks would read
   overlapping shares of different epochs. ``DistributedSampler`` has no epoch of its own to move.
5. A state records what decides the samples that follow (``resume_fields``:
   seed, world size, per-rank batch size, shuffle, drop_last, even_batches
   with several ranks, the dataset's sample count and digest); loading it
   into a loader that differs in any of them is refused, naming the field,
   except world size, batch size, drop_last and even_batches (``SPLIT``): a
   state at an epoch's start (``batches_done`` 0) resumes with others as a
   run with them reads; a state mid-epoch, with others, reads the rest of
   the epoch (the slots its ranks had not read, ``gpupipe.loading.resplit``)
   split among this loader's ranks: a pass from that slot (``offset``, which
   its own states record) to the epoch's end.
6. A pass ended under its loop by ``load_state_dict`` or ``skip`` says so
   when asked for another batch (``Pass.ended``), rather than stop short;
   ``set_epoch`` during a pass applies to the next pass. A state taken after
   the loop left a pass with batches to go (a ``break``, an exception out of
   the loop), with no ``set_epoch`` since, warns (``LeftPass``): by rule 3 it
   resumes at the next epoch, which an emergency checkpoint did not mean.
"""

from __future__ import annotations

import operator
import reprlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Error
from . import resplit
from .config import check_epoch
from .resplit import SPLIT, Split

#: The newest loader state format (``state_dict()["format"]``): 4 records ``offset``, the slot a pass resumed on
#: another split starts at; a state without it is written as format 3, which earlier versions read alike.
STATE_FORMAT = 4


class RanksMayPart(Error, UserWarning):
    """Under several ranks, a pass moved on to the next epoch by itself after an unfinished pass:
    the ranks may read different epochs (``EpochCursor.begin``). A warning category (``gpupipe.Error`` too,
    as every class gpupipe defines)."""


class LeftPass(Error, UserWarning):
    """A state taken after the loop left a pass with batches to go (a ``break``, or an exception out of the loop):
    it resumes at the next epoch, as the next pass in this process reads it, not at the rest of the pass left
    (``EpochCursor.state_dict``). A warning category (``gpupipe.Error`` too)."""


@dataclass
class Pass:
    """One pass over one epoch.

    Attributes:
        epoch: the epoch read.
        start: the first batch read (0, or a resume point).
        done: batches delivered so far, counting from the epoch's start.
        total: batches in the epoch.
        live: the pass has not finished or been ended.
        ended_by: what ended it with batches left, under its loop (``load_state_dict``, ``skip(n)``), else ``""``.
        offset: the slot of the epoch's order the pass's split starts at (0; a resume on another split reads the
            rest of the epoch from there, ``gpupipe.loading.resplit``); ``start``, ``done`` and ``total`` count
            batches of that split.
    """

    epoch: int
    start: int
    done: int
    total: int
    live: bool = True
    ended_by: str = ""
    offset: int = 0

    @property
    def remaining(self) -> int:
        return self.total - self.done

    def end(self, by: str) -> None:
        """Ends the pass, ``by`` (``ended_by``) where it had batches left: asked for more, it then says so."""
        if self.live and self.remaining > 0:
            self.ended_by = by
        self.live = False

    def ended(self) -> str:
        """What a pass ended by ``ended_by`` says when its loop asks it for another batch."""
        return (
            f"the pass over epoch {self.epoch} was ended after {self.done} of {self.total} batches by "
            f"{self.ended_by}, which chose where the next pass starts (and what state_dict() says); "
            "start that pass with iter(loader) (a `for` loop over the loader) instead of reading on"
        )


class EpochCursor:
    """The epoch bookkeeping of a loader (see the module docstring for the rule)."""

    def __init__(self) -> None:
        self._next_epoch = 0
        # (epoch, batches done, offset, batches the saved run counted) of a loaded state
        self._resume: tuple[int, int, int, int] | None = None
        self._pass: Pass | None = None
        self._chosen = False  # set_epoch, load or skip since the last pass began
        self.aside: Callable[[], bool] | None = None  # a pass begun when it says so is read aside: no change here

    def set_epoch(self, epoch: int, *, loop_continues: bool = False) -> None:
        """The next pass reads ``epoch`` (a loaded state for another epoch is dropped).

        ``loop_continues``: the caller's loop goes on with the epoch of a loaded mid-epoch state although it
        sets the next one (Lightning, restarted from a checkpoint written when ``max_steps`` stopped that
        epoch, counts it as processed); ``epoch`` one after the state's then keeps the state.

        Raises:
            ValueError: ``epoch`` is not an int in ``0 .. MAX_EPOCH`` (``check_epoch``).
        """
        epoch = check_epoch(epoch)
        if loop_continues and self._resume is not None and self._resume[0] + 1 == epoch:
            return
        self._next_epoch = epoch
        self._chosen = True
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None

    def begin(self, total: int, *, ranks_shuffled: bool = False) -> Pass:
        """Starts a pass over the next epoch, which has ``total`` batches; ends any pass still live.

        ``ranks_shuffled``: several ranks share a shuffled order (rule 4 of the module docstring).
        """
        if self.aside is not None and self.aside():  # Lightning validates on its training loader: kept as it is
            return Pass(epoch=self.epoch, start=0, done=0, total=total)
        left = self._pass
        if left is not None:
            left.end("a new pass over this loader (iter(loader) again)")
        epoch = check_epoch(self._next_epoch, "the next pass")
        if ranks_shuffled and not self._chosen and left is not None and left.done < left.total:
            warnings.warn(
                f"this pass reads epoch {epoch} because the pass over epoch {left.epoch} was left after "
                f"{left.done} of {left.total} batches: under torch.distributed a pass that only some ranks "
                "start (a peek at a batch on one rank) moves only their epoch on, and the ranks then read "
                "overlapping shares of different epochs; call loader.set_epoch(epoch) at the start of every "
                "epoch, as with DistributedSampler",
                RanksMayPart,
                stacklevel=4,
            )
        self._chosen = False
        start = offset = 0
        if self._resume is not None:
            start, offset = min(self._resume[1], total), self._resume[2]
            self._resume = None
        self._pass = Pass(epoch=epoch, start=start, done=start, total=total, offset=offset)
        self._next_epoch = epoch + 1
        return self._pass

    def load(self, epoch: int, done: int, *, by: str = "load_state_dict", offset: int = 0, counted: int = -1) -> None:
        """The next pass reads ``epoch`` from batch ``done`` of its split from slot ``offset`` (``by``: what asked,
        for a pass it ends; ``counted``: the batches of the epoch the saved run counted, ``done`` where omitted)."""
        if self._pass is not None:
            self._pass.end(by)
        self._pass = None
        self._chosen = True
        self._next_epoch = epoch
        self._resume = (epoch, done, offset, done if counted < 0 else counted) if done or offset else None

    def skip(self, done: int) -> None:
        """The next pass starts at batch ``done`` of the epoch it reads (as ``load`` of that epoch).

        Raises:
            ValueError: a loaded state, not yet read, resumes at another batch (Accelerate's ``load_state``
                followed by the ``skip`` its ``skip_first_batches`` would do: the batches would repeat or be lost).
        """
        if self._resume is not None and done not in (self._resume[1], self._resume[3]):  # its batch, or the saved count
            epoch, at = self._resume[0], self._resume[3]
            raise ValueError(
                f"skip({done}): the state loaded (load_state_dict, or Accelerate's load_state) already resumes "
                f"epoch {epoch} at batch {at}; skipping to batch {done} instead would "
                f"{'repeat' if done < at else 'lose'} {abs(at - done)} batches: leave skip out"
            )
        if self._resume is None:  # else already where skip says: the loaded state's offset stays
            self.load(self._next_epoch, done, by=f"skip({done})")

    def state(self) -> tuple[int, int]:
        """``(epoch, batches done)``: where the next batch comes from (of the split from ``offset(epoch)``)."""
        current = self._pass
        if current is not None and current.live and current.remaining > 0:
            return current.epoch, current.done
        if self._resume is not None:
            return self._resume[:2]
        return self._next_epoch, 0

    def counted(self) -> int:
        """The batches of its epoch that the saved run of a loaded state, not yet read, counted (what Accelerate's
        ``skip`` after ``load_state`` says); 0 without one."""
        return self._resume[3] if self._resume is not None else 0

    def offset(self, epoch: int) -> int:
        """The slot the split of ``epoch`` starts at: that of the pass over it under way, or of the loaded state
        the next pass reads it from; else 0 (the whole epoch)."""
        current = self.current
        if current is not None:
            return current.offset if current.epoch == epoch else 0
        return self._resume[2] if self._resume is not None and self._resume[0] == epoch else 0

    @property
    def epoch(self) -> int:
        """The epoch of the pass under way, else the epoch the next pass reads."""
        current = self._pass
        if current is not None and current.live:
            return current.epoch
        return self._next_epoch

    @property
    def current(self) -> Pass | None:
        """The pass under way, if any."""
        return self._pass if self._pass is not None and self._pass.live else None

    def state_dict(self, *, rank: int, backend: str, match: dict[str, Any]) -> dict[str, Any]:
        """A loader's checkpoint: ``state``, with ``match`` (``resume_fields``): what a resume must match.

        Warns (``LeftPass``) where the last pass was left with batches to go and nothing chose the next epoch
        since: the state resumes at the next epoch, and a checkpoint on an exception meant the rest of the pass.
        """
        epoch, done = self.state()
        if done and self.current is not None and resplit.loop_ended(done):  # Lightning ended the epoch there
            epoch, done = epoch + 1, 0
        offset, left = self.offset(epoch), self._pass
        early = left is not None and not left.live and left.remaining > 0 and not self._chosen
        if left is not None and early and not resplit.loop_ended(left.done):
            warnings.warn(
                f"state_dict: the pass over epoch {left.epoch} was left after {left.done} of {left.total} batches "
                f"(a break, or an exception out of the loop), so this state resumes at epoch {epoch}, as the next "
                f"pass here reads it: the rest of epoch {left.epoch} is not read. To resume inside it (a checkpoint "
                "on an exception or Ctrl-C), take the state inside the loop, before leaving it; to say that the next "
                f"epoch is meant, call loader.set_epoch({epoch}) first",
                LeftPass,
                stacklevel=3,
            )
        state = {"format": 4 if offset else 3, "epoch": epoch, "batches_done": done, "rank": rank, "backend": backend}
        return {**state, **({"offset": offset} if offset else {}), **match}

    def load_state_dict(
        self, state: dict[str, Any], *, match: dict[str, Any], samples: int, rank: int
    ) -> tuple[int, ...]:
        """Loads a checkpoint of ``state_dict`` into rank ``rank`` of a loader whose ``resume_fields`` are
        ``match`` (epochs of ``samples`` slots).

        A field of ``match`` that the state records must be equal: another value would change the
        samples that follow; those of ``SPLIT`` may differ (rule 5 of the module docstring). A state
        of an older format that lacks some fields is loaded with a warning naming them (it was valid when it
        was written); ``seed`` it must have. Returns where the state resumes: ``(epoch, batches_done)``, with
        the ``offset`` of its split where that is not 0.

        Raises:
            ValueError: naming the first field that differs with both values, an epoch,
                ``batches_done`` or ``offset`` out of range, or a malformed state.
        """
        if not isinstance(state, Mapping) or any(name not in state for name in ("epoch", "batches_done", "seed")):
            raise ValueError(f"load_state_dict: not a gpupipe loader state: {reprlib.repr(state)}")  # cut short
        state = dict(state)
        for name in ("epoch", "batches_done", "seed", "format", "offset"):
            if name in state:  # an int, a numpy int or a 0-d integer tensor; not a bool, a float or a string
                try:
                    if isinstance(state[name], bool):
                        raise TypeError
                    state[name] = operator.index(state[name])
                except TypeError:
                    raise ValueError(f"load_state_dict: {name} must be an int, the state has {state[name]!r}") from None
        if state.get("format", 1) > STATE_FORMAT:
            raise ValueError(
                f"load_state_dict: format {state['format']} is newer than this gpupipe's ({STATE_FORMAT}): "
                "it was written by a later version"
            )
        epoch, done, offset = int(state["epoch"]), int(state["batches_done"]), int(state.get("offset", 0))
        state = {"world_size": 1, **state}  # format 1 had no world size: a single process
        fields, match = match, {name: value for name, value in match.items() if name not in SPLIT}
        split = {name: value for name, value in fields.items() if name in SPLIT}  # may differ (rule 5)
        for name, ours in match.items():
            if name in state and state[name] != ours:
                raise ValueError(_differs(name, state[name], ours, epoch, done))
        if ("draws" in state) != ("draws" in match):  # no loader before draws drew by weight
            saved, ours = ("draws by weight", "does not") if "draws" in state else ("does not draw by weight", "does")
            raise ValueError(f"load_state_dict: the state's loader {saved}, this loader {ours}; {_WHY['draws']}")
        check_epoch(epoch, "load_state_dict")
        if not 0 <= offset < samples:
            raise ValueError(f"load_state_dict: offset {offset} is outside 0..{samples - 1} (epoch {epoch})")
        if offset and state.get("format", 1) < 4:
            raise ValueError(
                f"load_state_dict: a state of format {state.get('format', 1)} has no offset (format 4 records it), "
                f"this one has offset {offset}"
            )
        if not done and not offset:  # at an epoch's start nothing of it is read: the epoch as this loader reads it
            split = {}
        moved = resplit.resumed(state, split, samples=samples, offset=offset, done=done)
        recorded = ("batch_size", "drop_last", "even_batches")[: 3 if state["world_size"] > 1 else 2]
        missing = [
            name for name in fields if name not in state and (name in match or (name in split and name in recorded))
        ]
        if missing:
            warnings.warn(
                f"load_state_dict: this state (format {state.get('format', 1)}) does not record "
                f"{', '.join(missing)}: resuming without checking that they match",
                stacklevel=3,
            )
        if moved is not None and moved >= samples:  # every slot was read: the next epoch is what follows
            self.load(epoch + 1, 0)
            return epoch + 1, 0
        counted, (offset, done) = done, (offset, done) if moved is None else (moved, 0)
        batches = Split.of(split).batches(samples - offset, rank) if split else 0
        if not 0 <= done <= batches:
            raise ValueError(f"load_state_dict: batches_done {done} is outside 0..{batches} (epoch {epoch})")
        if offset:  # a rest of the epoch: Lightning's loop must count it to its end
            resplit.check_loop(state, batches - done, Split.of(split).batches(samples, rank))
        self.load(epoch, done, offset=offset, counted=counted)
        return (epoch, done, offset) if offset else (epoch, done)


#: Why each field of ``resume_fields`` must match (the error says it).
_WHY = {
    "seed": (
        "the order and the augmentations are drawn from it (gpupipe.DataLoader takes it from its generator, or "
        "else from torch.initial_seed(): seed them in the resumed process as in the one saved)"
    ),
    "shuffle": "it decides the order",
    "samples": "the order is a permutation of the dataset's samples",
    "dataset": (
        "the order is a permutation of these samples (the digest of their names; a random_split or "
        "SubsetRandomSampler drawn again without its seeded generator picks others)"
    ),
    "draws": "the order is drawn by these weights, num_samples and replacement",
}


def _differs(name: str, saved: Any, ours: Any, epoch: int, done: int) -> str:
    """Why a state whose ``name`` is ``saved`` is refused by a loader whose ``name`` is ``ours`` (the state resumes
    ``epoch`` at batch ``done``), and what would do."""
    said = f"load_state_dict: {name} differs: the state has {name} {saved!r}, this loader {name} {ours!r}; {_WHY[name]}"
    if done:
        return f"{said}, so the rest of the epoch would repeat or skip samples"
    said += f", so the epochs from {epoch} on would not be those of the run saved"
    if name in ("samples", "dataset"):
        said += f"; to read the changed dataset from epoch {epoch} on, call loader.set_epoch({epoch}) instead"
    return said


#: The last few names lists digested, with their digests (the list is held, so its id stays its own).
_DIGESTS: list[tuple[Sequence[str], str]] = []


def _digest_of(names: Sequence[str]) -> str:
    """``listing_digest`` (gpupipe.loading.agreement) of a source's names, computed once per list (a
    million names take about a second; ``state_dict()`` may be called every few steps)."""
    from .agreement import listing_digest

    for held, digest in _DIGESTS:
        if held is names:
            return digest
    digest = listing_digest(names)
    _DIGESTS[:] = [(names, digest)] + _DIGESTS[:3]
    return digest


def resume_fields(config: Any, world_size: int, names: Sequence[str], draws: Any = None) -> dict[str, Any]:
    """What decides the samples after ``batches_done``: the settings and the dataset (its sample
    count and ``listing_digest``); ``even_batches`` only with several ranks, ``draws`` (its digest) only
    for epochs drawn by weight."""
    fields = {
        "seed": config.seed,
        "world_size": world_size,
        "batch_size": config.batch_size,
        "shuffle": config.shuffle,
        "drop_last": config.drop_last,
        "samples": len(names),
        "dataset": _digest_of(names),
    }
    if world_size > 1:
        fields["even_batches"] = config.even_batches
    if draws is not None:
        fields["draws"] = draws.digest()
    return fields
