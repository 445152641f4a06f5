"""A torchvision folder dataset's ``target_transform``, applied to a batch's class indices.

A folder dataset's target is its class index, so its ``target_transform`` can give only one value per
class: gpupipe works it out once per class, batches the values with torch's ``default_collate`` (a table
``(num_classes, *shape)``), and a batch's targets are the table's rows at its labels: what torch's
``DataLoader`` gives, in value, dtype and shape (``y + 1``: int64 ``(B,)``; ``float``: float64 ``(B,)``;
a one-hot tensor: ``(B, num_classes)``). The table is worked out again before each pass
(``LabelMap.refresh``, from ``interop.datasets.DatasetGuard``), as torch's workers see the transform as it
is then. A ``target_transform`` that gives another value each time (random), fails on a class, gives
classes values of other types (torch's batches would take their first sample's dtype), gives what
``default_collate`` does not make one tensor of (strings, tuples, dicts), or a table over
``MAX_TABLE_BYTES`` is refused by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import Error

logger = logging.getLogger("gpupipe.loader")


class UnmappableTarget(Error, ValueError):
    """A ``target_transform`` that gives no one value per class (``interop.datasets`` refuses the dataset)."""


#: The largest table of a ``target_transform``'s values (it is copied to the loader's device): a one-hot over
#: 16,384 classes in float32.
MAX_TABLE_BYTES = 2**30

#: How a refusal ends: what reads such a dataset instead.
_INSTEAD = (
    "gpupipe works a folder dataset's target_transform out once per class; read this dataset as it is with "
    "fallback='torchvision', or apply the transform to the labels in your loop"
)


class LabelMap:
    """A folder dataset's ``target_transform`` as a table over its classes, worked out again before each pass.

    Args:
        table: ``(num_classes, *shape)``, row ``c`` what ``target_transform(c)`` gives, batched.
        target_transform: the transform (``refresh`` asks it again).
        what: how messages name it (``ImageFolder(target_transform=...)``).
    """

    def __init__(
        self, table: torch.Tensor, target_transform: Callable[[int], Any] | None = None, what: str = ""
    ) -> None:
        self.table = table
        self.target_transform = target_transform
        self.what = what
        self._placed: dict[torch.device, torch.Tensor] = {}

    @classmethod
    def of(cls, target_transform: Callable[[int], Any], num_classes: int, name: str) -> LabelMap:
        """The table of ``target_transform`` over the class indices ``0 .. num_classes - 1``.

        Args:
            target_transform: the dataset's ``target_transform``.
            num_classes: the dataset's classes.
            name: the dataset's class name (messages name it).

        Raises:
            UnmappableTarget: it fails on a class, gives another value when asked again (random), gives classes
                values of other types (each batch's dtype would be its first sample's), gives values
                ``default_collate`` makes no one tensor of, or a table over ``MAX_TABLE_BYTES``; each named.
        """
        what = f"{name}(target_transform={target_transform!r})"
        table = _table(target_transform, num_classes, what)
        changed = _changed(table, _table(target_transform, num_classes, what))
        if changed is not None:  # asked again: a random transform gives a class another value
            raise UnmappableTarget(
                f"{what} gives class {changed} not the same value when asked again (random?). {_INSTEAD}"
            )
        return cls(table, target_transform, what)

    def refresh(self) -> None:
        """Before a pass: the table worked out again, so that a transform whose values changed since (a dict
        edited, a callable's setting changed between epochs) gives this pass's labels, as torch's ``DataLoader``
        workers (started at each pass) would give them.

        Raises:
            UnmappableTarget: as ``of``, for the transform's values now.
        """
        if self.target_transform is None:
            return
        table = _table(self.target_transform, len(self.table), self.what)
        changed = _changed(self.table, table)
        if changed is not None:
            logger.info("%s gives class %d another value than for the last pass: its labels follow", self.what, changed)
            self.table = table
            self._placed.clear()

    def __call__(self, labels: torch.Tensor) -> torch.Tensor:
        """``(B,)`` int64 class indices -> ``(B, *shape)`` targets on the labels' device."""
        table = self._placed.get(labels.device)
        if table is None:
            table = self._placed[labels.device] = self.table.to(labels.device)
        return table[labels]

    def __repr__(self) -> str:
        return f"LabelMap({tuple(self.table.shape)} {self.table.dtype})"


def _table(target_transform: Callable[[int], Any], num_classes: int, what: str) -> torch.Tensor:
    """``(num_classes, *shape)``: the values batched with ``default_collate``, checked (``LabelMap.of``)."""
    from torch.utils.data import default_collate

    values = []
    for label in range(num_classes):
        values.append(_value(target_transform, label, what))
        if label == 0:  # the table's size, before it is built
            _check_size(values[0], num_classes, what)
    kinds = [_kind(value) for value in values]
    for label, kind in enumerate(kinds):
        if kind != kinds[0]:
            raise UnmappableTarget(
                f"{what} gives values of other types: class 0 {kinds[0]}, class {label} {kind}; torch's "
                "default_collate batches by a batch's first sample, so each batch's dtype would depend on the "
                f"class that comes first: make it give every class one type (float(y), one tensor dtype). {_INSTEAD}"
            )
    try:
        table = default_collate(values)
    except (TypeError, RuntimeError) as err:
        raise UnmappableTarget(f"{what}: its values cannot be batched ({err}). {_INSTEAD}") from None
    if not isinstance(table, torch.Tensor):
        raise UnmappableTarget(
            f"{what} gives {type(values[0]).__name__} values, which batch to a {type(table).__name__}, "
            f"not a tensor. {_INSTEAD}"
        )
    return table


def _changed(old: torch.Tensor, new: torch.Tensor) -> int | None:
    """The first class whose row differs between two tables (NaN equal to NaN), ``0`` if their forms differ."""
    if old.dtype != new.dtype or old.shape != new.shape:
        return 0
    same = old == new
    if old.is_floating_point() or old.is_complex():
        same |= old.isnan() & new.isnan()
    rows = same.reshape(len(same), -1).all(dim=1) if len(same) else same
    differ = torch.nonzero(~rows)
    return int(differ[0]) if len(differ) else None


def _value(target_transform: Callable[[int], Any], label: int, what: str) -> Any:
    """``target_transform(label)``.

    Raises:
        UnmappableTarget: it fails on the class, named.
    """
    try:
        value = target_transform(label)
    except Exception as err:  # the user's code: any failure is reported, naming the class
        raise UnmappableTarget(f"{what} fails on class {label}: {type(err).__name__}: {err}. {_INSTEAD}") from err
    return value


def _check_size(value: Any, num_classes: int, what: str) -> None:
    """Refuses a class's value whose table over ``num_classes`` classes would pass ``MAX_TABLE_BYTES``."""
    from torch.utils.data import default_collate

    try:
        row = default_collate([value])
    except (TypeError, RuntimeError):
        return  # refused with the others' values, once they are all known
    if isinstance(row, torch.Tensor):
        size = row.element_size() * row.numel() * num_classes
        if size > MAX_TABLE_BYTES:
            raise UnmappableTarget(
                f"{what}: its table over the {num_classes:,} classes ({tuple(row.shape[1:])} {row.dtype} "
                f"each) would take {size / 2**30:.1f} GiB on the device, over gpupipe's "
                f"{MAX_TABLE_BYTES / 2**30:.0f} GiB for it; apply it to the labels in your loop (for a one-hot, "
                "torch.nn.functional.one_hot(labels, num_classes)), or read the dataset as it is with "
                "fallback='torchvision'"
            )


def _kind(value: Any) -> str:
    """What decides the type and dtype ``default_collate`` gives a batch whose first sample is ``value``."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or isinstance(value, np.generic):  # a number: its type is its dtype
        return type(value).__name__
    return f"{type(value).__name__} of {dtype}"


__all__ = ["LabelMap", "UnmappableTarget"]
