"""The rules for torchvision's dtype conversions (``ToDtype``, v1 and v2 ``ConvertImageDtype``): the output
dtype they give the image, whether its values are scaled, and which entry of a ``ToDtype`` given a dtype per
tensor type (``ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)``) torchvision applies."""

from __future__ import annotations

from typing import Any

from .transforms import Refuse, State, rule

_FLOATS = {"torch.float32": None, "torch.float16": "float16", "torch.bfloat16": "bfloat16"}
_MISSING = object()


def to_float(state: State, dtype: Any, scale: bool) -> None:
    """The image made ``dtype`` (uint8, or a float: in ``[0, 1]`` where ``scale``, else in ``[0, 255]``)."""
    name = str(dtype)
    if name == "torch.uint8" and state.form != "float":
        state.form = "uint8" if state.form == "pil" else state.form
        return
    if name == "torch.uint8":
        raise Refuse(
            f"dtype={name} after a float image: gpupipe gives uint8 images only as decoded; use PILToTensor() or "
            "ToImage() instead of ToTensor() (or of ToDtype / ConvertImageDtype to a float) before it"
        )
    if name not in _FLOATS:
        raise Refuse(f"dtype={name}: gpupipe gives float32, float16, bfloat16 or uint8 images")
    if state.form == "pil":
        raise Refuse("needs a tensor, got a PIL image: put ToImage() or PILToTensor() first")
    if state.form == "uint8" and not scale:  # floats in [0, 255]: Normalize's mean and std in those units
        state.unscaled = state.where
    state.form = "float"
    state.dtype = _FLOATS[name]


def per_type(table: dict[Any, Any], state: State) -> Any:
    """The entry of a ``ToDtype`` dict that torchvision applies to the image here: ``table[type(image)]`` (the
    exact type: a ``tv_tensors.Image`` after v2's ``ToImage()``, a plain ``torch.Tensor`` after ``ToTensor()``,
    ``PILToTensor()`` or ``ToPureTensor()``, a PIL image before), else ``table["others"]``; ``None`` leaves the
    image as it is. Refused where torchvision raises (no entry) or where the image could be either tensor type
    (a v1 transform since ``ToImage()``) and the two entries differ."""
    import PIL.Image
    import torch
    from torchvision import tv_tensors

    kinds: list[Any] = [PIL.Image.Image] if state.form == "pil" else [tv_tensors.Image, torch.Tensor]
    if state.form != "pil" and state.tv_image is not None:
        kinds = [tv_tensors.Image if state.tv_image else torch.Tensor]
    found = [table[k] if k in table else table.get("others", _MISSING) for k in kinds]
    names = " or ".join(f"{k.__module__.split('.')[0]}.{k.__qualname__}" for k in kinds)
    if any(f is _MISSING for f in found):
        raise Refuse(
            f"dtype={table!r} has no dtype for the image here ({names}) and no 'others': torchvision raises "
            "ValueError at the first image"
        )
    if len({str(f) for f in found}) > 1:
        raise Refuse(
            f"dtype={table!r} gives a tv_tensors.Image and a plain tensor other dtypes, and the image may be "
            "either here (a v1 transform since ToImage() may give a plain tensor back): use v2 transforms "
            "between them, or one dtype"
        )
    return found[0]


@rule("torchvision.ConvertImageDtype")
def _convert_image_dtype(t: Any, state: State) -> None:
    to_float(state, t.dtype, scale=True)


@rule("torchvision.ToDtype")
def _to_dtype(t: Any, state: State) -> None:
    dtype = per_type(t.dtype, state) if isinstance(t.dtype, dict) else t.dtype
    if dtype is not None:  # None: torchvision leaves the image as it is
        to_float(state, dtype, scale=t.scale)
