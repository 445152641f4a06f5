"""``gpupipe.from_torchvision``: a torchvision (v1 or v2) or timm transform as gpupipe ops.

The entry point above the machinery (``gpupipe.interop.transforms``) and the rules that register
themselves with it (``gpupipe.interop.rules``, ``gpupipe.interop.timm``): importing this module loads
every rule, so nothing imports a rule module lazily.
"""

from __future__ import annotations

from typing import Any

from ..errors import Error
from ..ops import Op, Output
from . import rules, timm
from .transforms import RULES, State, walk

#: The rule modules, each registering its rules when imported (named, so the import is used).
RULE_MODULES = (rules, timm)


#: How to run a transform that cannot be compiled anyway (the refusal says it).
FALLBACK_HINT = (
    "to run it as it is (your transform on PIL images in DataLoader workers, on the CPU), pass "
    "fallback='torchvision' to gpupipe.DataLoader or gpupipe.loader"
)


class UnsupportedTransform(Error, ValueError):
    """A transform gpupipe cannot compile without changing its meaning.

    Attributes:
        problems: ``(position, transform name, reason)`` of every transform refused, e.g.
            ``("Compose[3]", "Lambda", "a user function ...")``.
    """

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        super().__init__(
            f"cannot compile {len(problems)} transform{'s' if len(problems) != 1 else ''} to gpupipe ops "
            "(each would give another result than torchvision's):\n"
            + self.listing
            + f"\n{FALLBACK_HINT}\nsupported: "
            + ", ".join(supported_names())
        )

    @property
    def listing(self) -> str:
        """One indented line per transform refused: ``  Compose[3] Lambda: why``."""
        return "\n".join(f"  {where} {name}: {why}" for where, name, why in self.problems)


def supported_names() -> list[str]:
    """The transforms that compile, ``timm.<Name>`` for timm's own."""
    names = {name.split(".", 1)[1] if name.startswith("torchvision.") else name for name in RULES}
    return sorted(names | {"Compose"})


def _load_rules() -> None:
    from . import rules, timm  # noqa: F401 -- the rules register themselves

    del rules, timm


def from_torchvision(transform: Any) -> list[Op]:
    """The gpupipe ops with the meaning of a torchvision (v1 or v2) or timm transform.

    Args:
        transform: a ``Compose`` (nested ``Compose`` and ``RandomApply`` included), a
            ``torch.nn.Sequential`` of transforms, or one transform, applied as a
            ``torchvision.datasets.ImageFolder`` applies it: to the PIL image of each file.

    Returns:
        ``[Decode(), ...]``: the pipeline, ending with ``Output("uint8")`` when the transform
        ends with a uint8 tensor (``PILToTensor``, ``ToImage``) and with ``Output(dtype)`` for
        ``ToDtype`` to float16 / bfloat16; a float transform without ``Normalize`` gives
        ``[0, 1]`` floats, as ``ToTensor`` does.

    Raises:
        UnsupportedTransform: naming every transform that cannot be compiled, its position
            (``Compose[3]``) and why, and listing what is supported.
    """
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


__all__ = ["from_torchvision", "UnsupportedTransform", "supported_names"]
