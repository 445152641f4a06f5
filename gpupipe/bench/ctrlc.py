"""Ctrl-C during the bench's rounds: noted, and acted on between batches, where the bench can keep the
repeats done (an interrupt raised at any point could land in a loader's cleanup, be printed there as
``Exception ignored``, and be lost)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class CtrlC:
    """Whether SIGINT arrived while the rounds ran (``pressed``); ``check()`` acts on it."""

    def __init__(self) -> None:
        self.pressed = False

    def check(self) -> None:
        """Raises ``KeyboardInterrupt`` once Ctrl-C was pressed (the bench calls it before each batch)."""
        if self.pressed:
            raise KeyboardInterrupt


@contextlib.contextmanager
def noting(ctrl_c: CtrlC) -> Iterator[None]:
    """The first Ctrl-C only sets ``ctrl_c.pressed`` (the next batch, or a loader whose worker processes
    the same Ctrl-C stopped, ends the round); a second one interrupts at once, as Python's handler does.
    Outside the main thread, where no handler can be set, or where SIGINT is ignored, it notes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        yield
        return

    def note(signum, frame) -> None:
        if not ctrl_c.pressed:
            ctrl_c.pressed = True
            return
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
