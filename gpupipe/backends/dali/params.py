"""A run's planned parameters, packed into two arrays and fed to DALI once per batch.

Every op's parameters are drawn on the host (``gpupipe.plan``), but not
per batch in the feeding callback: they are drawn for a few batches at a time
(vectorised; ``PLAN_BATCHES``, ``PLAN_CHUNK``) on a background
thread, a chunk ahead of the pipeline, and packed per sample into one int32 row (floats
travel as their float32 bits). The pipeline takes one slice per iteration through
a single ``external_source`` output, and the graph cuts each parameter out of the
row (``row[offset:offset + size]``, reshaped; floats read through one
``reinterpret`` of the row), so the host work per batch is one small copy, not one
feed per parameter and a planner call. Each output of an ``external_source`` costs
the feeding thread about 0.1 ms per batch in DALI's Python and C++ layers (measured
on a CPU), so the parameters travel in one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from math import prod

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali.tensors import TensorListCPU

Key = tuple[int, str]  # (op index, parameter name)

#: Samples planned at once: whole batches, at most ``PLAN_BATCHES`` of them, at least one.
PLAN_CHUNK = 4_096
#: Batches planned at once (planned ahead of a batch is work lost if the run ends there, and some
#: planners, such as a detection IoU crop's, work one sample at a time in Python).
PLAN_BATCHES = 8


@dataclass(frozen=True)
class Slot:
    """Where one parameter lives in a packed row: ``row[offset:offset + size]`` reshaped to ``shape``."""

    integer: bool
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(prod(self.shape))


class ParamLayout:
    """The packed row's layout for a set of parameters.

    Args:
        steps: an example plan's steps (per op, name -> ``(B, ...)`` array); gives each parameter's
            per-sample shape and kind (floats travel as float32 bits, integers and booleans as int32).
        keys: the parameters to pack, as ``(op index, name)``.
    """

    def __init__(self, steps: Sequence[dict[str, np.ndarray]], keys: Sequence[Key]) -> None:
        self.keys = list(keys)
        self.slots: dict[Key, Slot] = {}
        width = {False: 0, True: 0}
        offset = 0
        for j, name in self.keys:
            values = np.asarray(steps[j][name])
            integer = values.dtype.kind != "f"
            shape = tuple(int(d) for d in values.shape[1:])
            self.slots[(j, name)] = Slot(integer, offset, shape)
            offset += int(prod(shape))
            width[integer] += int(prod(shape))
        self.width = offset
        self.float_width, self.int_width = width[False], width[True]

    @property
    def outputs(self) -> int:
        """How many arrays a batch's parameters travel in (0 or 1)."""
        return int(self.width > 0)

    def pack(self, steps: Sequence[dict[str, np.ndarray]], count: int) -> list[np.ndarray]:
        """``count`` samples' parameters as ``[(count, W) int32]`` (float slots hold float32 bits; empty: ``[]``)."""
        if not self.width:
            return []
        row = np.empty((count, self.width), np.int32)
        floats = row.view(np.float32)
        for (j, name), slot in self.slots.items():
            into = row if slot.integer else floats
            into[:, slot.offset : slot.offset + slot.size] = np.asarray(steps[j][name]).reshape(count, -1)
        return [row]

    def nodes(self, packed: Sequence) -> ParamNodes:
        """The graph's parameter nodes cut from the packed input nodes."""
        return ParamNodes(self, packed)


class ParamNodes:
    """``params[j, name]``: op ``j``'s parameter as a DALI node (made once, on first use; uses are recorded)."""

    def __init__(self, layout: ParamLayout, packed: Sequence) -> None:
        self.layout = layout
        self._row = packed[0] if layout.width else None
        self._floats = None  # the row read as float32, made once where a float is used
        self._made: dict[Key, object] = {}
        self.used: list[Key] = []

    def __getitem__(self, key: Key):
        if key not in self._made:
            slot = self.layout.slots[key]
            assert self._row is not None  # the layout has a row where it has slots
            if not slot.integer and self._floats is None:
                self._floats = fn.reinterpret(self._row, dtype=types.FLOAT)
            row = self._row if slot.integer else self._floats
            assert row is not None
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
    chunk ``c`` if it is still being planned there. Each batch's rows are also wrapped as DALI
    ``TensorListCPU`` objects there (``feed``), so the pipeline's feeding thread only hands them over.

    Args:
        refs: the run's batches (each ``batch_size`` samples, padded).
        plan: ``plan(refs) -> packed rows`` for a list of batches.
        executor: where chunks are planned ahead.
    """

    def __init__(self, refs: Sequence, plan: Callable[[Sequence], list[np.ndarray]], executor: Executor) -> None:
        self.refs, self.plan, self.executor = refs, plan, executor
        self.batch_size = refs[0].indices.shape[0]
        self.per_chunk = max(1, min(PLAN_BATCHES, PLAN_CHUNK // self.batch_size))
        self._chunks: dict[int, Future] = {}
        self._lock = threading.Lock()
        done: Future = Future()
        done.set_result(self._plan_chunk(0))
        self._chunks[0] = done

    def batch(self, k: int) -> list[np.ndarray]:
        """Batch ``k``'s packed rows: ``[(batch_size, W) int32]``."""
        rows, _ = self._chunk_of(k)
        start = (k % self.per_chunk) * self.batch_size
        return [r[start : start + self.batch_size] for r in rows]

    def feed(self, k: int) -> list:
        """Batch ``k``'s packed rows as DALI ``TensorListCPU`` objects (what ``external_source`` is given)."""
        _, lists = self._chunk_of(k)
        return lists[k % self.per_chunk]

    def _chunk_of(self, k: int) -> tuple[list[np.ndarray], list[list]]:
        chunk = k // self.per_chunk
        self._ahead(chunk + 1)
        with self._lock:
            future = self._chunks.get(chunk)
        planned = future.result() if future is not None else self._plan_chunk(chunk)
        with self._lock:  # chunks before this one are not asked for again
            for old in [c for c in self._chunks if c < chunk]:
                del self._chunks[old]
        return planned

    def _ahead(self, chunk: int) -> None:
        if chunk * self.per_chunk >= len(self.refs):
            return
        with self._lock:
            if chunk not in self._chunks:
                self._chunks[chunk] = self.executor.submit(self._plan_chunk, chunk)

    def _plan_chunk(self, chunk: int) -> tuple[list[np.ndarray], list[list]]:
        """The chunk's rows, and per batch its rows wrapped for DALI (sharing their memory, never written again)."""
        refs = self.refs[chunk * self.per_chunk : (chunk + 1) * self.per_chunk]
        rows = self.plan(refs)
        bs = self.batch_size
        lists = [[TensorListCPU(r[m * bs : (m + 1) * bs]) for r in rows] for m in range(len(refs))]
        return rows, lists


__all__ = ["ParamLayout", "ParamNodes", "RunParams", "Slot", "PLAN_CHUNK", "PLAN_BATCHES"]
