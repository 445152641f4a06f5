"""Progress for long work (the cold scan, WebDataset indexing, downloads, ``pack --verify``).

One rule for all of them: nothing for work that ends within ``DELAY_S``
seconds; past that, a tqdm bar on stderr where stderr is a terminal, else
(a log file, a CI job) a ``logging`` INFO line every ``LOG_EVERY_S``
seconds with the count, the rate and the time left, and one when the work
ends: ``(done in N s)``, or ``(interrupted after N s)`` where it stopped short
(an exception left the ``with`` block, or fewer units than ``total`` were done).

    with Progress("scan", total=len(names), unit="file", logger=logger) as progress:
        for name in names:
            ...
            progress.update(1)
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

#: Work shows progress once it has lasted this many seconds (shorter work shows none).
DELAY_S = 3.0
#: Seconds between two log lines where stderr is not a terminal.
LOG_EVERY_S = 10.0


def is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is an interactive terminal (a bar there; log lines elsewhere)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class Progress:
    """Counts work done and shows it by the rule above.

    Args:
        desc: what is being done, e.g. ``"scan"``.
        total: units of work (``None``: unknown).
        unit: the unit's name, e.g. ``"file"`` or ``"B"`` (bytes, shown scaled).
        logger: where the log lines go when stderr is not a terminal.
        stream: the bar's stream (default: ``sys.stderr`` when progress starts).
        clock: seconds, for tests.
    """

    def __init__(
        self,
        desc: str,
        total: float | None = None,
        *,
        unit: str = "it",
        logger: logging.Logger | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.logger = logger or logging.getLogger("gpupipe")
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.done: float = 0
        self.bar = None
        self.logged_at: float | None = None
        self.mode = "quiet"  # until DELAY_S has passed: then "bar" or "log"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(interrupted=exc_type is not None)

    def update(self, n: float = 1) -> None:
        """Adds ``n`` units done."""
        self.done += n
        now = self.clock()
        if self.mode == "quiet" and now - self.started >= DELAY_S:
            self._start()
        if self.mode == "bar" and self.bar is not None:
            self.bar.update(self.done - self.bar.n)
        elif self.mode == "log" and (self.logged_at is None or now - self.logged_at >= LOG_EVERY_S):
            self.logged_at = now
            self.logger.info("%s", self.line(now))

    def _start(self) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        if not is_terminal(stream):
            self.mode = "log"
            return
        from tqdm import tqdm

        self.mode = "bar"
        scale = self.unit == "B"
        self.bar = tqdm(
            total=self.total, desc=self.desc, unit=self.unit, unit_scale=scale, unit_divisor=1024, file=stream
        )

    def line(self, now: float | None = None) -> str:
        """``scan: 1,200/5,000 files, 400 files/s, about 10 s left`` (the log line)."""
        elapsed = max((self.clock() if now is None else now) - self.started, 1e-9)
        rate = self.done / elapsed
        word = "" if self.unit == "B" else f" {self.unit}s"
        count = _amount(self.done, self.unit) + (f"/{_amount(self.total, self.unit)}" if self.total else "")
        text = f"{self.desc}: {count}{word}, {_amount(rate, self.unit)}{word}/s"
        if self.total and rate > 0:
            text += f", about {max(0.0, (self.total - self.done) / rate):.0f} s left"
        return text

    def close(self, interrupted: bool = False) -> None:
        """Ends the bar, or logs the last line where log lines were given: ``(done in N s)``, or
        ``(interrupted after N s)`` where ``interrupted`` or fewer than ``total`` units were done."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.mode == "log":
            short = interrupted or (self.total is not None and self.done < self.total)
            end = "interrupted after" if short else "done in"
            self.logger.info("%s (%s %.0f s)", self.line(), end, self.clock() - self.started)
        self.mode = "closed"


def _amount(value: float, unit: str) -> str:
    """``1,234``, ``0.4``; bytes scaled: ``1.5 MiB``."""
    if unit == "B":
        for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if value >= scale:
                return f"{value / scale:.1f} {name}"
        return f"{value:.0f} B"
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.1f}"
