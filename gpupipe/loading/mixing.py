"""Batch-level augmentations (MixUp, CutMix), applied on the device after the batch arrives.

Parameters are drawn on the host from a key (seed, epoch, rank, batch), so
a batch is mixed the same way in every run and after a resume; the pixel
work runs where the batch is. Labels become soft targets ``(B, num_classes)``
that ``torch.nn.functional.cross_entropy`` takes as they are.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch

from ..ops import CutMix, MixUp
from ..ops.batch import MixingOp


class BatchMixer:
    """Applies one of ``ops`` (chosen with equal odds per batch, as timm does) to a batch.

    Args:
        ops: ``MixUp`` and/or ``CutMix``.
        num_classes: width of the soft targets.
    """

    def __init__(self, ops: Sequence[MixingOp], num_classes: int) -> None:
        self.ops = tuple(ops)
        self.num_classes = num_classes

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, key: int, *, inplace: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixes ``images`` ``(B, 3, H, W)`` float with itself rolled by one along the batch.

        Args:
            images: the batch.
            labels: ``(B,)`` class indices, or ``(B, num_classes)`` float targets (multi-hot).
            key: seeds the draw (see ``gpupipe.plan.seeding.batch_key``).
            inplace: write into ``images`` (the loader's own batch): MixUp is one fused pass
                (``lerp_``) after the roll, CutMix copies only its box.

        Returns:
            ``(images, targets)``: the mixed images and ``(B, num_classes)`` float32 soft targets.
        """
        rng = random.Random(key)
        op = self.ops[rng.randrange(len(self.ops))]
        lam = rng.betavariate(op.alpha, op.alpha)
        if labels.dim() == 2:
            targets = labels.to(torch.float32)
        else:
            targets = torch.nn.functional.one_hot(labels, self.num_classes).to(torch.float32)
        if len(labels) < 2:
            return images, targets
        if isinstance(op, MixUp):
            rolled = images.roll(1, 0)
            images = images.lerp_(rolled, 1.0 - lam) if inplace else images.mul(lam).add_(rolled, alpha=1.0 - lam)
        else:
            images, lam = _paste_box(images if inplace else images.clone(), lam, rng)
        targets = targets.mul(lam).add_(targets.roll(1, 0), alpha=1.0 - lam)
        return images, targets


def _paste_box(images: torch.Tensor, lam: float, rng: random.Random):
    """CutMix's box of area ``1 - lam`` at a random centre (clipped), pasted into ``images`` from the
    batch rolled by one; returns the images and the kept share."""
    height, width = images.shape[-2:]
    cut = math.sqrt(1.0 - lam)
    box_h, box_w = int(height * cut), int(width * cut)
    cy, cx = rng.randrange(height), rng.randrange(width)
    y0, y1 = max(cy - box_h // 2, 0), min(cy + box_h // 2, height)
    x0, x1 = max(cx - box_w // 2, 0), min(cx + box_w // 2, width)
    images[..., y0:y1, x0:x1] = images[..., y0:y1, x0:x1].roll(1, 0)
    return images, 1.0 - (y1 - y0) * (x1 - x0) / (height * width)


__all__ = ["BatchMixer", "MixUp", "CutMix"]
