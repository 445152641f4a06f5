"""One vocabulary for bad input, used by the loader, the backends, the scan and the packer.

* [`Error`][gpupipe.Error] is the base of every gpupipe exception.
* [`OnError`][gpupipe.OnError] is the user's choice: ``"raise"`` stops naming the file,
  ``"skip"`` leaves it out and lists it; ``ErrorPolicy`` applies it, in
  one place, wherever bad samples are found (the loader's scan, a sample
  failing while loading, the packer).
* [`Skipped`][gpupipe.Skipped] is one left-out file and its reason (the only shape a
  reason travels in).
* [`SampleError`][gpupipe.SampleError] is what ``"raise"`` raises, naming every refused
  sample; ``DecodeError`` is a decoder's failure on one sample inside
  a backend, before the policy sees it.
* ``SkipLog`` collects what was left out, logging each file once.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("gpupipe.skipped")  # every sample left out, wherever it was found


class OnError(str, enum.Enum):
    """What to do with a sample that cannot be used."""

    RAISE = "raise"
    SKIP = "skip"

    @classmethod
    def parse(cls, value: str | OnError, *, name: str = "on_error") -> OnError:
        """Accepts ``"raise"``, ``"skip"`` or an [`OnError`][gpupipe.OnError].

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


class PathNotFound(Error, FileNotFoundError, ValueError):
    """A dataset path (a folder, a list or annotation file) that does not exist; ``str(err)`` names it.

    A ``FileNotFoundError``, as torchvision's datasets raise, and a ``ValueError``, as gpupipe's other
    refusals of a source are.
    """


class DecodeError(Error, RuntimeError):
    """A sample that failed while it was being loaded.

    Attributes:
        skipped: the file and the reason; ``str(err)`` is ``"cannot decode <path>: <reason>"``.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.skipped = Skipped(path, reason)
        super().__init__(f"cannot decode {path}: {reason}")

    def __reduce__(self):
        return type(self), (self.skipped.path, self.skipped.reason)


class SampleError(Error, ValueError, RuntimeError):
    """Samples refused by ``on_error="raise"``: found bad when a loader is built, while it loads, or
    while packing. ``str(err)`` names each one (``"<path>: <reason>"`` for one sample).

    Attributes:
        entries: every refused sample and why.
        skipped: the first of them.
        summary: what they are, counted (the message's first line; ``""`` for one sample alone).
    """

    def __init__(self, entries: Skipped | Sequence[Skipped], summary: str = "") -> None:
        self.entries: list[Skipped] = [entries] if isinstance(entries, Skipped) else list(entries)
        self.skipped = self.entries[0]
        self.summary = summary
        if summary:
            message = f"{summary} (pass on_error='skip' to leave them out):\n{listing(self.entries)}"
        else:
            message = "\n".join(str(entry) for entry in self.entries)
        super().__init__(message)

    def __reduce__(self):
        """Pickled (and copied) from its entries, as it was made: errors cross process boundaries."""
        return type(self), (self.entries, self.summary)


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (ending in ``...``) for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


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
    """Every sample left out, each logged once (by default logger ``gpupipe.skipped``, WARNING).

    Args:
        log: the logger (the packer's, ``gpupipe.pack``, logs at INFO: its manifest lists them all).
        level: the logging level of each line.

    Attributes:
        entries: the skipped samples, in the order they were found.
    """

    def __init__(self, log: logging.Logger | None = None, level: int = logging.WARNING) -> None:
        self.entries: list[Skipped] = []
        self._seen: set = set()
        self._log = log or logger
        self._level = level

    def add(self, entry: Skipped) -> None:
        if entry.path in self._seen:
            return
        self._seen.add(entry.path)
        self.entries.append(entry)
        self._log.log(self._level, "skipping %s: %s", entry.path, entry.reason)

    def __contains__(self, path: str) -> bool:
        return path in self._seen

    def __len__(self) -> int:
        return len(self.entries)


class ErrorPolicy:
    """The ``on_error`` policy, applied in one place for the loader, its backends and the packer.

    ``"raise"`` refuses bad samples with one [`SampleError`][gpupipe.SampleError] naming every
    one of them; ``"skip"`` leaves them out, logging each once and listing it
    in ``log``.

    Args:
        on_error: ``"raise"``, ``"skip"`` or an [`OnError`][gpupipe.OnError].
        log: where skipped samples are listed (a new ``SkipLog`` by default).

    Raises:
        ValueError: an ``on_error`` that is neither.
    """

    def __init__(self, on_error: str | OnError = OnError.RAISE, log: SkipLog | None = None) -> None:
        self.on_error = OnError.parse(on_error)
        self.log = log if log is not None else SkipLog()

    def apply(self, entries: Iterable[Skipped], summary: str = "") -> None:
        """Refuses or skips ``entries`` (nothing to do when there are none).

        Args:
            entries: the bad samples, each with its reason.
            summary: what they are, counted, for the error's first line (none: the entries alone).

        Raises:
            SampleError: with ``on_error="raise"``.
        """
        entries = list(entries)
        if not entries:
            return
        if self.on_error is OnError.RAISE:
            raise SampleError(entries, summary)
        for entry in entries:
            self.log.add(entry)

    def __repr__(self) -> str:
        return f"ErrorPolicy({self.on_error.value!r}, {len(self.log)} skipped)"
