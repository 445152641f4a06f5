"""Every kind's handler, by kind: the one table backends, sources and the packer ask.

A kind's handler is a ``Target`` subclass in its own file. The built-in kinds are
listed in [`TargetKind`][gpupipe.TargetKind] and ``HANDLERS`` (a test checks that
every kind has one); a kind of one's own is added from its own file with
``register`` (see the development page). ``ALL_TARGETS`` and ``IMAGE_LEVEL`` are
read live, so a kind registered later is in them (an op that carries every kind
carries it too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import Error
from .base import Target
from .boxes import Boxes
from .kinds import TargetKind
from .labels import Labels
from .masks import Masks
from .multihot import MultiHot

HANDLERS: dict[TargetKind, Target] = {handler.kind: handler for handler in (Labels(), MultiHot(), Masks(), Boxes())}


class TargetRegistryError(Error, ValueError):
    """A target kind registered twice, or a handler that is no ``Target``."""


class KindSet(frozenset):
    """The registered kinds whose handler passes ``test``, read live from ``HANDLERS``.

    Membership, iteration and ``len`` see every kind registered so far; as a plain
    ``frozenset`` (``frozenset(s)``, ``s | t``) it holds the built-in kinds only.
    """

    test: Callable[[Target], bool]

    def __new__(cls, test: Callable[[Target], bool]) -> KindSet:
        self = super().__new__(cls, (k for k, h in HANDLERS.items() if test(h)))
        self.test = test
        return self

    def now(self) -> frozenset[TargetKind]:
        """The kinds in the set at this moment."""
        return frozenset(k for k, h in HANDLERS.items() if self.test(h))

    def __contains__(self, kind: object) -> bool:
        handler = HANDLERS.get(kind)  # type: ignore[call-overload]  # any object may be asked about
        return handler is not None and self.test(handler)

    def __iter__(self) -> Iterator[TargetKind]:
        return iter(self.now())

    def __len__(self) -> int:
        return len(self.now())

    def __eq__(self, other: object) -> bool:
        return self.now() == (other.now() if isinstance(other, KindSet) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"KindSet({sorted(k.value for k in self.now())})"


ALL_TARGETS: frozenset[TargetKind] = KindSet(lambda handler: True)
#: Targets that do not move with the pixels (one value per image).
IMAGE_LEVEL: frozenset[TargetKind] = KindSet(lambda handler: not handler.moves_with_pixels)


def handler(kind: TargetKind) -> Target:
    """The handler of ``kind``."""
    return HANDLERS[kind]


def register(target: Target, title: str | None = None) -> Target:
    """Adds a kind of target of one's own with its handler (an instance of a ``Target`` subclass
    in the kind's own file); returns the handler.

    Args:
        target: the kind's handler. Its class's ``kind`` is a string for a new kind: it becomes
            ``TargetKind(kind)`` (the class attribute is replaced by it).
        title: the new kind's name in messages, e.g. ``"heatmaps"`` (default: the string).

    Raises:
        TargetRegistryError: the kind has a handler already, or ``target`` is no ``Target``.
    """
    if not isinstance(target, Target):
        raise TargetRegistryError(f"a target handler must be a gpupipe.targets.Target, got {type(target).__name__}")
    kind: Any = type(target).kind
    if not isinstance(kind, TargetKind):
        if kind in TargetKind._value2member_map_:
            raise TargetRegistryError(f"target kind {kind!r} registered twice (it is {TargetKind(kind)!r} already)")
        kind = TargetKind.add(str(kind), title or str(kind))
        type(target).kind = kind
    old = HANDLERS.get(kind)
    if old is not None and type(old) is not type(target):
        raise TargetRegistryError(
            f"target kind {kind.value!r} registered twice: {type(old).__qualname__} and {type(target).__qualname__}"
        )
    HANDLERS[kind] = target
    return target


def unregister(kind: TargetKind) -> None:
    """Removes a kind added by ``register`` (for tests that add toy kinds); built-in kinds stay."""
    if kind in list(TargetKind):
        return
    HANDLERS.pop(kind, None)
    TargetKind.remove(kind)
