"""``torchvision.transforms`` (v1 and v2) and timm transforms compiled to gpupipe ops.

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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import Error
from ..ops import Decode, Normalize, Op, Output


class UnsupportedTransform(Error, ValueError):
    """A transform gpupipe cannot compile without changing its meaning.

    Attributes:
        problems: ``(position, transform name, reason)`` of every transform refused, e.g.
            ``("Compose[3]", "Lambda", "a user function ...")``.
    """

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        lines = [f"  {where} {name}: {why}" for where, name, why in problems]
        super().__init__(
            f"cannot compile {len(problems)} transform{'s' if len(problems) != 1 else ''} to gpupipe ops "
            "(each would give another result than torchvision's):\n"
            + "\n".join(lines)
            + "\nsupported: "
            + ", ".join(supported_names())
        )


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
        problems: ``(position, name, reason)`` of each transform refused so far.
    """

    form: str = "pil"
    ops: list[Op] = field(default_factory=lambda: [Decode()])
    normalize: Normalize | None = None
    dtype: str | None = None
    where: str = ""
    erased_before_normalize: str = ""
    problems: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, *ops: Op) -> None:
        """Appends image ops; after ``Normalize`` only what commutes with it may come (the rule checks)."""
        self.ops.extend(ops)

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


def is_transform(obj: Any) -> bool:
    """Whether ``obj`` is a torchvision or timm transform (what ``from_torchvision`` takes)."""
    return family(obj) is not None


def supported_names() -> list[str]:
    """The transforms that compile, ``timm.<Name>`` for timm's own."""
    _load_rules()
    names = {name.split(".", 1)[1] if name.startswith("torchvision.") else name for name in RULES}
    return sorted(names | {"Compose"})


def _load_rules() -> None:
    from . import rules, timm  # noqa: F401 -- the rules register themselves

    del rules, timm


def _containers(transform: Any) -> list[Any] | None:
    """The transforms inside a ``Compose`` (v1, v2 or timm's), else ``None``."""
    if type(transform).__name__ == "Compose" and family(transform):
        return list(transform.transforms)
    return None


def walk(transform: Any, state: State, where: str) -> None:
    """Compiles ``transform`` (at position ``where``) into ``state``, recording refusals there."""
    inner = _containers(transform)
    if inner is not None:
        for i, t in enumerate(inner):
            walk(t, state, f"{where}[{i}]" if where else f"Compose[{i}]")
        return
    name = type(transform).__name__
    where = where or name
    fam = family(transform)
    fn = RULES.get(f"{fam}.{name}") if fam else None
    state.where = where
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
    except ValueError as err:  # an op's own check (a value gpupipe's op cannot take)
        state.problems.append((where, name, str(err)))


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


def from_torchvision(transform: Any) -> list[Op]:
    """The gpupipe ops with the meaning of a torchvision (v1 or v2) or timm transform.

    Args:
        transform: a ``Compose`` (nested ``Compose`` and ``RandomApply`` included) or one
            transform, applied as a ``torchvision.datasets.ImageFolder`` applies it: to the PIL
            image of each file.

    Returns:
        ``[Decode(), ...]``: the pipeline, ending with ``Output("uint8")`` when the transform
        ends with a uint8 tensor (``PILToTensor``, ``ToImage``) and with ``Output(dtype)`` for
        ``ToDtype`` to float16 / bfloat16; a float transform without ``Normalize`` gives
        ``[0, 1]`` floats, as ``ToTensor`` does.

    Raises:
        UnsupportedTransform: naming every transform that cannot be compiled, its position
            (``Compose[3]``) and why, and listing what is supported.
    """
    _load_rules()
    state = State()
    walk(transform, state, "")
    _finish(state)
    if state.problems:
        raise UnsupportedTransform(state.problems)
    ops: list[Op] = list(state.ops)
    if state.normalize is not None:
        ops.append(state.normalize)
    if state.dtype is not None:
        ops.append(Output(state.dtype))
    return ops


def _finish(state: State) -> None:
    """Sets the output dtype: uint8 for a transform ending with a uint8 tensor. One ending with a PIL
    image (which a ``DataLoader`` could not batch; one transform alone) gives what ``ToTensor`` would."""
    if state.form == "uint8":
        state.dtype = state.dtype or "uint8"


__all__ = ["from_torchvision", "UnsupportedTransform", "is_transform", "supported_names", "RULES", "rule"]
