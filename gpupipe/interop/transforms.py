"""The machinery that compiles ``torchvision.transforms`` (v1 and v2) and timm transforms to gpupipe ops:
the rule registry (``rule``), the compile state (``State``) and the walk; ``gpupipe.interop.compile``
holds the entry point, ``from_torchvision``.

``from_torchvision`` walks a transform (a ``Compose``, nested ``Compose`` /
``RandomApply``, or one transform) in order, keeping track of what the image
is at each step (a PIL image, a uint8 tensor, a float tensor in ``[0, 1]``,
normalised or not), and asks each transform's rule (``gpupipe.interop.rules``,
``gpupipe.interop.timm``) for the gpupipe ops with the same meaning. A
transform whose meaning gpupipe cannot keep is not approximated: every such
transform is collected, with its position and the reason, into one
``UnsupportedTransform`` raised at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import Error
from ..ops import Decode, Effect, Normalize, Op


class Refuse(Error):
    """Raised by a rule: this transform cannot be compiled, for ``reason`` (caught by ``walk``
    and gathered into one ``UnsupportedTransform``; it never reaches the user alone)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class State:
    """What the image is at the current step, and the ops gathered so far.

    Attributes:
        form: ``"pil"`` (as a torchvision dataset loads it), ``"uint8"`` or ``"float"`` (tensor).
        ops: the per-image ops so far (``Decode`` first).
        normalize: the ``Normalize`` met, if any (gpupipe normalises last).
        dtype: the output dtype when the transform ends in a tensor.
        where: the position of the transform being compiled (``Compose[3]``).
        erased_before_normalize: where a ``RandomErasing`` met before any ``Normalize`` stands.
        unscaled: where a ``ToDtype(float, scale=False)`` of a uint8 image stands (floats in ``[0, 255]``), if any.
        problems: ``(position, name, reason)`` of each transform refused so far.
        enclosing: the ids of the containers and wrappers ``walk`` is inside (one met again is a cycle).
        tv_image: whether a tensor image is a ``tv_tensors.Image`` (v2's ``ToImage()``), a plain tensor
            (``False``), or either (``None``: a v1 or timm transform since, which may unwrap it).
        places: the position of the transform each op after ``Decode`` came from (``ops[k + 1]``: ``places[k]``).
        numpy_at: where timm's ``ToNumpy`` stands, if it was met (a numpy array, which only the collate takes).
        image_size: the ``(h, w)`` every image is stored at, where known (a padded ``RandomCrop`` needs a size).
        needs_size: how many of ``problems`` that size would lift (``gpupipe.interop.crops.NeedsSize``).
    """

    form: str = "pil"
    ops: list[Op] = field(default_factory=lambda: [Decode()])
    normalize: Normalize | None = None
    dtype: str | None = None
    where: str = ""
    erased_before_normalize: str = ""
    unscaled: str = ""
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    enclosing: set[int] = field(default_factory=set)  # ids of the containers and wrappers being walked through
    tv_image: bool | None = False
    places: list[str] = field(default_factory=list)
    numpy_at: str = ""
    image_size: tuple[int, int] | None = None
    needs_size: int = 0

    def add(self, *ops: Op) -> None:
        """Appends image ops; after ``Normalize`` only what commutes with it may come (the rule checks). On
        floats in ``[0, 255]`` (``ToDtype(scale=False)``) only ops that move pixels, or treat every value range
        alike (grayscale, erasing to 0), may come before ``Normalize``: torchvision's others clamp to 1."""
        for op in ops if self.unscaled and self.normalize is None else ():
            if op.effect != Effect.GEOMETRIC and op.name not in ("RandomGrayscale", "RandomErasing"):
                raise Refuse(
                    f"on floats in [0, 255] (ToDtype(scale=False) at {self.unscaled}) gpupipe keeps only what moves "
                    "pixels, grayscale and erasing (torchvision's colour ops clamp such floats to 1): put it before "
                    "the ToDtype, or use scale=True"
                )
        self.ops.extend(ops)
        self.places.extend(self.where for _ in ops)

    @property
    def tensor(self) -> bool:
        return self.form != "pil"


#: A rule: ``rule(transform, state) -> None``; it adds ops to ``state`` or raises ``Refuse``.
Rule = Callable[[Any, State], None]

#: Rules by ``"<family>.<ClassName>"``: family ``torchvision`` (v1 and v2 alike) or ``timm``.
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    """Registers a rule for the transforms ``names`` (``"torchvision.Resize"``, ``"timm.RandomErasing"``)."""

    def register(fn: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"two rules for {name}")
            RULES[name] = fn
        return fn

    return register


def family(transform: Any) -> str | None:
    """``"torchvision"``, ``"timm"`` or ``None``: whose transform this is (by its class's module)."""
    module = type(transform).__module__ or ""
    if module.startswith("torchvision.transforms"):
        return "torchvision"
    if module.startswith("timm.data"):
        return "timm"
    return None


def _is_sequential(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch.nn.Sequential`` (torchvision's documented scriptable ``Compose``)."""
    import torch

    return isinstance(obj, torch.nn.Sequential)


def is_transform(obj: Any) -> bool:
    """Whether ``obj`` is a torchvision or timm transform, or a ``torch.nn.Sequential`` of transforms
    (what ``from_torchvision`` takes; a member that is not a transform is refused by name there)."""
    return family(obj) is not None or _is_sequential(obj)


def _containers(transform: Any) -> list[Any] | None:
    """The transforms inside a ``Compose`` (v1, v2 or timm's) or a ``torch.nn.Sequential``, else ``None``."""
    if type(transform).__name__ == "Compose" and family(transform):
        return list(transform.transforms)
    if _is_sequential(transform):
        return list(transform)
    return None


#: Instructions that do nothing a delegating ``__call__`` could differ by (they vary between Python versions).
_NOISE = {"RESUME", "PRECALL", "CACHE", "NOP", "PUSH_NULL", "EXTENDED_ARG", "KW_NAMES"}
_CALLS = {"CALL", "CALL_METHOD", "CALL_FUNCTION"}
_SAME = {"LOAD_FAST_BORROW": "LOAD_FAST", "LOAD_FAST_CHECK": "LOAD_FAST"}  # newer Pythons' names for a local read


def _one_call(fn: Any, argcount: int) -> tuple[str, Any, Any, list[str]] | None:
    """``(receiver, attribute, argument, names)`` where ``fn``'s whole body is ``return receiver.attribute(argument)``
    (``receiver`` and ``argument`` each a parameter or a constant; ``names`` its parameters), else ``None``."""
    import dis

    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount != argcount or code.co_kwonlyargcount or code.co_flags & 0x0C:  # *a, **kw
        return None
    steps = [(_SAME.get(i.opname, i.opname), i.argval) for i in dis.get_instructions(code) if i.opname not in _NOISE]
    if len(steps) != 5 or steps[0][0] != "LOAD_FAST" or steps[2][0] not in ("LOAD_FAST", "LOAD_CONST"):
        return None
    if steps[1][0] not in ("LOAD_ATTR", "LOAD_METHOD") or steps[3][0] not in _CALLS or steps[4][0] != "RETURN_VALUE":
        return None
    return steps[0][1], steps[1][1], steps[2], list(code.co_varnames[:argcount])


def delegate(obj: Any) -> str | None:
    """The attribute ``obj`` hands each image to, where ``obj`` is a wrapper of the user's own whose ``__call__``
    (or, for a ``torch.nn.Module`` without hooks, ``forward``) is exactly ``return self.<name>(img)``, as
    torchvision's reference ``ClassificationPresetTrain`` / ``ClassificationPresetEval`` are; else ``None``.
    The bytecode is read, so a wrapper that does anything more (a second call, a branch) is not one."""
    import torch

    method = next((vars(k)["__call__"] for k in type(obj).__mro__ if "__call__" in vars(k)), None)
    if isinstance(obj, torch.nn.Module) and method is torch.nn.Module.__call__:
        hooked = obj._forward_hooks or obj._forward_pre_hooks or obj._backward_hooks
        method = None if hooked else getattr(type(obj), "forward", None)
    call = _one_call(method, 2)
    if call is None or call[0] != call[3][0] or call[2] != ("LOAD_FAST", call[3][1]):
        return None
    own = getattr(obj, "__dict__", {})
    held = {**own, **own.get("_modules", {})}  # an nn.Module keeps a v2 Compose in ``_modules``
    return call[1] if call[1] in held and held[call[1]] is not obj else None


def converts_to_rgb(transform: Any) -> bool:
    """Whether ``transform`` is a function (or a ``Lambda`` of one) whose whole body is ``return
    image.convert("RGB")`` (CLIP's ``_convert_image_to_rgb``, ``Lambda(lambda x: x.convert("RGB"))``)."""
    fn = getattr(transform, "lambd", None) if type(transform).__name__ == "Lambda" else transform
    call = _one_call(fn, 1) if type(fn).__name__ == "function" else None
    return call is not None and call[0] == call[3][0] and call[1:3] == ("convert", ("LOAD_CONST", "RGB"))


def walk(transform: Any, state: State, where: str) -> None:
    """Compiles ``transform`` (at position ``where``) into ``state``, recording refusals there."""
    name = type(transform).__name__
    if id(transform) in state.enclosing:  # torchvision would recurse without end at the first image
        state.problems.append((where or name, name, "holds itself (a cycle of transforms)"))
        return
    inner = _containers(transform)
    fam = family(transform) if inner is None else None
    attribute = None if inner is not None or fam else delegate(transform)
    if inner is not None or attribute is not None:
        state.enclosing.add(id(transform))
        if inner is not None:
            for i, t in enumerate(inner):
                walk(t, state, f"{where}[{i}]" if where else f"{name}[{i}]")
        elif attribute is not None:  # the reference recipe's preset: compiles as the transform it calls
            walk(getattr(transform, attribute), state, f"{where or name}.{attribute}")
        state.enclosing.discard(id(transform))
        return
    where = where or name
    if state.form == "pil" and converts_to_rgb(transform):  # the PIL loader's images are RGB already: nothing
        return
    if state.numpy_at:  # timm's ToNumpy gives a numpy array: torch's collate batches it, transforms do not take it
        why = f"follows ToNumpy at {state.numpy_at}, a numpy array: only the DataLoader's collate takes it"
        state.problems.append((where, name, why))
        return
    fn = RULES.get(f"{fam}.{name}") if fam else None
    state.where = where
    if state.tv_image and ".v2" not in type(transform).__module__:  # v1's and timm's kernels may unwrap it
        state.tv_image = None
    if fn is None:
        why = (
            "not a torchvision or timm transform: gpupipe cannot compile it"
            if fam is None
            else REASONS.get(f"{fam}.{name}", "no gpupipe op has its meaning")
        )
        state.problems.append((where, name, why))
        return
    try:
        fn(transform, state)
    except Refuse as refused:
        state.problems.append((where, name, refused.reason))
        state.needs_size += getattr(refused, "size_lifts", False)
    except ValueError as err:  # an op's own check (a value gpupipe's op cannot take)
        state.problems.append((where, name, str(err)))


def per_channel(values: Any) -> tuple[float, float, float]:
    """``Normalize``'s mean or std as three numbers, as torchvision broadcasts it: a number, one or three values,
    a ``(3, 1, 1)`` tensor or array; another shape (a per-pixel ``(3, H, W)`` mean) is refused, naming it."""
    import torch

    try:
        if isinstance(values, (list, tuple)):  # v2 keeps list(mean): numbers, or one-element tensors
            values = [float(v) for v in values]
        as_tensor = torch.as_tensor(values.tolist() if hasattr(values, "tolist") else values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise Refuse(f"mean and std must be numbers (3, or 1), got {values!r}") from None
    shape = tuple(as_tensor.shape)
    one = as_tensor.numel() == 1 and as_tensor.ndim <= 3  # 0.5, (0.5,), a (1, 1, 1) tensor: every channel
    if not one and shape not in ((3,), (3, 1, 1)):
        raise Refuse(
            f"mean and std of shape {shape}: gpupipe normalises per channel (3 values, or 1; a (3, 1, 1) tensor)"
        )
    flat = as_tensor.reshape(-1).tolist()
    if len(flat) == 1:
        flat = flat * 3
    if any(math.isnan(v) for v in flat):
        raise Refuse(f"mean and std must not be NaN, got {values!r}")
    return flat[0], flat[1], flat[2]


#: Why a transform without a rule cannot be compiled, by ``"<family>.<ClassName>"`` (default: no op).
REASONS: dict[str, str] = {
    "torchvision.Lambda": "a user function: gpupipe cannot compile Python code",
    "torchvision.AugMix": "no gpupipe op: AugMix blends several augmentation chains per image",
    "torchvision.RandomChoice": "gpupipe has no random choice among transforms",
    "torchvision.RandomOrder": "gpupipe applies ops in a fixed order",
    "torchvision.ToPILImage": "gpupipe keeps images as tensors",
    "torchvision.Pad": "no gpupipe op pads on every side",
    "torchvision.FiveCrop": "gives several images per sample",
    "torchvision.TenCrop": "gives several images per sample",
}


__all__ = ["Refuse", "State", "RULES", "REASONS", "rule", "walk", "is_transform", "family", "per_channel"]
