"""The kinds of target a sample can carry besides its image.

| kind | per sample | in a batch |
|---|---|---|
| ``LABEL`` | a class index | ``(B,)`` int64 |
| ``MULTI_LABEL`` | a set of class indices | ``(B, num_classes)`` float32 multi-hot |
| ``MASK`` | a class-id image | ``(B, H, W)`` int64, aligned with the images |
| ``BOXES`` | ``(N, 4)`` xyxy boxes and ``(N,)`` labels | a dict of padded ``boxes``, ``labels`` and ``image_sizes`` |

Each kind has one handler (``gpupipe.targets``) that owns how it is read,
moved, packed and batched.
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


_TITLES = {"label": "class labels", "multi_label": "multi-label targets", "mask": "masks", "boxes": "boxes"}
