"""What every backend shares: the slots of a batch, replacing bad samples, and the table of a backend's
target lowerings by kind (an op's lowering-table entry, ``Lowering``, lives with the op registry)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

import numpy as np

from ..errors import Error, ErrorPolicy, Skipped
from ..loading.sampling import RankShare
from ..ops.registry import RegistryError, _where
from ..sources import Source
from ..targets import Target

T = TypeVar("T")
C = TypeVar("C", bound=type)


def batch_slots(share: RankShare, batch: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, positions)`` of batch ``batch`` of a rank's share (the last may be short)."""
    start = batch * batch_size
    return share.indices[start : start + batch_size], share.positions[start : start + batch_size]


class NoUsableSample(Error, RuntimeError):
    """Every sample of a rank's share failed: there is nothing to fill a batch with."""


class BadSamples:
    """The samples found bad while loading, and the rule that replaces them.

    A batch never shrinks because a file fails to decode: each bad sample is
    replaced by the next sample of the rank's share for the epoch (wrapping
    around) that is not known to be bad. The replacement keeps the slot (so
    its augmentation is drawn from the slot's key), the batch keeps its size,
    and every rank keeps its number of batches.

    Args:
        source: the samples (for names).
        errors: the loader's ``on_error`` policy (``raise`` stops at the first bad sample, naming it).
    """

    def __init__(self, source: Source, errors: ErrorPolicy) -> None:
        self.source = source
        self.errors = errors
        self.known: set[int] = set()

    def report(self, failures: Iterable[tuple[int, str]]) -> None:
        """Records samples that failed: ``(index, reason)``, the reason as it is listed
        (``"cannot decode: ..."``, ``"cannot read: ..."``, ``"not a regular file"``).

        Raises:
            SampleError: with ``on_error="raise"``, naming the first one.
        """
        for index, reason in failures:
            self.errors.apply([Skipped(self.source.names[index], reason)])
            self.known.add(int(index))

    def replace(self, indices: np.ndarray, share: RankShare, start: int) -> np.ndarray:
        """``indices`` (the slots from ``start`` of ``share``) with every known-bad sample replaced.

        Raises:
            NoUsableSample: every sample of the share is bad.
        """
        if not self.known:
            return indices
        out = np.array(indices, np.int64)
        n = len(share.indices)
        for k, index in enumerate(out):
            if int(index) not in self.known:
                continue
            for step in range(1, n + 1):
                candidate = int(share.indices[(start + k + step) % n])
                if candidate not in self.known:
                    out[k] = candidate
                    break
            else:
                raise NoUsableSample(
                    f"every sample of this rank's share of the epoch failed to load "
                    f"({len(self.known)} bad samples; see loader.skipped)"
                )
        return out


class NoTargetLowering(Error, ValueError):
    """A kind of target that moves with the pixels has no lowering on a backend (both named)."""


class TargetLowerings(dict[Hashable, T]):
    """One backend's target lowerings: target kind -> how the backend moves and batches that kind.

    Only kinds that move with the pixels (``Target.moves_with_pixels``) need one; an image-level kind
    gets ``image_level`` (its batches are looked up on the host: ``Target.batch``).

    Args:
        backend: the backend's name in messages.
        image_level: the lowering of every image-level kind.
    """

    def __init__(self, backend: str, image_level: T) -> None:
        super().__init__()
        self.backend = backend
        self.image_level = image_level

    def add(self, kind: Hashable, lowering: T) -> None:
        """Registers ``lowering`` for ``kind``.

        Raises:
            RegistryError: ``kind`` has one already on this backend, naming both.
        """
        old = self.get(kind)
        if old is not None and type(old) is not type(lowering):
            raise RegistryError(
                f"target kind {getattr(kind, 'value', kind)!r}: {self.backend} target lowering registered twice: "
                f"{_where(type(old))} and {_where(type(lowering))}"
            )
        self[kind] = lowering

    def register(self, kind: Hashable) -> Callable[[C], C]:
        """Class decorator: registers an instance of the class as ``kind``'s lowering (see ``add``)."""

        def register_class(cls: C) -> C:
            self.add(kind, cls())
            return cls

        return register_class

    def of(self, target: Target, backend: str | None = None) -> T:
        """The lowering of ``target``'s kind (``target``: the kind's handler; ``backend``: the name
        in the message, by default the table's).

        Raises:
            NoTargetLowering: ``target`` moves with the pixels and this backend has no lowering for it.
        """
        if not target.moves_with_pixels:
            return self.image_level
        lowering = self.get(target.kind)
        if lowering is None:
            has = sorted(str(getattr(k, "value", k)) for k in self)
            raise NoTargetLowering(
                f"{target.title} have no target lowering on backend {backend or self.backend!r} "
                f"(it lowers: {', '.join(has) or 'image-level targets only'})"
            )
        return lowering
