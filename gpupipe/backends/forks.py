"""Loaders across ``os.fork()``: a child inherits the parent's loaders, DataLoader workers and DALI pipelines,
none of which are its own.

A child that used or dropped them would act on the parent's: an inherited DataLoader iterator, freed in the
child, sets the event that stops the parent's workers, and the child's normal exit (``multiprocessing``'s
exit hook) sends SIGTERM to every daemon process it believes its own, the parent's workers among them; torch's
SIGCHLD watch of those workers, keyed by the iterator's address, refuses a new iterator at that address. So in a
forked child every tracked DataLoader iterator is marked shut down (freeing it does nothing) and its workers are
forgotten; a torchvision loader used in the child starts workers of its own, a pass started in the parent and
read on in the child is refused (``ForkedLoader``), as is a DALI loader (its threads are the parent's).
"""

from __future__ import annotations

import multiprocessing.process
import os
import weakref
from collections.abc import Iterator
from typing import Any, TypeVar

from ..errors import Error

T = TypeVar("T")

#: DataLoader iterators of gpupipe's backends that may hold worker processes.
_ITERATORS: weakref.WeakSet = weakref.WeakSet()


class ForkedLoader(Error, RuntimeError):
    """A loader, or a pass, used in a process forked from the one that built it (its pipelines' threads, or the
    workers its pass reads from, are the parent's)."""


def track(iterator: Any) -> Any:
    """Registers a DataLoader iterator (returned as it is) to be left alone in forked children."""
    if hasattr(iterator, "_workers"):
        _ITERATORS.add(iterator)
    return iterator


def refuse_in_fork(owner: int, what: str, fix: str) -> None:
    """Raises ``ForkedLoader`` in a process other than ``owner`` (``what``: "this loader was built"), saying ``fix``.

    Raises:
        ForkedLoader: naming both processes.
    """
    if os.getpid() != owner:
        raise ForkedLoader(f"{what} in process {owner} and is used in {os.getpid()}, forked from it: {fix}")


#: Why a pass reading from DataLoader workers cannot go on in a forked child, and what to do.
WORKERS_FIX = "its workers answer the parent; start a new pass in the child (iter(loader)), which starts its own"


def owned(batches: Iterator[T], fix: str = WORKERS_FIX) -> Iterator[T]:
    """``batches`` (a pass), refused with ``ForkedLoader`` saying ``fix`` when a forked child reads on: its
    workers or threads answer the parent, whose batches the child would take (or wait for forever).

    Raises:
        ForkedLoader: in a process other than the one that started the pass.
    """
    owner = os.getpid()
    while True:
        refuse_in_fork(owner, "this pass was started", fix)
        try:
            item = next(batches)
        except StopIteration:
            return
        yield item


def shut_down(iterator: Any) -> None:
    """Stops a DataLoader iterator's worker processes (torch's ``_shutdown_workers``), at once.

    torch stops a worker by a message through its index queue, then waits 5 s for it before killing it. When
    the iterator was held in a reference cycle and is being freed by the cyclic garbage collector, the
    collector has already run the queues' finalizers (weakref callbacks come before ``__del__``): their feeder
    threads have ended, the message is never sent, and each worker cost 5 s. Such workers are stopped here with
    SIGTERM from their parent, which torch's workers take as a clean exit. An iterator already shut down, or
    inherited by a forked child (marked shut down there), is left as it is.
    """
    if getattr(iterator, "_shutdown", True):
        return
    if any(_finalized(queue) for queue in getattr(iterator, "_index_queues", ())):
        for worker in getattr(iterator, "_workers", ()):
            if worker.is_alive():
                worker.terminate()
    iterator._shutdown_workers()


def _finalized(queue: Any) -> bool:
    """Whether a ``multiprocessing`` queue's garbage finalizer has run (its feeder thread sends nothing more)."""
    finalizer = getattr(queue, "_close", None)  # set when its feeder thread started; None again after close()
    return finalizer is not None and not finalizer.still_active()


def _forget_in_child() -> None:
    for iterator in list(_ITERATORS):
        iterator._shutdown = True  # torch's _shutdown_workers (its __del__) then does nothing
        for worker in getattr(iterator, "_workers", ()):
            multiprocessing.process._children.discard(worker)  # type: ignore[attr-defined]
        if getattr(iterator, "_worker_pids_set", False):  # torch's SIGCHLD watch list, keyed by id(iterator):
            from torch.utils.data._utils.signal_handling import _remove_worker_pids

            _remove_worker_pids(id(iterator))  # else a new iterator at the freed one's address is refused
            iterator._worker_pids_set = False
    _ITERATORS.clear()


os.register_at_fork(after_in_child=_forget_in_child)
