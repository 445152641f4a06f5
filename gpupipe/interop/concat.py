"""The parts of a ``torch.utils.data.ConcatDataset`` read with one pipeline.

torch applies each part's own ``transform`` and ``target_transform``; gpupipe runs one pipeline and one
label table over all the samples. Parts whose transforms are one object, or compile to equal ops (each part
built by its own ``make_tf()`` call, equal in every parameter), give torch's batches with it; parts whose
``target_transform``s are one object, or give every class the same value (``target_map.LabelMap``), likewise.
Anything else is refused (by ``interop.datasets``) with the first difference this module names: the part,
the op, the parameter and both values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from ..ops import Op
from .compile import UnsupportedTransform, from_torchvision
from .target_map import LabelMap, UnmappableTarget


def leaves(dataset: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """``(where, dataset)`` of each dataset under ``dataset``'s ``Subset`` / ``ConcatDataset`` layers, in order.

    Args:
        dataset: the user's dataset.
        where: its place (``datasets[1]``), ``""`` for the outermost.

    Yields:
        ``where`` (``datasets[1].datasets[0]`` for a nested part; ``""`` without a ``ConcatDataset``) and the
        dataset under the layers (a folder dataset, or what gpupipe refuses elsewhere).
    """
    from torch.utils.data import ConcatDataset, Subset

    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    if isinstance(dataset, ConcatDataset):
        for k, part in enumerate(dataset.datasets):
            yield from leaves(part, f"{where}.datasets[{k}]" if where else f"datasets[{k}]")
    else:
        yield where, dataset


def transform_difference(first: Any, other: Any, first_where: str) -> str | None:
    """Why a part whose transform is ``other`` cannot be read with the pipeline of ``first``'s; ``None`` where
    they are one object or compile to equal ops.

    Args:
        first: the first part's transform (the pipeline).
        other: another part's.
        first_where: how messages name the first part (``datasets[0]``).
    """
    if other is first:
        return None
    if first is None or other is None:
        return f"{other!r}, {first_where} {first!r}"
    compiled = []
    for which, transform in (("its", other), (f"{first_where}'s", first)):
        try:
            compiled.append(_comparable(transform))
        except UnsupportedTransform as err:
            return f"{transform!r}; gpupipe cannot compile {which} to compare the two:\n{err.listing}\n"
    return first_difference(compiled[1], compiled[0], first_where)


def _comparable(transform: Any) -> list[Op]:
    """``transform``'s ops; one that needs the images' size (a padded ``RandomCrop`` over a folder of one size)
    compiled for a 1 x 1 image, where every pad it asks for shows, or (a crop larger than that padded) for a
    4096 x 4096 one: two such transforms compare alike."""
    try:
        return from_torchvision(transform)
    except UnsupportedTransform as err:
        if not err.needs_size:
            raise
    try:
        return from_torchvision(transform, image_size=(1, 1))
    except UnsupportedTransform:
        return from_torchvision(transform, image_size=(4096, 4096))


def first_difference(first: list[Op], other: list[Op], first_where: str) -> str | None:
    """The first op (and parameter, both values) in which ``other`` differs from ``first``; ``None``: equal."""
    for k, (a, b) in enumerate(zip(first, other)):
        if _same(a, b):
            continue
        if type(a) is type(b) and dataclasses.is_dataclass(a):
            for field in dataclasses.fields(a):
                mine, theirs = getattr(b, field.name), getattr(a, field.name)
                if not _same(mine, theirs):
                    return (
                        f"its op {k} {type(a).__name__} has {field.name}={mine!r}, {first_where}'s "
                        f"{field.name}={theirs!r}"
                    )
        return f"its op {k} is {b!r}, {first_where}'s {a!r}"
    if len(first) != len(other):
        k = min(len(first), len(other))
        mine = repr(other[k]) if k < len(other) else "nothing"
        theirs = repr(first[k]) if k < len(first) else "nothing"
        return f"its op {k} is {mine}, {first_where}'s {theirs}"
    return None


def _same(a: Any, b: Any) -> bool:
    """Whether two ops or parameters are equal (an array-like parameter compared by its items)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # an array's elementwise ==: compare its items
        return repr(a) == repr(b)


def target_difference(first: Any, other: Any, num_classes: int, name: str, first_where: str) -> str | None:
    """Why a part whose ``target_transform`` is ``other`` cannot be mapped with ``first``'s table; ``None``
    where they are one object or give every class the same value (dtype and shape included).

    Args:
        first: the first part's ``target_transform`` (``None``: none).
        other: another part's.
        num_classes: the classes (the parts' are one list).
        name: the dataset's class name (``ImageFolder``).
        first_where: how messages name the first part (``datasets[0]``).

    Raises:
        target_map.UnmappableTarget: either gives no one value per class (``LabelMap.of``).
    """
    if other is first:
        return None
    if first is None or other is None:
        return f"{other!r}, {first_where} {first!r}"
    mine = LabelMap.of(other, num_classes, name).table
    return table_difference(LabelMap.of(first, num_classes, name).table, mine, other, first, first_where)


def table_difference(first: torch.Tensor, other: torch.Tensor, mine: Any, theirs: Any, first_where: str) -> str | None:
    """The first class whose value differs between two ``LabelMap`` tables (``None``: equal), naming the
    transforms ``mine`` (the part's) and ``theirs`` (``first_where``'s)."""
    if first.dtype != other.dtype or first.shape != other.shape:
        return (
            f"{mine!r} gives {tuple(other.shape[1:])} {other.dtype} values, {first_where}'s {theirs!r} "
            f"{tuple(first.shape[1:])} {first.dtype}"
        )
    same = (first == other) | (first.isnan() & other.isnan()) if first.is_floating_point() else first == other
    rows = same.reshape(len(same), -1).all(dim=1)
    differ = torch.nonzero(~rows)
    if not len(differ):
        return None
    c = int(differ[0])
    return f"{mine!r} gives class {c} {other[c].tolist()!r}, {first_where}'s {theirs!r} {first[c].tolist()!r}"


def target_change(dataset: Any, label_map: LabelMap) -> str | None:
    """Before a pass (``datasets.DatasetGuard``, once ``label_map`` was worked out again): why a part's
    ``target_transform`` no longer gives the values of the first part's (edited in place since the loader was
    built), ``None`` where every part's still does. A replaced one is the guard's own business.

    Args:
        dataset: the user's dataset (a ``ConcatDataset``, or ``Subset`` of one).
        label_map: the first part's table, refreshed.
    """
    parts = list(leaves(dataset))
    first, first_where = label_map.target_transform, parts[0][0] or "the dataset"
    for where, folder in parts[1:]:
        other = getattr(folder, "target_transform", None)
        if other is first or other is None or first is None:
            continue
        try:
            table = LabelMap.of(other, len(label_map.table), type(folder).__name__).table
        except UnmappableTarget as err:
            return f"ConcatDataset: {where}: {err}"
        why = table_difference(label_map.table, table, other, first, first_where)
        if why is not None:
            return (
                f"ConcatDataset: {where} {type(folder).__name__}.target_transform changed after the loader was "
                f"built ({why}); gpupipe maps every label with one table: build the loader again after the change"
            )
    return None


__all__ = [
    "target_change",
    "leaves",
    "transform_difference",
    "first_difference",
    "target_difference",
    "table_difference",
]
