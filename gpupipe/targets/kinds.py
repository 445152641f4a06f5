"""The kinds of target a sample can carry besides its image.

| kind | per sample | in a batch |
|---|---|---|
| ``LABEL`` | a class index | ``(B,)`` int64 |
| ``MULTI_LABEL`` | a set of class indices | ``(B, num_classes)`` float32 multi-hot |
| ``MASK`` | a class-id image | ``(B, H, W)`` int64, aligned with the images |
| ``BOXES`` | ``(N, 4)`` xyxy boxes and ``(N,)`` labels | a dict of padded ``boxes``, ``labels`` and ``image_sizes`` |

Each kind has one handler (``gpupipe.targets``) that owns how it is read,
checked, packed and batched; each backend owns how it moves. A kind of one's
own is added with ``TargetKind.add`` (``gpupipe.targets.register`` does it).
"""

from __future__ import annotations

import enum


class TargetKind(str, enum.Enum):
    """The kind of target a source gives."""

    LABEL = "label"
    MULTI_LABEL = "multi_label"
    MASK = "mask"
    BOXES = "boxes"

    @property
    def title(self) -> str:  # type: ignore[override]  # shadows str.title (TargetKind is a str Enum); public name
        """The kind's name in messages: ``"class labels"``, ``"multi-label targets"``, ``"masks"``, ``"boxes"``."""
        return _TITLES[self.value]

    @classmethod
    def add(cls, value: str, title: str) -> TargetKind:
        """A new kind, ``TargetKind(value)`` from now on (it is not among the built-in kinds that
        ``list(TargetKind)`` gives; ``gpupipe.targets.register`` adds one with its handler).

        Raises:
            ValueError: ``value`` names a kind already.
        """
        if value in cls._value2member_map_:
            raise ValueError(f"target kind {value!r} exists already")
        kind = str.__new__(cls, value)
        kind._name_, kind._value_ = value.upper(), value
        cls._value2member_map_[value] = kind
        _TITLES[value] = title
        return kind

    @classmethod
    def remove(cls, kind: TargetKind) -> None:
        """Forgets a kind made by ``add`` (for tests that add toy kinds); a built-in kind stays."""
        if kind.name not in cls._member_map_ and cls._value2member_map_.get(kind.value) is kind:
            del cls._value2member_map_[kind.value]
            _TITLES.pop(kind.value, None)


_TITLES = {"label": "class labels", "multi_label": "multi-label targets", "mask": "masks", "boxes": "boxes"}
