"""The rule for torchvision's ``RandomCrop`` (v1 and v2), padding included, and the sizes it needs.

torchvision's ``RandomCrop(size, padding=p)`` pads the image (``(left, top, right, bottom)``; with
``pad_if_needed=True`` a side still smaller than the crop by the difference on both sides) and then draws a
window uniformly. With a black constant pad of an image whose size is known, that is gpupipe's
``CenterCrop`` to the padded size (which pads a larger crop with black, ``(crop - side) // 2`` before),
then ``RandomCrop(size)`` (a window drawn uniformly): exact where the pad is one a centred crop gives
(``right - left`` and ``bottom - top`` each 0 or 1).
"""

from __future__ import annotations

from typing import Any

from .. import ops as O
from ..ops import Op
from .rules import add, size_arg, zero_fill
from .transforms import Refuse, State, rule


class NeedsSize(Refuse):
    """A refusal that the size every image is stored at would lift (``from_torchvision(..., image_size=)``)."""

    size_lifts = True


def through(op: Op, size: tuple[int, int]) -> tuple[int, int] | None:
    """The ``(h, w)`` after ``op`` of an image of ``size`` (``None``: not known before it is read)."""
    if isinstance(op, O.Resize):
        return op.resized(*size)
    if isinstance(op, O.CenterCrop):  # torchvision pads an image smaller than the crop
        return op.size
    try:
        return op.output_size(size)
    except ValueError:
        return None


def size_reaching(state: State) -> tuple[int, int] | None:
    """The ``(h, w)`` every image has after ``state.ops``: fixed by the ops, or followed from the size every
    image is stored at (``state.image_size``); ``None`` where neither tells."""
    size = None
    for op in state.ops:
        size = op.output_size(size)
    followed = state.image_size
    for op in state.ops if size is None else ():
        followed = None if followed is None else through(op, followed)
    return size or followed


def _padding(t: Any) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` of v1's ``padding`` (a number, 1, 2 or 4 values) or v2's parsed one."""
    padding = t.padding
    if padding is None:
        return 0, 0, 0, 0
    if ".v2" in type(t).__module__:  # v2 keeps [left, right, top, bottom]
        left, right, top, bottom = (int(v) for v in padding)
        return left, top, right, bottom
    values = [int(padding)] if isinstance(padding, (int, float)) else [int(v) for v in padding]
    if len(values) == 1:
        return values[0], values[0], values[0], values[0]
    if len(values) == 2:
        return values[0], values[1], values[0], values[1]
    if len(values) == 4:
        return values[0], values[1], values[2], values[3]
    raise Refuse(f"padding={padding!r}: torchvision takes 1, 2 or 4 values")


def _shown(t: Any, pads: tuple[int, int, int, int]) -> str:
    """The padding as the user wrote it (v2 keeps another order: shown as ``(left, top, right, bottom)``)."""
    if ".v2" in type(t).__module__ and t.padding is not None:
        return f"padding={pads} (left, top, right, bottom)"
    return f"padding={t.padding!r}"


@rule("torchvision.RandomCrop")
def _random_crop(t: Any, state: State) -> None:
    crop = O.RandomCrop(size_arg(t.size))
    height, width = crop.size
    left, top, right, bottom = pads = _padding(t)
    asked = [_shown(t, pads)] if any(pads) else []
    asked += ["pad_if_needed=True"] if t.pad_if_needed else []
    if min(pads) < 0:
        raise Refuse(f"{asked[0]}: a negative padding cuts the image; gpupipe pads only")
    size = size_reaching(state)
    if size is None:
        if asked:
            raise NeedsSize(
                f"{' and '.join(asked)} pads the image it receives, whose size the transforms before it do not fix "
                "(and the images' is not one): gpupipe pads a known size only; over images of one size (CIFAR's 32 "
                "x 32) gpupipe.DataLoader reads it from the dataset, or put a Resize((h, w)) or crop before it"
            )
        add(state, crop)
        return
    padded_h, padded_w = size[0] + top + bottom, size[1] + left + right
    if t.pad_if_needed and padded_h < height:  # torchvision pads the difference on both sides
        top, bottom, padded_h = top + height - padded_h, bottom + height - padded_h, 2 * height - padded_h
    if t.pad_if_needed and padded_w < width:
        left, right, padded_w = left + width - padded_w, right + width - padded_w, 2 * width - padded_w
    if not any((left, top, right, bottom)):
        add(state, crop)
        return
    what = " and ".join(asked)
    if str(t.padding_mode) != "constant":
        raise Refuse(f"{what} with padding_mode={t.padding_mode!r}: gpupipe pads with a constant (black) only")
    if not zero_fill(t.fill):
        raise Refuse(f"{what} with fill={t.fill!r}: gpupipe pads with black only")
    if right - left not in (0, 1) or bottom - top not in (0, 1):
        raise Refuse(
            f"{what} pads ({left}, {top}, {right}, {bottom}) (left, top, right, bottom) on the {size[0]} x {size[1]} "
            "images it receives; gpupipe pads centred (the right and bottom as much as the left and top, or one "
            "more) only"
        )
    if padded_h < height or padded_w < width:
        raise Refuse(
            f"size={(height, width)} is larger than the {padded_h} x {padded_w} image that {what} gives (the "
            f"{size[0]} x {size[1]} image it receives, padded): torchvision's RandomCrop raises ValueError for it"
        )
    add(state, O.CenterCrop((padded_h, padded_w)), crop)


__all__ = ["NeedsSize", "through", "size_reaching"]
