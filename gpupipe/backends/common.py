"""What every backend shares: lowering-table entries, the batches of an epoch, replacing bad
samples, and the targets that are looked up on the host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, FrozenSet, Iterable, List, Optional, Set, Tuple

import numpy as np
import torch

from ..errors import Error, OnError, SampleError, SkipLog, Skipped
from ..sampling import RankShare
from ..sources import Source
from ..sources.base import Indices
from ..targets import ALL_TARGETS, TargetKind


@dataclass(frozen=True)
class Lowering:
    """One entry of a backend's lowering table.

    Attributes:
        apply: the function that lowers the op (its signature is the backend's business).
        targets: the target kinds it carries.
        why: why the others are refused (for the error message).
    """

    apply: Callable
    targets: FrozenSet[TargetKind] = ALL_TARGETS
    why: str = ""


def batch_slots(share: RankShare, batch: int, batch_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(indices, positions)`` of batch ``batch`` of a rank's share (the last may be short)."""
    start = batch * batch_size
    return share.indices[start:start + batch_size], share.positions[start:start + batch_size]


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
        on_error: ``raise`` stops at the first bad sample, naming it.
        skip_log: where skipped samples are listed.
    """

    def __init__(self, source: Source, on_error: OnError, skip_log: SkipLog) -> None:
        self.source = source
        self.on_error = on_error
        self.skip_log = skip_log
        self.known: Set[int] = set()

    def report(self, failures: Iterable[Tuple[int, str]]) -> None:
        """Records samples that failed: ``(index, reason)``, the reason as it is listed
        (``"cannot decode: ..."``, ``"cannot read: ..."``, ``"not a regular file"``).

        Raises:
            SampleError: with ``on_error="raise"``, naming the first one.
        """
        for index, reason in failures:
            name = self.source.names[index]
            if self.on_error is OnError.RAISE:
                raise SampleError(Skipped(name, reason))
            self.known.add(int(index))
            self.skip_log.add(Skipped(name, reason))

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
                raise NoUsableSample(f"every sample of this rank's share of the epoch failed to load "
                                     f"({len(self.known)} bad samples; see loader.skipped)")
        return out


def host_targets(source: Source, indices: Indices) -> torch.Tensor:
    """The image-level targets of a batch, built on the host.

    Returns:
        ``(B,)`` int64 labels, or ``(B, num_classes)`` float32 multi-hot for a multi-label source.
    """
    indices = np.asarray(indices, np.int64)
    if source.kind is TargetKind.MULTI_LABEL:
        out = torch.zeros(len(indices), len(source.classes), dtype=torch.float32)
        for row, labels in enumerate(source.label_sets(indices)):
            out[row, torch.from_numpy(np.asarray(labels, np.int64))] = 1.0
        return out
    return torch.from_numpy(source.labels[indices])


def pad_boxes(boxes: List[torch.Tensor], labels: List[torch.Tensor]) -> dict:
    """Per-sample boxes and labels, padded to the batch's largest count (label ``-1``, box 0).

    Returns:
        ``{"boxes": (B, N, 4) float32, "labels": (B, N) int64}``.
    """
    count = max((len(b) for b in boxes), default=0)
    out_boxes = torch.zeros(len(boxes), count, 4, dtype=torch.float32)
    out_labels = torch.full((len(boxes), count), -1, dtype=torch.int64)
    for row, (b, lbl) in enumerate(zip(boxes, labels)):
        out_boxes[row, :len(b)] = b
        out_labels[row, :len(lbl)] = lbl
    return {"boxes": out_boxes, "labels": out_labels}


def targets_to(targets, device: torch.device, non_blocking: bool = True):
    """Moves a target (a tensor or a dict of tensors) to ``device``."""
    if isinstance(targets, dict):
        return {k: targets_to(v, device, non_blocking) for k, v in targets.items()}
    if targets.device == device:
        return targets
    if device.type == "cuda" and not targets.is_pinned():
        targets = targets.pin_memory()
    return targets.to(device, non_blocking=non_blocking)


def source_boxes(source: Source, indices: Indices) -> Optional[List[np.ndarray]]:
    """The boxes of a batch's samples (``None`` for sources without boxes)."""
    if source.kind is not TargetKind.BOXES:
        return None
    return [source.boxes[i] for i in indices]
