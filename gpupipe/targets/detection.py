"""Padded detection batches as torchvision's detection models and references take them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import positive_int
from .boxes import unpad
from .kinds import TargetKind

if TYPE_CHECKING:
    import torch


def to_detection_inputs(images: torch.Tensor, targets: dict[str, torch.Tensor], label_offset: int = 0):
    """What torchvision's detection models take in training: ``(list of images, list of targets)``.

    Each image is cut to its unpadded ``image_sizes`` (a view, no copy); the
    targets come from [`to_detection_targets`][gpupipe.to_detection_targets].
    """
    sizes = _detection_targets("to_detection_inputs", targets)["image_sizes"].tolist()
    return ([image[:, :h, :w] for image, (h, w) in zip(images, sizes)], to_detection_targets(targets, label_offset))


def to_detection_targets(targets: dict[str, torch.Tensor], label_offset: int = 0) -> list[dict[str, torch.Tensor]]:
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
    offset = _label_offset("to_detection_targets", label_offset)
    batch = _detection_targets("to_detection_targets", targets)
    return [{"boxes": boxes, "labels": labels + offset} for boxes, labels in unpad(batch)]


#: The keys of a detection batch's targets.
_KEYS = ("boxes", "labels", "image_sizes")


def _detection_targets(where: str, targets):
    """``targets``, checked to be a detection batch's dict (a classification or segmentation batch's
    tensor would fail deep in torch's indexing).

    Raises:
        ValueError: naming ``where`` and what ``targets`` is.
    """
    if not isinstance(targets, dict) or any(key not in targets for key in _KEYS):
        what = f"a dict of {sorted(targets)}" if isinstance(targets, dict) else type(targets).__name__
        if hasattr(targets, "shape"):
            what += f" of shape {tuple(targets.shape)}"
        raise ValueError(
            f"{where} takes a detection batch's targets {{'boxes', 'labels', 'image_sizes'}} (a loader over "
            f"CocoDetection), got {what}"
        )
    return targets


def _label_offset(where: str, label_offset) -> int:
    """``label_offset`` checked: an int >= 0 (labels stay ints, and the ``-1`` padding apart from them)."""
    return positive_int(f"{where}: label_offset", label_offset, 0, 2**31 - 1)


class DetectionLists:
    """A detection loader whose batches come as torchvision's detection models and references take
    them: ``(list of (3, h_i, w_i) images, list of {"boxes", "labels"})``, so a loop written for a
    ``DataLoader`` with ``collate_fn=lambda b: tuple(zip(*b))`` runs unchanged.

    Everything else (``len``, ``set_epoch``, ``state_dict``, ``stats``, ...) is the loader's.

    Args:
        loader: a [`gpupipe.Loader`][gpupipe.Loader] over a detection source.
        label_offset: added to every label (1 for torchvision's models, whose label 0 is the background).
    """

    def __init__(self, loader, label_offset: int = 0) -> None:
        kind = getattr(getattr(loader, "source", None), "kind", None)
        if kind is not None and kind != TargetKind.BOXES:
            raise ValueError(
                f"DetectionLists needs a loader whose targets are boxes (CocoDetection, or a pack of one); "
                f"this loader's are {getattr(kind, 'title', kind)}"
            )
        self.loader = loader
        self.label_offset = _label_offset("DetectionLists", label_offset)

    def __iter__(self):
        for images, targets in self.loader:
            yield to_detection_inputs(images, targets, self.label_offset)

    def __len__(self) -> int:
        return len(self.loader)

    # Defined here, not only handed on by ``__getattr__``: Lightning keeps a loader's state in its checkpoints
    # when ``isinstance(loader, _Stateful)``, a runtime protocol that Python >= 3.12 checks with
    # ``inspect.getattr_static``, which never calls ``__getattr__``.
    def state_dict(self) -> dict:
        """The loader's ``state_dict``."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """The loader's ``load_state_dict``."""
        self.loader.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """The loader's ``set_epoch``."""
        self.loader.set_epoch(epoch)

    def __getattr__(self, name: str):
        if name == "loader":  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.loader, name)
