"""What a sample carries besides its image, and how a batch of it looks.

| kind | per sample | in a batch |
|---|---|---|
| ``LABEL`` | a class index | ``(B,)`` int64 |
| ``MULTI_LABEL`` | a set of class indices | ``(B, num_classes)`` float32 multi-hot |
| ``MASK`` | a class-id image | ``(B, H, W)`` int64, aligned with the images |
| ``BOXES`` | ``(N, 4)`` xyxy boxes and ``(N,)`` labels | ``{"boxes": (B, Nmax, 4) float32, "labels": (B, Nmax) int64, "image_sizes": (B, 2) int64}``, padded with label ``-1`` |

Ops declare which kinds they can carry (:attr:`gpupipe.ops.Op.carries`); a
backend may refuse more (see its lowering table).
"""  # noqa: E501  (a Markdown table row cannot be wrapped)

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Dict, FrozenSet, List

if TYPE_CHECKING:
    import torch


class TargetKind(str, enum.Enum):
    """The kind of target a source gives."""

    LABEL = "label"
    MULTI_LABEL = "multi_label"
    MASK = "mask"
    BOXES = "boxes"

    @property
    def title(self) -> str:  # type: ignore[override]  # shadows str.title (TargetKind is a str Enum); public name
        return {"label": "class labels", "multi_label": "multi-label targets", "mask": "masks",
                "boxes": "boxes"}[self.value]


ALL_TARGETS: FrozenSet[TargetKind] = frozenset(TargetKind)
#: Targets that do not move with the pixels (a class per image).
IMAGE_LEVEL: FrozenSet[TargetKind] = frozenset({TargetKind.LABEL, TargetKind.MULTI_LABEL})

#: The box value of padding rows in a detection batch (their label is ``-1``).
BOX_PADDING = 0.0


def to_detection_inputs(images: "torch.Tensor", targets: Dict[str, "torch.Tensor"], label_offset: int = 0):
    """What torchvision's detection models take in training: ``(list of images, list of targets)``.

    Each image is cut to its unpadded ``image_sizes`` (a view, no copy); the
    targets come from :func:`to_detection_targets`.
    """
    sizes = targets["image_sizes"].tolist()
    return ([image[:, :h, :w] for image, (h, w) in zip(images, sizes)],
            to_detection_targets(targets, label_offset))


def to_detection_targets(targets: Dict[str, "torch.Tensor"], label_offset: int = 0) -> List[Dict[str, "torch.Tensor"]]:
    """Turns a padded detection batch into what torchvision's detection models take.

    Args:
        targets: ``{"boxes": (B, N, 4), "labels": (B, N)}`` as a gpupipe
            detection loader gives it (padding rows have label ``-1``).
        label_offset: added to every label: torchvision's detection models keep
            label 0 for the background, so pass 1 to number classes from 1.

    Returns:
        A list of ``B`` dicts ``{"boxes": (n_i, 4) float32, "labels": (n_i,) int64}``
        on the same device, padding removed.
    """
    boxes, labels = targets["boxes"], targets["labels"]
    out = []
    for b in range(labels.shape[0]):
        keep = labels[b] >= 0
        out.append({"boxes": boxes[b][keep], "labels": labels[b][keep] + label_offset})
    return out


class DetectionLists:
    """A detection loader whose batches come as torchvision's detection models and references take
    them: ``(list of (3, h_i, w_i) images, list of {"boxes", "labels"})``, so a loop written for a
    ``DataLoader`` with ``collate_fn=lambda b: tuple(zip(*b))`` runs unchanged.

    Everything else (``len``, ``set_epoch``, ``state_dict``, ``stats``, ...) is the loader's.

    Args:
        loader: a :class:`gpupipe.Loader` over a detection source.
        label_offset: added to every label (1 for torchvision's models, whose label 0 is the background).
    """

    def __init__(self, loader, label_offset: int = 0) -> None:
        self.loader = loader
        self.label_offset = label_offset

    def __iter__(self):
        for images, targets in self.loader:
            yield to_detection_inputs(images, targets, self.label_offset)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        if name == "loader":  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.loader, name)
