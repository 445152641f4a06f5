"""SIGTERM (``kill``, a scheduler's time limit, ``docker stop``) stops a pack as Ctrl-C does: the unfinished
shard is dropped, the worker processes end without a traceback each, and the command says how to resume."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Whether SIGTERM arrived within ``sigterm_stops`` (it raises ``KeyboardInterrupt``, so it is handled as Ctrl-C).
_RECEIVED: dict[str, bool] = {"sigterm": False}


def _raise_interrupt(signum, frame) -> None:
    _RECEIVED["sigterm"] = True
    raise KeyboardInterrupt


def terminated() -> bool:
    """Whether the last ``KeyboardInterrupt`` came from SIGTERM (not Ctrl-C)."""
    return _RECEIVED["sigterm"]


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` in the main thread (elsewhere: unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def in_worker() -> None:
    """In a converting process: Ctrl-C and SIGTERM are the packer's to handle (it ends the pool), and the
    pool's SIGTERM ends the process quietly (the handler ``sigterm_stops`` set was inherited by the fork)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
