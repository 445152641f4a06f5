"""torchvision's folder datasets as gpupipe sources: the same samples, classes and labels.

``torchvision.datasets.ImageFolder`` and ``DatasetFolder`` (and a
``torch.utils.data.Subset`` or ``ConcatDataset`` of those, nested or not) become a
[`FileList`][gpupipe.FileList] of their own ``samples`` with their own
``classes``, so labels and order are theirs exactly. Their ``transform``
becomes the pipeline when no other is given, and their ``target_transform``
is applied to each batch's labels (``target_map``). What gpupipe cannot keep,
a file ``loader`` other than torchvision's PIL loader or a sample labelled outside the classes, is
refused by name.
"""

from __future__ import annotations

import io
import numbers
from typing import Any

import torch
from torch.utils.data import Dataset as _TorchDataset

from ..errors import Error
from ..sources import FileList, Source
from .concat import target_change, target_difference, transform_difference
from .file_loader import loader_problem
from .target_map import LabelMap, UnmappableTarget

ACCEPTED = (
    "a path, a gpupipe Source, torchvision.datasets.ImageFolder or DatasetFolder, or a torch.utils.data.Subset "
    "or ConcatDataset of those"
)


#: What to use for a dataset gpupipe cannot read (every refusal of a dataset object says it).
INSTEAD = (
    "gpupipe reads the image files itself, so it never runs a dataset's own __getitem__. For files of your "
    "own, give it gpupipe.FileList([(path, label), ...], classes=...) (class labels; a list of labels per image "
    "for multi-label targets), "
    "gpupipe.SegmentationFolder(images, masks) (masks) or gpupipe.CocoDetection(images, annotations) (boxes); "
    "or read this dataset as it is, dataset[i] in DataLoader workers (not on the GPU), with fallback='torchvision'; "
    "or keep torch.utils.data.DataLoader for this dataset"
)

#: The methods a dataset class may not replace: gpupipe would not run them (it reads ``samples`` / ``indices``).
_READ_BY_GPUPIPE = ("__getitem__", "__getitems__")


class UnsupportedDataset(Error, ValueError):
    """A dataset object gpupipe cannot read as it is (see ``ACCEPTED``)."""


def refuse_dataset(dataset: Any) -> UnsupportedDataset:
    """The refusal of a dataset object gpupipe cannot read, saying what to use instead."""
    return UnsupportedDataset(f"gpupipe cannot read a {type(dataset).__name__}; it takes {ACCEPTED}. {INSTEAD}")


def _check_not_overridden(dataset: Any, base: type, listed: Any) -> None:
    """Refuses a subclass of ``base`` that replaces a method gpupipe would not run (``__getitem__``,
    ``__getitems__``), or whose ``len()`` is not that of what gpupipe reads (``listed``: its samples or
    indices; torchvision's ``EuroSAT`` defines a ``__len__`` that agrees)."""
    replaced = [
        name for name in _READ_BY_GPUPIPE if getattr(type(dataset), name, None) is not getattr(base, name, None)
    ]
    if getattr(type(dataset), "__len__", None) is not getattr(base, "__len__", None) and len(dataset) != len(listed):
        replaced.append("__len__")
    if replaced:
        raise UnsupportedDataset(
            f"{type(dataset).__name__} (a {base.__name__}) defines its own {', '.join(replaced)}, which gpupipe "
            f"would not run: it reads the {base.__name__}'s files as {base.__name__} does. {INSTEAD}"
        )


def _folder_class():
    try:
        from torchvision.datasets import DatasetFolder
    except ImportError:  # torchvision missing: no such dataset can exist
        return None
    return DatasetFolder


def is_dataset(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch.utils.data.Dataset`` (what ``as_dataset_source`` is asked about)."""
    return isinstance(obj, _TorchDataset)


def _unwrap(dataset: Any) -> tuple[Any, list[int] | None]:
    """The folder dataset under any ``Subset`` layers, and the indices into it (``None``: all)."""
    from torch.utils.data import Subset

    indices: list[int] | None = None
    while isinstance(dataset, Subset):
        _check_not_overridden(dataset, Subset, dataset.indices)
        outer = [int(i) for i in dataset.indices]
        indices = outer if indices is None else [outer[i] for i in indices]
        dataset = dataset.dataset
    return dataset, indices


def as_dataset_source(dataset: Any) -> tuple[Source, Any]:
    """``(source, transform)`` of a torchvision folder dataset or a ``Subset`` / ``ConcatDataset`` of those.

    Args:
        dataset: ``ImageFolder``, ``DatasetFolder``, or a ``Subset`` (of a ``Subset``...) or a
            ``ConcatDataset`` of those, nested in any way.

    Returns:
        A [`FileList`][gpupipe.FileList] of the dataset's samples (in its order, with its
        ``classes``; with a ``target_transform``, its ``label_map``: a ``target_map.LabelMap`` the loader
        applies to each batch's labels; ``decode_as="stored"``: every image read as torchvision's PIL loader
        reads it, its EXIF orientation not applied), and the dataset's ``transform`` (``None`` if it has none).

    Raises:
        UnsupportedDataset: another dataset, a subclass with its own ``__getitem__`` (or
            ``__getitems__``, or a ``len()`` other than its samples'), a ``target_transform`` that gives no
            one value per class (``LabelMap.of``), a file loader other than torchvision's PIL loader, a sample
            whose label is no index of the classes, or a
            ``ConcatDataset`` whose parts differ in their classes, in the ops their transforms compile to, or
            in the values their target transforms give, the first difference named (``interop.concat``).
    """
    folder, indices = _unwrap(dataset)
    if isinstance(folder, SourceDataset):  # a gpupipe loader's own ``dataset`` (or a Subset of it)
        return (folder.source if indices is None else folder.source.subset(indices)), None
    samples, classes, transform, target_transform = _read(dataset)
    if not samples:
        raise UnsupportedDataset(f"the {type(folder).__name__} (or its Subset) holds no samples")
    source = FileList(samples, classes=classes)
    source.decode_as = "stored"  # as torchvision's PIL loader opens each file: its EXIF orientation not applied
    if target_transform is not None:
        try:
            label_map = LabelMap.of(target_transform, len(classes), type(folder).__name__)
        except UnmappableTarget as err:
            raise UnsupportedDataset(str(err)) from err.__cause__
        source.label_map = label_map  # type: ignore[attr-defined]  # read by the loader
    return source, transform


def _read(dataset: Any) -> tuple[list[tuple[str, int]], list[str], Any, Any]:
    """``(samples, classes, transform, target_transform)`` of a folder dataset, or of a ``Subset`` or
    ``ConcatDataset`` of those (the first part's transform and target transform, once every part's is known to
    give the same ops and values: ``interop.concat``)."""
    samples, parts = _read_parts(dataset, "")
    if not parts:
        return samples, [], None, None
    first_where, first, classes, transform, target_transform = parts[0]
    for where, folder, their_classes, their_transform, their_target in parts[1:]:
        if their_classes != classes:
            raise UnsupportedDataset(
                f"ConcatDataset: {where} has the classes {their_classes}, {first_where} {classes}: a label "
                "would name another class in each; gpupipe gives one classes list to every sample"
            )
        why = transform_difference(transform, their_transform, first_where)
        if why is not None:
            raise UnsupportedDataset(
                f"ConcatDataset: {where} has another transform than {first_where} ({why}); gpupipe runs one "
                "pipeline: give every part the same transform, or one that compiles to the same ops"
            )
        try:
            why = target_difference(target_transform, their_target, len(classes), type(folder).__name__, first_where)
        except UnmappableTarget as err:
            raise UnsupportedDataset(f"ConcatDataset: {where}: {err}") from err.__cause__
        if why is not None:
            raise UnsupportedDataset(
                f"ConcatDataset: {where} has another target_transform than {first_where} ({why}); gpupipe maps "
                "every label with one table: give every part the same target_transform, or one that gives every "
                "class the same value"
            )
    return samples, classes, transform, target_transform


def _read_parts(dataset: Any, where: str) -> tuple[list[tuple[str, int]], list[tuple[str, Any, list[str], Any, Any]]]:
    """``(samples, parts)``: the samples (through every ``Subset``'s indices) and per folder dataset
    ``(where, folder, classes, transform, target_transform)``, ``where`` naming its place in the
    ``ConcatDataset``s (``datasets[1].datasets[0]``)."""
    from torch.utils.data import ConcatDataset

    folder, indices = _unwrap(dataset)
    if isinstance(folder, ConcatDataset):
        _check_not_overridden(folder, ConcatDataset, range(folder.cumulative_sizes[-1] if folder.datasets else 0))
        samples, parts = [], []
        for k, part in enumerate(folder.datasets):
            their_samples, their_parts = _read_parts(part, f"{where}.datasets[{k}]" if where else f"datasets[{k}]")
            samples += their_samples
            parts += their_parts
    else:
        samples, classes, transform, target_transform = _read_folder(folder)
        parts = [(where, folder, classes, transform, target_transform)]
    return (samples if indices is None else [samples[i] for i in indices]), parts


def _read_folder(folder: Any) -> tuple[list[tuple[str, int]], list[str], Any, Any]:
    """``(samples, classes, transform, target_transform)`` of an ``ImageFolder`` / ``DatasetFolder``; refuses
    what gpupipe loses."""
    base = _folder_class()
    if base is None or not isinstance(folder, base):
        raise refuse_dataset(folder)
    _check_not_overridden(folder, base, folder.samples)
    name = type(folder).__name__
    why = loader_problem(folder)
    if why is not None:
        raise UnsupportedDataset(f"{name}(loader={getattr(folder.loader, '__name__', folder.loader)!r}): {why}")
    classes = list(folder.classes)
    bad = _first_unindexed(folder.samples, len(classes))
    if bad is not None:
        path, label = folder.samples[bad]
        odd = isinstance(label, torch.Tensor) and (label.ndim or label.dtype != torch.int64)
        what = (
            f"a tensor of {label.dtype}, shape {tuple(label.shape)}: gpupipe's labels are int64 (0-d: one label)"
            if odd
            else f"{label!r}, which is no index of its {len(classes)} classes (an unlabelled sample's -1, a label "
            "edited into samples)"
        )
        raise UnsupportedDataset(
            f"{name}.samples[{bad}] ({path}) has the label {what}; gpupipe's labels index the "
            "dataset's classes: give every sample a class index (and the classes it indexes), or read the "
            "dataset as it is, with its own labels, with fallback='torchvision'"
        )
    samples = [(path, int(label)) for path, label in folder.samples]
    return samples, classes, folder.transform, folder.target_transform


def _first_unindexed(samples: Any, count: int) -> int | None:
    """The place of the first sample whose label is no class index in ``[0, count)`` (``None``: none is)."""
    for k, (_, label) in enumerate(samples):  # ImageNet's 1.28M labels in well under a second
        if type(label) is int:
            if 0 <= label < count:
                continue
        elif isinstance(label, numbers.Integral) and not isinstance(label, bool) and 0 <= int(label) < count:
            continue
        elif isinstance(label, torch.Tensor) and label.dtype == torch.int64 and label.ndim == 0 and 0 <= label < count:
            continue  # a pseudo-label (logits.argmax(1)[k]): torch's collate stacks it into int64 labels, as gpupipe's
        return k
    return None


class DatasetGuard:
    """Refuses a pass over a torchvision dataset changed since its loader was built.

    gpupipe reads a folder dataset's ``samples`` (and each ``Subset``'s ``indices``) and compiles its
    ``transform`` once, when the loader is built; a script that replaces them afterwards
    (``dataset.transform = val_transform``) would otherwise go on reading the old ones, silently,
    where torch's ``DataLoader`` reads the new.

    Args:
        dataset: the user's dataset (``ImageFolder`` / ``DatasetFolder``, or a ``Subset`` or ``ConcatDataset``
            of those).
        transform_compiled: whether the loader's pipeline is the dataset's ``transform``.
        label_map: its ``target_transform``'s table (``target_map.LabelMap``), worked out again at each check.
    """

    def __init__(self, dataset: Any, transform_compiled: bool, label_map: LabelMap | None = None) -> None:
        self.dataset = dataset
        self.transform_compiled = transform_compiled
        self.label_map = label_map
        self.seen = self._state()

    def _state(self, layer: Any = None) -> list[tuple[str, Any, int, int | None]]:
        """``(what, object, length, content hash)`` of everything read once: each layer's indices (or parts),
        the samples, the transform (the hash of the indices and samples only: an edit in place, a pseudo-label
        written into ``samples``, keeps the object and its length)."""
        from torch.utils.data import ConcatDataset, Subset

        state: list[tuple[str, Any, int, int | None]] = []
        layer = self.dataset if layer is None else layer
        while isinstance(layer, Subset):
            state.append(("Subset.indices", layer.indices, len(layer.indices), _content(layer.indices)))
            layer = layer.dataset
        if isinstance(layer, ConcatDataset):
            state.append(("ConcatDataset.datasets", layer.datasets, len(layer.datasets), None))
            return state + [entry for part in layer.datasets for entry in self._state(part)]
        name = type(layer).__name__
        state.append((f"{name}.samples", layer.samples, len(layer.samples), _content(layer.samples)))
        for what in ("transform", "target_transform", "loader") if self.transform_compiled else ("target_transform",):
            state.append((f"{name}.{what}", getattr(layer, what, None), 0, None))
        return state

    def check(self) -> None:
        """Raises ``UnsupportedDataset`` naming what changed since the loader was built (replaced, or edited in
        place); the ``target_transform``'s values are worked out again (their change followed, as torch's
        ``DataLoader`` workers follow it)."""
        now = self._state()
        changed = [
            what
            for (what, was, n, fingerprint), (_, obj, m, content) in zip(self.seen, now)
            if obj is not was or n != m or fingerprint != content
        ]
        if changed or len(now) != len(self.seen):
            raise UnsupportedDataset(
                f"{', '.join(changed) or 'the dataset'} changed after the loader was built; gpupipe read the "
                "dataset (and compiled its transform) then, once: build the loader again after the change"
            )
        if self.label_map is not None:
            try:
                self.label_map.refresh()
            except UnmappableTarget as err:
                raise UnsupportedDataset(str(err)) from err.__cause__
            why = target_change(self.dataset, self.label_map)  # every part's, not the first's alone
            if why is not None:
                raise UnsupportedDataset(why)


def _content(values: Any) -> int | None:
    """A hash of a ``samples`` list or of ``indices`` (a list, range, array or tensor), ``None`` where their
    items cannot be hashed; ImageNet's 1.28M samples take about 0.1 s."""
    listed = values.tolist() if hasattr(values, "tolist") else values
    try:
        return hash(tuple(listed))
    except TypeError:  # an item that cannot be hashed (a list): the object and length are compared alone
        return None


def guard_of(dataset: Any, transform_compiled: bool, label_map: LabelMap | None = None) -> DatasetGuard | None:
    """The ``DatasetGuard`` of a torchvision folder dataset (``None`` for a gpupipe loader's own view)."""
    if isinstance(_unwrap(dataset)[0], SourceDataset):
        return None
    return DatasetGuard(dataset, transform_compiled, label_map)


class SourceDataset(_TorchDataset):  # type: ignore[misc,valid-type]
    """``loader.dataset`` of a gpupipe loader built from a path or a source: the samples as
    ``torchvision.datasets.ImageFolder`` shows them.

    ``len()``, ``classes``, ``class_to_idx``, ``samples`` / ``imgs`` (``(path, class index)``
    tuples), ``targets``; ``dataset[i]`` is ``(PIL image, class index)`` (RGB, as ImageFolder
    without a transform: as stored, its EXIF orientation not applied), or for a mask or boxes (which
    fit the image upright) the image upright (its EXIF orientation applied, as the batches read it).
    A multi-label source's target is its list of class indices in ``samples`` and ``targets``, and in
    ``dataset[i]`` its ``(num_classes,)`` float32 multi-hot row, as its batches carry it.
    ``Subset(loader.dataset, indices)`` may be given to [`gpupipe.loader`][gpupipe.loader].

    Args:
        source: the loader's source (bad files already left out).
    """

    def __init__(self, source: Source) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    @property
    def classes(self) -> list[str]:
        return list(self.source.classes)

    @property
    def class_to_idx(self) -> dict[str, int]:
        return self.source.class_to_idx

    @property
    def samples(self) -> list[tuple[str, Any]]:
        return list(zip(self.source.names, self.targets))

    imgs = samples

    @property
    def targets(self) -> list[Any]:
        """Per sample its class index, or its list of class indices (multi-label)."""
        return self.source.target.listed(self.source, range(len(self.source)))

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from PIL import Image

        from ..images import upright

        image: Image.Image = Image.open(io.BytesIO(self.source.read_bytes(int(index)).tobytes()))
        if self.source.target.moves_with_pixels:  # a mask or boxes, drawn upright: the image so too, as batched
            image = upright(image)
        return image.convert("RGB"), self.source.target.item(self.source, int(index))

    def __repr__(self) -> str:
        return f"gpupipe dataset view of {self.source!r}"


__all__ = [
    "DatasetGuard",
    "guard_of",
    "as_dataset_source",
    "is_dataset",
    "refuse_dataset",
    "UnsupportedDataset",
    "SourceDataset",
    "ACCEPTED",
    "INSTEAD",
]
