"""One rule per torchvision transform (v1 and v2 alike): its gpupipe ops, or why it cannot be compiled.

Each rule checks every argument whose meaning gpupipe's op could not keep
(an interpolation other than bilinear, ``antialias=False`` on a tensor,
padding, a fill colour, ...) and refuses it by name rather than approximate.
The image's form (PIL, uint8 or float tensor) is tracked in the
``State``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import ops as O
from .transforms import Refuse, State, per_channel, rule, walk

#: Ops that commute with a per-channel ``Normalize`` (they may follow it in torchvision's order).
_COMMUTES_WITH_NORMALIZE = ("HorizontalFlip", "VerticalFlip", "RandomErasing")


def add(state: State, *ops: O.Op) -> None:
    """Adds ops; after ``Normalize`` only those that commute with it (gpupipe normalises last)."""
    if state.normalize is not None:
        for op in ops:
            if op.name not in _COMMUTES_WITH_NORMALIZE:
                raise Refuse(
                    "comes after Normalize; gpupipe normalises last, and this op gives another result "
                    "before Normalize: move it before Normalize"
                )
    state.add(*ops)


def interpolation(value: Any) -> str:
    """An interpolation argument (``InterpolationMode``, its name, or a PIL constant) as a lower-case name."""
    if isinstance(value, int) and not isinstance(value, bool):
        from torchvision.transforms.functional import _interpolation_modes_from_int

        value = _interpolation_modes_from_int(value)
    return str(getattr(value, "value", value)).lower()


def bilinear(t: Any, what: str = "resizes") -> None:
    mode = interpolation(t.interpolation)
    if mode != "bilinear":
        raise Refuse(f"interpolation={mode.upper()}: gpupipe {what} bilinear only")


def antialiased(t: Any, state: State) -> None:
    """``antialias=False`` matters on tensors only (PIL always antialiases), and gpupipe always antialiases;
    torchvision reads ``antialias=None`` as ``False`` on a tensor."""
    antialias = getattr(t, "antialias", True)
    if state.tensor and antialias is not True:
        raise Refuse(f"antialias={antialias!r} on a tensor: gpupipe's resizes are always antialiased")


def size_arg(size: Any) -> int | tuple[int, int]:
    """torchvision's size (an int, ``[s]`` or ``[h, w]``) as gpupipe's."""
    if isinstance(size, int):
        return size
    size = list(size)
    return int(size[0]) if len(size) == 1 else (int(size[0]), int(size[1]))


def pair(values: Any) -> tuple[float, float]:
    """A ``(min, max)`` argument as two floats."""
    low, high = (float(v) for v in values)
    return low, high


def zero_fill(fill: Any) -> bool:
    """A fill that is black on every channel (``0``, ``None``, ``[0, 0, 0]``, v2's per-type dict of those)."""
    if fill is None:
        return True
    if isinstance(fill, dict):
        return all(zero_fill(v) for v in fill.values())
    if isinstance(fill, (int, float)):
        return fill == 0
    return all(float(v) == 0 for v in fill)


@rule("torchvision.Resize")
def _resize(t: Any, state: State) -> None:
    bilinear(t)
    antialiased(t, state)
    size = None if t.size is None else size_arg(t.size)
    add(state, O.Resize(size, max_size=t.max_size))


@rule("torchvision.CenterCrop")
def _center_crop(t: Any, state: State) -> None:
    add(state, O.CenterCrop(size_arg(t.size)))


@rule("torchvision.RandomResizedCrop")
def _random_resized_crop(t: Any, state: State) -> None:
    bilinear(t)
    antialiased(t, state)
    add(state, O.RandomResizedCrop(size_arg(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio)))


@rule("torchvision.RandomHorizontalFlip")
def _hflip(t: Any, state: State) -> None:
    add(state, O.HorizontalFlip(float(t.p)))


@rule("torchvision.RandomVerticalFlip")
def _vflip(t: Any, state: State) -> None:
    add(state, new_op("VerticalFlip")(float(t.p)))


def new_op(name: str) -> Any:
    """The op ``gpupipe.ops.<name>``, or refuses naming it when this gpupipe does not have it."""
    op = getattr(O, name, None)
    if op is None:
        raise Refuse(f"this gpupipe has no {name} op")
    return op


@rule("torchvision.ColorJitter")
def _color_jitter(t: Any, state: State) -> None:
    parts = [name for name in ("brightness", "contrast", "saturation", "hue") if getattr(t, name) is not None]
    if t.hue is not None and len(parts) > 1:
        raise Refuse(
            f"{' + '.join(parts)}: torchvision applies them in a random order per image, gpupipe in a fixed "
            "order; brightness, contrast and saturation give the same result in any order, hue does not: "
            "jitter hue in a ColorJitter of its own, or leave it out"
        )
    add(state, O.ColorJitter(**{name: tuple(getattr(t, name)) for name in parts}))


@rule("torchvision.RandomGrayscale")
def _random_grayscale(t: Any, state: State) -> None:
    add(state, O.RandomGrayscale(float(t.p)))


@rule("torchvision.Grayscale")
def _grayscale(t: Any, state: State) -> None:
    if t.num_output_channels != 3:
        raise Refuse(f"num_output_channels={t.num_output_channels}: gpupipe's images have 3 channels")
    add(state, O.RandomGrayscale(1.0))


@rule("torchvision.GaussianBlur")
def _gaussian_blur(t: Any, state: State) -> None:
    kx, ky = (int(v) for v in t.kernel_size)
    if kx != ky:
        raise Refuse(f"kernel_size=({kx}, {ky}): gpupipe's GaussianBlur has a square kernel")
    add(state, O.GaussianBlur(kx, pair(t.sigma)))


@rule("torchvision.RandomRotation")
def _random_rotation(t: Any, state: State) -> None:
    bilinear(t, "rotates")
    if t.expand:
        raise Refuse("expand=True: gpupipe's RandomRotation keeps the image size")
    if t.center is not None:
        raise Refuse(f"center={t.center!r}: gpupipe rotates about the image centre")
    if not zero_fill(t.fill):
        raise Refuse(f"fill={t.fill!r}: gpupipe's RandomRotation fills with black")
    add(state, O.RandomRotation(pair(t.degrees)))


@rule("torchvision.RandomAffine")
def _random_affine(t: Any, state: State) -> None:
    op = new_op("RandomAffine")
    kwargs = {k: getattr(t, k) for k in ("translate", "scale", "shear") if getattr(t, k, None) is not None}
    center = None if t.center is None else tuple(float(v) for v in t.center)
    add(
        state,
        op(
            tuple(float(v) for v in t.degrees),
            **kwargs,
            interpolation=_policy_interpolation(t),
            fill=image_fill(t, state),
            center=center,
        ),
    )


def fill_arg(fill: Any) -> float | tuple[float, ...]:
    """torchvision's ``fill`` (``None``, a number, one per channel, or v2's dict per type) as gpupipe's."""
    if isinstance(fill, dict):
        if len({repr(v) for v in fill.values()}) > 1:
            raise Refuse(f"fill={fill!r}: a fill per tensor type; gpupipe fills images only")
        fill = next(iter(fill.values()), None)
    if fill is None:
        return 0.0
    if isinstance(fill, (int, float)):
        return float(fill)
    values = [float(v) for v in fill]
    return values[0] if len(values) == 1 else tuple(values)


def _policy_interpolation(t: Any) -> str:
    """The interpolation of a transform that resamples nearest or bilinear on every backend (no other)."""
    mode = interpolation(t.interpolation)
    if mode not in ("nearest", "bilinear"):
        raise Refuse(f"interpolation={mode.upper()}: gpupipe resamples nearest or bilinear on every backend")
    return mode


def image_fill(t: Any, state: State) -> float | tuple[float, ...]:
    """``t.fill`` in gpupipe's units (``[0, 255]``); on a float image torchvision fills in ``[0, 1]`` units,
    which gpupipe (resampling uint8 images) keeps only for black."""
    fill = fill_arg(t.fill)
    if state.form == "float" and not zero_fill(fill):
        raise Refuse(f"fill={t.fill!r} on a float image: gpupipe fills uint8 images; put it before ToTensor()")
    return fill


def _policy_options(t: Any, state: State) -> dict[str, Any]:
    """A policy's (RandAugment, TrivialAugmentWide, AutoAugment) ``interpolation`` and ``fill``, kept exactly."""
    return {"interpolation": _policy_interpolation(t), "fill": image_fill(t, state)}


@rule("torchvision.RandAugment")
def _rand_augment(t: Any, state: State) -> None:
    add(
        state,
        O.RandAugment(t.num_ops, t.magnitude, num_magnitude_bins=t.num_magnitude_bins, **_policy_options(t, state)),
    )


@rule("torchvision.TrivialAugmentWide")
def _trivial_augment(t: Any, state: State) -> None:
    add(state, O.TrivialAugment(num_magnitude_bins=t.num_magnitude_bins, **_policy_options(t, state)))


@rule("torchvision.AutoAugment")
def _auto_augment(t: Any, state: State) -> None:
    policy = str(getattr(t.policy, "value", t.policy)).lower()
    if policy != "imagenet":
        raise Refuse(f"policy={policy.upper()}: gpupipe has the ImageNet policy only")
    op = new_op("AutoAugment")
    add(state, op(policy, **_policy_options(t, state)))


@rule("torchvision.RandomErasing")
def _random_erasing(t: Any, state: State) -> None:
    if not state.tensor:
        raise Refuse(
            "needs a tensor (v1's fails on a PIL image; v2's erases it or passes it through, by "
            "torchvision version): put it after ToTensor() or ToImage()"
        )
    if isinstance(t.value, str) or not zero_fill(t.value):
        raise Refuse(f"value={t.value!r}: gpupipe erases to 0 after Normalize (or black without one)")
    add(state, O.RandomErasing(float(t.p), scale=tuple(t.scale), ratio=tuple(t.ratio)))
    if state.normalize is None:
        state.erased_before_normalize = state.where


@rule("torchvision.Normalize")
def _normalize(t: Any, state: State) -> None:
    if state.form != "float":
        raise Refuse(
            f"needs a float tensor, got {'a PIL image' if state.form == 'pil' else 'uint8'}: put ToTensor() first"
        )
    if state.normalize is not None:
        raise Refuse("a second Normalize: gpupipe normalises once")
    if state.erased_before_normalize:
        raise Refuse(
            f"follows RandomErasing at {state.erased_before_normalize}, which erases to black there; gpupipe "
            "erases to the normalisation mean (0 after Normalize): put RandomErasing after Normalize"
        )
    mean, std = per_channel(t.mean), per_channel(t.std)
    if state.unscaled:  # on [0, 255] floats (mmcv's mean=[123.675, ...]): the same, in gpupipe's [0, 1] units
        mean, std = (m / 255 for m in mean), (s / 255 for s in std)  # type: ignore[assignment]
    state.normalize = O.Normalize(mean, std)


@rule("torchvision.ToTensor")
def _to_tensor(t: Any, state: State) -> None:
    if state.tensor:
        raise Refuse("needs a PIL image, got a tensor")
    state.form, state.tv_image = "float", False


@rule("torchvision.PILToTensor")
def _pil_to_tensor(t: Any, state: State) -> None:
    if state.tensor:
        raise Refuse("needs a PIL image, got a tensor")
    state.form, state.tv_image = "uint8", False


@rule("torchvision.ToImage")
def _to_image(t: Any, state: State) -> None:
    state.tv_image = True  # a tv_tensors.Image, a PIL image's or a tensor's
    if state.form == "pil":
        state.form = "uint8"


@rule("torchvision.ToPureTensor", "torchvision.Identity", "torchvision.RGB")
def _nothing(t: Any, state: State) -> None:
    """Changes nothing gpupipe gives (v2's ``RGB()``: ``ImageFolder``'s loader and gpupipe's decode give RGB);
    ``ToPureTensor`` unwraps a ``tv_tensors.Image`` (which a ``ToDtype`` per type tells apart)."""
    if type(t).__name__ == "ToPureTensor":
        state.tv_image = False


#: Ops a RandomApply may wrap: their own probability is multiplied by the RandomApply's (one coin each).
_COIN_OPS = ("HorizontalFlip", "VerticalFlip", "RandomGrayscale", "RandomErasing")


@rule("torchvision.RandomApply")
def _random_apply(t: Any, state: State) -> None:
    p = float(t.p)
    inner = _applied(t.transforms)
    if p == 0.0:
        return
    before, form = len(state.ops), (state.form, state.normalize, state.dtype, state.unscaled)
    problems, kind = len(state.problems), state.tv_image
    for i, transform in enumerate(inner):
        walk(transform, state, f"{state.where}[{i}]")
    if p == 1.0 or len(state.problems) > problems:
        return
    state.tv_image = kind if state.tv_image == kind else None  # a ToImage() applied or not: either type
    added = state.ops[before:]
    if not added and form == (state.form, state.normalize, state.dtype, state.unscaled):
        return  # nothing that changes the image (an empty list, RGB()): the coin changes nothing
    if len(added) != 1 or added[0].name not in _COIN_OPS:
        names = ", ".join(type(x).__name__ for x in inner)
        del state.ops[before:], state.places[before - 1 :]
        raise Refuse(f"p={p} around {names}: gpupipe can apply only one flip, grayscale or erasing with a probability")
    coin: Any = added[0]
    state.ops[-1] = dataclasses.replace(coin, p=coin.p * p)


def _applied(transforms: Any) -> list[Any]:
    """A ``RandomApply``'s ``transforms`` as a list; one transform alone (or a ``Compose``), which torchvision's
    v1 ``RandomApply`` takes and then fails to iterate (``TypeError`` at the first image), is refused naming it."""
    if isinstance(transforms, (list, tuple)) or hasattr(transforms, "__iter__"):
        return list(transforms)
    raise Refuse(
        f"transforms={type(transforms).__name__}(...) is one transform, not a list: torchvision's RandomApply "
        f"iterates over it and raises TypeError at the first image; give [{type(transforms).__name__}(...)]"
    )
