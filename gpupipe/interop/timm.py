"""Rules for timm's own transforms (what ``timm.data.create_transform`` builds besides torchvision's).

``create_transform`` composes torchvision transforms (compiled by
``gpupipe.interop.rules``) with a few of timm's: its random-resized crop
with a choice of interpolation, ``MaybeToTensor``, the prefetcher's uint8 forms
(``MaybePILToTensor``, older ``ToNumpy``), ``ResizeKeepRatio``, its ``RandomErasing``
and its auto-augment policies. Those whose meaning gpupipe keeps compile;
the others are refused with the reason.
"""

from __future__ import annotations

import math
from typing import Any

from .. import ops as O
from .rules import add, interpolation, size_arg
from .transforms import REASONS, Refuse, State, rule


@rule("timm.RandomResizedCropAndInterpolation")
def _random_resized_crop(t: Any, state: State) -> None:
    if isinstance(t.interpolation, (tuple, list)):
        raise Refuse("interpolation='random' picks bilinear or bicubic per image: gpupipe resizes bilinear only")
    mode = interpolation(t.interpolation)
    if mode != "bilinear":
        raise Refuse(f"interpolation={mode!r}: gpupipe resizes bilinear only")
    add(state, O.RandomResizedCrop(size_arg(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio)))


@rule("timm.MaybeToTensor", "timm.ToTensor")
def _to_tensor(t: Any, state: State) -> None:
    dtype = str(getattr(t, "dtype", "torch.float32"))
    if dtype != "torch.float32":
        raise Refuse(f"dtype={dtype}: use the loader's dtype argument")
    if state.form == "pil":  # MaybeToTensor passes a tensor through; a PIL image becomes [0, 1] floats
        state.form = "float"


@rule("timm.MaybePILToTensor")
def _maybe_pil_to_tensor(t: Any, state: State) -> None:
    """timm's prefetcher form (``create_transform(use_prefetcher=True)``, or ``normalize=False``): a PIL image
    becomes a uint8 tensor, unscaled, as ``PILToTensor``; a tensor passes through."""
    if state.form == "pil":
        state.form, state.tv_image = "uint8", False


@rule("timm.ToNumpy")
def _to_numpy(t: Any, state: State) -> None:
    """Older timm's prefetcher form: a ``(3, H, W)`` uint8 numpy array, which torch's default collate batches
    into a uint8 tensor (what gpupipe gives); a transform after it is refused (``transforms.walk``)."""
    if state.form != "pil":
        raise Refuse("needs a PIL image (it reads the pixels as height x width x channels)")
    state.form, state.tv_image, state.numpy_at = "uint8", False, state.where


@rule("timm.ResizeKeepRatio")
def _resize_keep_ratio(t: Any, state: State) -> None:
    """Refused, with what it does: no gpupipe op has its meaning."""
    longest = getattr(t, "longest", 0.0)
    if longest:
        raise Refuse(
            f"longest={longest}: scales the longer side to its size (timm's crop_mode='border', then padded); "
            "no gpupipe op has that meaning"
        )
    if getattr(t, "random_scale_prob", 0.0) or getattr(t, "random_aspect_prob", 0.0):
        raise Refuse("random_scale_prob / random_aspect_prob: a random scale per image; no gpupipe op has it")
    raise Refuse(
        f"size={tuple(t.size)}: scales both sides by one ratio, rounding each (timm's eval transform for a "
        "non-square input_size); torchvision's Resize, which gpupipe keeps, truncates the longer side: give a "
        "square input_size, or crop_mode='squash'"
    )


@rule("timm.RandomErasing")
def _random_erasing(t: Any, state: State) -> None:
    if t.per_pixel or t.rand_color:
        raise Refuse(f"mode={t.mode!r} fills with random values; gpupipe erases to 0 after Normalize (mode='const')")
    if (t.min_count, t.max_count) != (1, 1):
        raise Refuse(f"max_count={t.max_count}: gpupipe erases one rectangle")
    if t.num_splits:
        raise Refuse(f"num_splits={t.num_splits}: gpupipe erases every image alike")
    if state.normalize is None:
        raise Refuse("timm erases normalised tensors: put it after Normalize")
    low, high = t.log_aspect_ratio
    add(
        state,
        O.RandomErasing(
            float(t.probability), scale=(float(t.min_area), float(t.max_area)), ratio=(math.exp(low), math.exp(high))
        ),
    )


_POLICY = (
    "timm's {0} differs from gpupipe's policies (torchvision's): its own operations (Invert, SolarizeAdd, "
    "the 'Increasing' variants), a probability per operation and random magnitudes (mstd); use "
    "torchvision's {1} for gpupipe's"
)

REASONS.update(
    {
        "timm.RandAugment": _POLICY.format("RandAugment", "transforms.RandAugment"),
        "timm.AutoAugment": _POLICY.format("AutoAugment", "transforms.AutoAugment"),
        "timm.AugMixAugment": "no gpupipe op: AugMix blends several augmentation chains per image",
    }
)
