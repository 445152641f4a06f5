"""``gpupipe.from_torchvision``: a torchvision (v1 or v2) or timm transform as gpupipe ops.

The entry point above the machinery (``gpupipe.interop.transforms``) and the rules that register
themselves with it (``gpupipe.interop.rules``, ``.dtypes``, ``.timm``): importing this module loads
every rule, so nothing imports a rule module lazily.
"""

from __future__ import annotations

from typing import Any

from ..errors import Error
from ..ops import Normalize, Op, Output
from . import crops, dtypes, rules, timm
from .transforms import RULES, State, walk

#: The rule modules, each registering its rules when imported (named, so the import is used).
RULE_MODULES = (crops, dtypes, rules, timm)


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
        needs_size: whether the size every image is stored at would lift every problem (a padded
            ``RandomCrop`` over images of unknown size): ``from_torchvision(..., image_size=)``.
    """

    def __init__(
        self, problems: list[tuple[str, str, str]], *, changed: bool = False, needs_size: bool = False
    ) -> None:
        self.problems = problems
        self.needs_size = needs_size
        if changed:  # compiled when the loader was built, edited in place since (TransformGuard)
            super().__init__(f"a transform gpupipe compiled to ops changed after the loader was built:\n{self.listing}")
            return
        super().__init__(
            f"cannot compile {len(problems)} transform{'s' if len(problems) != 1 else ''} to gpupipe ops "
            "(each would give another result than torchvision's):\n"
            + self.listing
            + f"\n{FALLBACK_HINT}\nsupported: "
            + ", ".join(supported_names())
        )

    @property
    def listing(self) -> str:
        """One indented line per transform refused: ``  Compose[3] Lambda: why`` (one alone: ``  Lambda: why``)."""
        named = ((where if where == name else f"{where} {name}", why) for where, name, why in self.problems)
        return "\n".join(f"  {what}: {why}" for what, why in named)


def supported_names() -> list[str]:
    """The transforms that compile, ``timm.<Name>`` for timm's own."""
    names = {name.split(".", 1)[1] if name.startswith("torchvision.") else name for name in RULES}
    return sorted(names | {"Compose"})


def _load_rules() -> None:
    from . import dtypes, rules, timm  # noqa: F401 -- the rules register themselves

    del dtypes, rules, timm


def from_torchvision(transform: Any, *, image_size: tuple[int, int] | None = None) -> list[Op]:
    """The gpupipe ops with the meaning of a torchvision (v1 or v2) or timm transform.

    Args:
        transform: a ``Compose`` (nested ``Compose`` and ``RandomApply`` included), a
            ``torch.nn.Sequential`` of transforms, or one transform, applied as a
            ``torchvision.datasets.ImageFolder`` applies it: to the PIL image of each file; an object whose
            ``__call__`` is exactly ``return self.transforms(img)`` (torchvision's reference presets) compiles as
            the transform it holds (``transforms.delegate``).
        image_size: the ``(h, w)`` every image is stored at, where known: a ``RandomCrop`` with ``padding`` (or
            ``pad_if_needed``) after no op fixing the size pads that size (``gpupipe.DataLoader`` reads it
            from a dataset whose images are all of one size, as CIFAR's 32 x 32).

    Returns:
        ``[Decode(), ...]``: the pipeline, ending with ``Output("uint8")`` when the transform
        ends with a uint8 tensor (``PILToTensor``, ``ToImage``) and with ``Output(dtype)`` for
        ``ToDtype`` to float16 / bfloat16; a float transform without ``Normalize`` gives
        ``[0, 1]`` floats, as ``ToTensor`` does; ``ToDtype(float, scale=False)`` of a uint8 image gives
        ``[0, 255]`` floats, as torchvision's (a ``Normalize`` after it is in those units).

    Raises:
        UnsupportedTransform: naming every transform that cannot be compiled, its position
            (``Compose[3]``) and why, and listing what is supported.
    """
    state = State(image_size=None if image_size is None else (int(image_size[0]), int(image_size[1])))
    walk(transform, state, "")
    _finish(state)
    if state.problems:
        raise UnsupportedTransform(state.problems, needs_size=state.needs_size == len(state.problems))
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
    if state.unscaled and state.normalize is None:  # ToDtype(scale=False) alone: floats in [0, 255], as torch's
        state.normalize = Normalize((0.0, 0.0, 0.0), (1 / 255, 1 / 255, 1 / 255))


class TransformGuard:
    """Refuses a pass once a transform compiled to ops was changed in place (``Resize.size`` raised by a
    progressive-resizing schedule, a ``Normalize`` appended, a ``RandAugment.magnitude`` schedule).

    torch's ``DataLoader`` applies the transform object as it is at each pass; gpupipe compiled it once, when
    the loader was built, and would go on with the old ops silently. Compiling again is cheap (no image is
    read), so each check compiles the transform again and compares the ops.

    Args:
        transform: the user's transform object (a ``Compose``, ...).
        ops: what ``from_torchvision(transform)`` gave when the loader was built.
        what: how the message names it (``ImageFolder.transform``, ``pipeline``).
        inner: a guard checked first (the dataset's ``DatasetGuard``), or ``None``.
        image_size: the images' one size it was compiled for (``from_torchvision``'s), or ``None``.
    """

    def __init__(
        self, transform: Any, ops: list[Op], what: str, inner: Any = None, image_size: tuple[int, int] | None = None
    ) -> None:
        self.transform = transform
        self.image_size = image_size
        self.ops = list(ops)
        self.what = what
        self.inner = inner

    def check(self) -> None:
        """Raises ``UnsupportedTransform`` naming the first op that changed (then and now)."""
        if self.inner is not None:
            self.inner.check()
        try:
            now = from_torchvision(self.transform, image_size=self.image_size)
        except UnsupportedTransform as err:
            why = f"it no longer compiles:\n{err.listing}"
        else:
            if now == self.ops:
                return
            k = next((k for k, (a, b) in enumerate(zip(self.ops, now)) if a != b), min(len(now), len(self.ops)))
            then_op = repr(self.ops[k]) if k < len(self.ops) else "nothing"
            now_op = repr(now[k]) if k < len(now) else "nothing"
            why = f"compiled to {then_op} when the loader was built, to {now_op} now"
        raise UnsupportedTransform(
            [
                (
                    self.what,
                    type(self.transform).__name__,
                    f"{why}; gpupipe compiled it once, when the loader was built (torch's DataLoader applies it "
                    "as it is at each pass): build the loader again after the change (a loader per schedule "
                    "step, e.g. per image size)",
                )
            ],
            changed=True,
        )


__all__ = ["from_torchvision", "UnsupportedTransform", "supported_names", "TransformGuard"]
