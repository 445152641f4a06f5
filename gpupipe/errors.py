"""One vocabulary for bad input, used by the loader, the backends, the scan and the packer.

* :class:`Error` is the base of every gpupipe exception.
* :class:`OnError` is the policy: ``"raise"`` stops naming the file,
  ``"skip"`` leaves it out and lists it.
* :class:`Skipped` is one left-out file and its reason (the only shape a
  reason travels in).
* :class:`DecodeError` is a decoder's failure on one sample (inside a
  backend); :class:`SampleError` is what a loader raises for a sample that
  failed while loading (``on_error="raise"``); both name the sample.
* :class:`SkipLog` collects what a loader left out, logging each file once.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Iterable, List, Union

logger = logging.getLogger("gpupipe.scan")


class OnError(str, enum.Enum):
    """What to do with a sample that cannot be used."""

    RAISE = "raise"
    SKIP = "skip"

    @classmethod
    def parse(cls, value: Union[str, "OnError"], *, name: str = "on_error") -> "OnError":
        """Accepts ``"raise"``, ``"skip"`` or an :class:`OnError`.

        Raises:
            ValueError: naming the argument and the value.
        """
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{name} must be 'raise' or 'skip', got {value!r}") from None


@dataclass(frozen=True)
class Skipped:
    """A sample left out, and why.

    Attributes:
        path: the file (or ``shard.tar#member``) that failed.
        reason: one line, e.g. ``"empty file (0 bytes)"`` or ``"cannot decode: ..."``.
    """

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class Error(Exception):
    """The base of every exception gpupipe defines: ``except gpupipe.Error`` catches any of them.

    Each also keeps its built-in base (``ValueError``, ``RuntimeError``), so
    code that catches those still works. Argument errors raised while a
    loader is built are plain ``ValueError`` / ``TypeError``, as in Python
    itself.
    """


class DecodeError(Error, RuntimeError):
    """A sample that failed while it was being loaded.

    Attributes:
        skipped: the file and the reason; ``str(err)`` is ``"cannot decode <path>: <reason>"``.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.skipped = Skipped(path, reason)
        super().__init__(f"cannot decode {path}: {reason}")


class SampleError(Error, RuntimeError):
    """A sample that could not be used while loading (``on_error="raise"``); ``str(err)`` is
    ``"<path>: <reason>"``.

    Attributes:
        skipped: the file and the reason.
    """

    def __init__(self, skipped: Skipped) -> None:
        self.skipped = skipped
        super().__init__(str(skipped))


def listing(entries: Iterable[Skipped], limit: int = 20) -> str:
    """Indented lines ``path: reason``, at most ``limit`` of them, then ``... and N more``."""
    entries = list(entries)
    lines = [f"  {entry}" for entry in entries[:limit]]
    if len(entries) > limit:
        lines.append(f"  ... and {len(entries) - limit} more")
    return "\n".join(lines)


def plural(count: int, noun: str, plural_form: str = "") -> str:
    """``"1 file"``, ``"3 files"``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


class SkipLog:
    """Every sample a loader left out, each logged once (logger ``gpupipe.scan``, WARNING).

    Attributes:
        entries: the skipped samples, in the order they were found.
    """

    def __init__(self) -> None:
        self.entries: List[Skipped] = []
        self._seen: set = set()

    def add(self, entry: Skipped) -> None:
        if entry.path in self._seen:
            return
        self._seen.add(entry.path)
        self.entries.append(entry)
        logger.warning("skipping %s: %s", entry.path, entry.reason)

    def __contains__(self, path: str) -> bool:
        return path in self._seen

    def __len__(self) -> int:
        return len(self.entries)
