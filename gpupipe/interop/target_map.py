"""A torchvision folder dataset's ``target_transform``, applied to a batch's class indices.

A folder dataset's target is its class index, so its ``target_transform`` can give only one value per
class: gpupipe works it out once per class, batches the values with torch's ``default_collate`` (a table
``(num_classes, *shape)``), and a batch's targets are the table's rows at its labels: what torch's
``DataLoader`` gives, in value, dtype and shape (``y + 1``: int64 ``(B,)``; ``float``: float64 ``(B,)``;
a one-hot tensor: ``(B, num_classes)``). A ``target_transform`` that gives another value each time
(random), fails on a class, or gives what ``default_collate`` does not make one tensor of (strings,
tuples, dicts) is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import Error


class UnmappableTarget(Error, ValueError):
    """A ``target_transform`` that gives no one value per class (``interop.datasets`` refuses the dataset)."""


#: How a refusal ends: what reads such a dataset instead.
_INSTEAD = (
    "gpupipe works a folder dataset's target_transform out once per class; read this dataset as it is with "
    "fallback='torchvision', or apply the transform to the labels in your loop"
)


class LabelMap:
    """A folder dataset's ``target_transform`` as a table over its classes.

    Args:
        table: ``(num_classes, *shape)``, row ``c`` what ``target_transform(c)`` gives, batched.
    """

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table
        self._placed: dict[torch.device, torch.Tensor] = {}

    @classmethod
    def of(cls, target_transform: Callable[[int], Any], num_classes: int, name: str) -> LabelMap:
        """The table of ``target_transform`` over the class indices ``0 .. num_classes - 1``.

        Args:
            target_transform: the dataset's ``target_transform``.
            num_classes: the dataset's classes.
            name: the dataset's class name (messages name it).

        Raises:
            UnmappableTarget: it fails on a class, gives another value when asked again, or gives values
                ``default_collate`` makes no one tensor of; each named.
        """
        from torch.utils.data import default_collate

        what = f"{name}(target_transform={target_transform!r})"
        tables = []
        for _ in range(2):  # asked twice: a random transform gives another table
            values = []
            for label in range(num_classes):
                try:
                    values.append(target_transform(label))
                except Exception as err:  # the user's code: any failure is reported, naming the class
                    raise UnmappableTarget(
                        f"{what} fails on class {label}: {type(err).__name__}: {err}. {_INSTEAD}"
                    ) from err
            try:
                table = default_collate(values)
            except (TypeError, RuntimeError) as err:
                raise UnmappableTarget(f"{what}: its values cannot be batched ({err}). {_INSTEAD}") from None
            if not isinstance(table, torch.Tensor):
                raise UnmappableTarget(
                    f"{what} gives {type(values[0]).__name__} values, which batch to a {type(table).__name__}, "
                    f"not a tensor. {_INSTEAD}"
                )
            tables.append(table)
        if not torch.equal(tables[0], tables[1]):
            raise UnmappableTarget(f"{what} gives a class not the same value when asked again (random?). {_INSTEAD}")
        return cls(tables[0])

    def __call__(self, labels: torch.Tensor) -> torch.Tensor:
        """``(B,)`` int64 class indices -> ``(B, *shape)`` targets on the labels' device."""
        table = self._placed.get(labels.device)
        if table is None:
            table = self._placed[labels.device] = self.table.to(labels.device)
        return table[labels]

    def __repr__(self) -> str:
        return f"LabelMap({tuple(self.table.shape)} {self.table.dtype})"


__all__ = ["LabelMap", "UnmappableTarget"]
