"""A run's planned parameters, packed into two arrays and fed to DALI once per batch.

Every op's parameters are drawn on the host (:mod:`gpupipe.plan`), but not
per batch in the feeding callback: they are drawn for a few batches at a time
(vectorised; :data:`PLAN_BATCHES`, :data:`PLAN_CHUNK`) on a background
thread, a chunk ahead of the pipeline, and packed per sample into one float32 row and one int32 row. The
pipeline takes one slice of each per iteration through a single
``external_source``, and the graph cuts each parameter out of its row
(``row[offset:offset + size]``, reshaped), so the host work per batch is one
small copy, not one feed per parameter and a planner call.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from math import prod
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from nvidia.dali import fn

Key = Tuple[int, str]  # (op index, parameter name)

#: Samples planned at once: whole batches, at most :data:`PLAN_BATCHES` of them, at least one.
PLAN_CHUNK = 4_096
#: Batches planned at once (planned ahead of a batch is work lost if the run ends there, and some
#: planners, such as a detection IoU crop's, work one sample at a time in Python).
PLAN_BATCHES = 8


@dataclass(frozen=True)
class Slot:
    """Where one parameter lives in a packed row: ``row[offset:offset + size]`` reshaped to ``shape``."""

    integer: bool
    offset: int
    shape: Tuple[int, ...]

    @property
    def size(self) -> int:
        return int(prod(self.shape))


class ParamLayout:
    """The packed rows' layout for a set of parameters.

    Args:
        steps: an example plan's steps (per op, name -> ``(B, ...)`` array); gives each parameter's
            per-sample shape and kind (floats travel as float32, integers and booleans as int32).
        keys: the parameters to pack, as ``(op index, name)``.
    """

    def __init__(self, steps: Sequence[Dict[str, np.ndarray]], keys: Sequence[Key]) -> None:
        self.keys = list(keys)
        self.slots: Dict[Key, Slot] = {}
        width = {False: 0, True: 0}
        for j, name in self.keys:
            values = np.asarray(steps[j][name])
            integer = values.dtype.kind != "f"
            shape = tuple(int(d) for d in values.shape[1:])
            self.slots[(j, name)] = Slot(integer, width[integer], shape)
            width[integer] += int(prod(shape))
        self.float_width, self.int_width = width[False], width[True]

    @property
    def outputs(self) -> int:
        """How many arrays a batch's parameters travel in (0, 1 or 2)."""
        return int(self.float_width > 0) + int(self.int_width > 0)

    def pack(self, steps: Sequence[Dict[str, np.ndarray]], count: int) -> List[np.ndarray]:
        """``count`` samples' parameters as ``[(count, F) float32, (count, I) int32]`` (empty kinds left out)."""
        rows = {
            False: np.empty((count, self.float_width), np.float32),
            True: np.empty((count, self.int_width), np.int32),
        }
        for (j, name), slot in self.slots.items():
            rows[slot.integer][:, slot.offset : slot.offset + slot.size] = np.asarray(steps[j][name]).reshape(count, -1)
        return [rows[kind] for kind, width in ((False, self.float_width), (True, self.int_width)) if width]

    def nodes(self, packed: Sequence) -> "ParamNodes":
        """The graph's parameter nodes cut from the packed input nodes."""
        return ParamNodes(self, packed)


class ParamNodes:
    """``params[j, name]``: op ``j``'s parameter as a DALI node (made once, on first use; uses are recorded)."""

    def __init__(self, layout: ParamLayout, packed: Sequence) -> None:
        self.layout = layout
        it = iter(packed)
        self._rows = {False: next(it) if layout.float_width else None, True: next(it) if layout.int_width else None}
        self._made: Dict[Key, object] = {}
        self.used: List[Key] = []

    def __getitem__(self, key: Key):
        if key not in self._made:
            slot = self.layout.slots[key]
            row = self._rows[slot.integer]
            assert row is not None  # the layout has a row of each kind it has slots of
            if slot.shape == ():
                node = row[slot.offset]
            else:
                node = row[slot.offset : slot.offset + slot.size]
                if len(slot.shape) > 1:
                    node = fn.reshape(node, shape=list(slot.shape))
            self._made[key] = node
            self.used.append(key)
        return self._made[key]


class RunParams:
    """The packed parameters of a run's batches, planned a chunk of batches at a time.

    The first chunk is planned when the run is made (the run's first batches wait for nothing);
    asking for a batch of chunk ``c`` starts planning chunk ``c + 1`` on ``executor``, and waits for
    chunk ``c`` if it is still being planned there.

    Args:
        refs: the run's batches (each ``batch_size`` samples, padded).
        plan: ``plan(refs) -> packed rows`` for a list of batches.
        executor: where chunks are planned ahead.
    """

    def __init__(self, refs: Sequence, plan: Callable[[Sequence], List[np.ndarray]], executor: Executor) -> None:
        self.refs, self.plan, self.executor = refs, plan, executor
        self.batch_size = refs[0].indices.shape[0]
        self.per_chunk = max(1, min(PLAN_BATCHES, PLAN_CHUNK // self.batch_size))
        self._chunks: Dict[int, Future] = {}
        self._lock = threading.Lock()
        done: Future = Future()
        done.set_result(self._plan_chunk(0))
        self._chunks[0] = done

    def batch(self, k: int) -> List[np.ndarray]:
        """Batch ``k``'s packed rows: ``[(batch_size, F) float32, (batch_size, I) int32]``."""
        chunk = k // self.per_chunk
        self._ahead(chunk + 1)
        with self._lock:
            future = self._chunks.get(chunk)
        rows = future.result() if future is not None else self._plan_chunk(chunk)
        with self._lock:  # chunks before this one are not asked for again
            for old in [c for c in self._chunks if c < chunk]:
                del self._chunks[old]
        start = (k - chunk * self.per_chunk) * self.batch_size
        return [r[start : start + self.batch_size] for r in rows]

    def _ahead(self, chunk: int) -> None:
        if chunk * self.per_chunk >= len(self.refs):
            return
        with self._lock:
            if chunk not in self._chunks:
                self._chunks[chunk] = self.executor.submit(self._plan_chunk, chunk)

    def _plan_chunk(self, chunk: int) -> List[np.ndarray]:
        return self.plan(self.refs[chunk * self.per_chunk : (chunk + 1) * self.per_chunk])


__all__ = ["ParamLayout", "ParamNodes", "RunParams", "Slot", "PLAN_CHUNK", "PLAN_BATCHES"]
