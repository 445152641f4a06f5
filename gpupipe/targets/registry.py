"""Every kind's handler, by kind: the one table backends, sources and the packer ask.

Adding a kind: its name in [`TargetKind`][gpupipe.TargetKind], its
``Target`` subclass in a new file of this
package, and that handler in ``HANDLERS`` (a test checks that every
kind has one).
"""

from __future__ import annotations

from .base import Target
from .boxes import Boxes
from .kinds import TargetKind
from .labels import Labels
from .masks import Masks
from .multihot import MultiHot

HANDLERS: dict[TargetKind, Target] = {handler.kind: handler for handler in (Labels(), MultiHot(), Masks(), Boxes())}

ALL_TARGETS: frozenset[TargetKind] = frozenset(TargetKind)
#: Targets that do not move with the pixels (one value per image).
IMAGE_LEVEL: frozenset[TargetKind] = frozenset(k for k, h in HANDLERS.items() if not h.moves_with_pixels)


def handler(kind: TargetKind) -> Target:
    """The handler of ``kind``."""
    return HANDLERS[kind]
