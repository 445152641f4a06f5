"""Keeping DALI's GPU buffers alive until the kernels that read them have finished.

With ``exec_dynamic=True`` a batch reaches torch through DLPack without a
copy: the torch tensor shares DALI's buffer, and DALI makes torch's current
stream wait until the buffer is ready (``ToDLMTensor`` in DALI's
``backend_impl.cc``), so reads are ordered after DALI's writes. Nothing
orders the other end: when the last torch reference goes, the buffer
returns to DALI's pool at once, while kernels torch has queued on it (the
training step, a dtype conversion) may not have run yet; DALI could then
write the next batch into it. torch's ``record_stream`` does not help, as
the memory is not torch's.

So each batch's buffers are held until a CUDA event, recorded on the
consumer's stream when it asks for the following batch (after it has
queued every kernel that uses the current one), has completed.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import forks

#: Every pipeline gpupipe built that is still alive.
_PIPELINES: weakref.WeakSet = weakref.WeakSet()
_KEPT_IN_CHILD: list[Any] = []


def track(pipe) -> Any:
    """Registers a pipeline for ``_keep_after_fork``; returns it."""
    _PIPELINES.add(pipe)
    return pipe


#: Why a DALI loader cannot be read in a forked child, and what to do.
FORK_FIX = (
    "DALI's pipelines and threads do not survive a fork; build the loader in the child (or fork before building it)"
)


def refuse_in_fork(owner: int) -> None:
    """Raises ``ForkedLoader`` in a process other than ``owner`` (the pid that built the pipelines): reading
    there would wait forever on threads that exist only in the parent."""
    forks.refuse_in_fork(owner, "this DALI loader was built", FORK_FIX)


def _keep_after_fork() -> None:
    """In a forked child (a DataLoader worker, a multiprocessing pool), the parent's DALI pipelines
    must never be destroyed: their destructors join threads that do not exist in the child and
    would hang it. Keeping a reference makes sure the child's garbage collector leaves them alone,
    and DALI's own exit hook (which shuts every pipeline down, and crashed a child that exits
    normally) is made to forget them."""
    _KEPT_IN_CHILD.extend(_PIPELINES)
    from nvidia.dali.pipeline import Pipeline

    for pipe in _PIPELINES:
        Pipeline._pipes.discard(weakref.ref(pipe))
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(pipe))  # never freed, not even as the interpreter ends


os.register_at_fork(after_in_child=_keep_after_fork)


class KeepAlive:
    """Holds the buffers of handed-out batches until the consumer's stream has passed them.

    Args:
        record_event: records an event on the consumer's current stream and
            returns it (an object with ``query() -> bool``, true once completed).
    """

    def __init__(self, record_event: Callable[[], Any]) -> None:
        self.record_event = record_event
        self._current: list[Any] = []
        self._pending: deque[tuple[Any, list[Any]]] = deque()

    def handed_out(self, buffers: list[Any]) -> None:
        """The batch made of ``buffers`` goes to the consumer."""
        self._current = list(buffers)

    def asked_again(self) -> None:
        """The consumer asks for the next batch: it has queued all its work on the current one."""
        if self._current:
            self._pending.append((self.record_event(), self._current))
            self._current = []
        while self._pending and self._pending[0][0].query():
            self._pending.popleft()

    @property
    def held(self) -> int:
        """Batches whose buffers are still held."""
        return len(self._pending) + (1 if self._current else 0)

    def release_all(self, synchronize: Callable[[], None]) -> None:
        """Waits for the device (``synchronize``) and lets every buffer go (end of a run)."""
        if self._pending or self._current:
            synchronize()
        self._pending.clear()
        self._current = []


def cuda_keep_alive(device) -> KeepAlive:
    """A ``KeepAlive`` recording events on ``device``'s current stream."""
    import torch

    def record():
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        return event

    return KeepAlive(record)
