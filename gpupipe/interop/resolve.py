"""What ``gpupipe.loader`` does with a torchvision dataset or transform given as its source or pipeline."""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np

from ..ops import CenterCrop, Decode, Op, PadTo, RandomCrop
from ..sources import as_source
from .compile import TransformGuard, UnsupportedTransform, from_torchvision
from .concat import leaves
from .crops import through as _through
from .dataset_fallback import fall_back_dataset
from .datasets import UnsupportedDataset, as_dataset_source, guard_of, is_dataset, refuse_dataset
from .fallback import FALLBACKS, fall_back
from .transforms import is_transform

logger = logging.getLogger("gpupipe.loader")


def resolve_inputs(
    source: Any,
    pipeline: Any,
    fallback: str | None = None,
    backend: str = "auto",
    *,
    max_pixels: int = 100_000_000,
    max_file_size: int | None = None,
) -> tuple[Any, Any, Any | None, str]:
    """``(source, pipeline, dataset, backend)`` for [`gpupipe.loader`][gpupipe.loader].

    A torchvision folder dataset (or a ``Subset`` or ``ConcatDataset`` of those) becomes its source, and
    its ``transform`` the pipeline when ``pipeline`` is ``None``; a torchvision or
    timm transform becomes its ops (``from_torchvision``);
    ``dataset`` is the user's dataset object (``None`` for a path or a source). With
    ``fallback="torchvision"`` a transform that cannot be compiled runs as it is
    (``gpupipe.interop.fallback``), and a dataset gpupipe cannot read is read as it is
    (``gpupipe.interop.dataset_fallback``); ``backend`` becomes that backend. ``max_pixels`` and
    ``max_file_size`` are the loader's: a transform that gives no one size reads the image sizes from the
    scan the loader then reuses (the same limits), not from a scan of its own.

    Raises:
        UnsupportedDataset: a dataset object gpupipe cannot read, or one without a transform
            when no pipeline is given.
        UnsupportedTransform: a transform that cannot be compiled, every problem named (without a fallback).
        ValueError: an unknown ``fallback``.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be None or 'torchvision', got {fallback!r}")
    dataset = None
    if is_dataset(source):
        dataset = source
        try:
            source, transform = as_dataset_source(source)
        except UnsupportedDataset as refused:
            if fallback is None:
                raise
            return fall_back_dataset(dataset, pipeline, backend, str(refused))
        if pipeline is None:
            if transform is None:
                raise UnsupportedDataset(
                    f"the {type(dataset).__name__} has no transform: pass pipeline= (a preset name, ops, or a "
                    "torchvision transform)"
                )
            pipeline = transform
        elif transform is not None:
            logger.info("gpupipe loader: the pipeline given replaces the dataset's own transform")
        # checked before every pass (gpupipe.loading.frameworks.follow_sampler): read once, changed later
        guard = guard_of(dataset, pipeline is transform, getattr(source, "label_map", None))
        source = copy.copy(source)  # a loader's own: another loader's ``dataset`` holds its source
        source.dataset_guard = guard  # type: ignore[attr-defined]
    elif not isinstance(source, (str, bytes)) and hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        if fallback is None:
            raise refuse_dataset(source)
        return fall_back_dataset(source, pipeline, backend, str(refuse_dataset(source)))
    if pipeline is None:
        pipeline = "train"
    if is_transform(pipeline) or (callable(pipeline) and not hasattr(pipeline, "__iter__")):
        # a callable of the user's own (a dataset's TwoCropTransform, a function) is refused by name, as a transform
        # gpupipe cannot compile, saying how to run it (fallback="torchvision")
        try:
            source, ops, image_size = _compiled(pipeline, source, max_pixels, max_file_size)
            sized, sized_ops, reached = _one_size(source, ops, max_pixels, max_file_size)
            _sized_first(sized_ops)
            _one_size_reached(pipeline, sized_ops, reached)
            source = _crops_fit(sized, sized_ops, max_pixels, max_file_size)
            source = _watched(source, pipeline, ops, dataset, image_size)
            pipeline = sized_ops  # only once nothing is refused: the fallback runs the transform itself
        except UnsupportedTransform as err:
            if fallback is None:
                raise
            source, backend = fall_back(source, pipeline, backend, err.listing)
            pipeline = [Decode(), PadTo(1)]  # a placeholder: the transform is not gpupipe ops
    return source, pipeline, dataset, backend


def _compiled(
    transform: Any, source: Any, max_pixels: int, max_file_size: int | None
) -> tuple[Any, list[Op], tuple[int, int] | None]:
    """``(source, ops, image_size)``: ``transform`` compiled; where only the images' size is missing (a padded
    ``RandomCrop`` with no op fixing the size before it, CIFAR's), compiled at the one size every image is stored
    at, read from the loader's scan (``image_size``; ``None`` where not needed).

    Raises:
        UnsupportedTransform: what cannot be compiled; a padded crop over images of several sizes names them.
    """
    try:
        return source, from_torchvision(transform), None
    except UnsupportedTransform as err:
        if not err.needs_size:
            raise
        refused = err
    source, found = _stored_sizes(source, max_pixels, max_file_size)
    if len(found) != 1:
        seen = f" (the images have {len(found)} sizes: {_listed(found)})" if found else ""
        raise UnsupportedTransform([(where, name, why + seen) for where, name, why in refused.problems]) from None
    return source, from_torchvision(transform, image_size=found[0]), found[0]


def _watched(
    source: Any, transform: Any, ops: list[Op], dataset: Any, image_size: tuple[int, int] | None = None
) -> Any:
    """A copy of ``source`` whose guard (checked before every pass) also compiles ``transform`` again and
    refuses a pass once it changed in place since (``TransformGuard``); the dataset's guard is checked first,
    then every other part's transform of a ``ConcatDataset`` (distinct objects that compiled to ``ops``)."""
    source = copy.copy(as_source(source))  # the user's own source object (or another loader's) is left alone
    own = dataset is not None and transform is getattr(_folder_of(dataset), "transform", None)
    what = f"{type(_folder_of(dataset)).__name__}.transform" if own else "pipeline"
    guard = TransformGuard(transform, ops, what, getattr(source, "dataset_guard", None), image_size)
    if own:  # each other part's transform too: equal ops when the loader was built, each may be edited apart
        seen = {id(transform)}
        for where, folder in leaves(dataset):
            other = getattr(folder, "transform", None)
            if other is not None and id(other) not in seen:
                seen.add(id(other))
                where = f"ConcatDataset.{where} {type(folder).__name__}.transform"
                guard = TransformGuard(other, ops, where, guard, image_size)
    source.dataset_guard = guard
    return source


def _folder_of(dataset: Any) -> Any:
    """The first folder dataset under ``dataset``'s ``Subset`` / ``ConcatDataset`` layers (messages name it)."""
    while True:
        inner = getattr(dataset, "dataset", None)
        parts = getattr(dataset, "datasets", None)
        if inner is not None:
            dataset = inner
        elif parts:
            dataset = parts[0]
        else:
            return dataset


def _one_size(
    source: Any, ops: list[Op], max_pixels: int, max_file_size: int | None
) -> tuple[Any, list[Op], set[tuple[int, int] | None]]:
    """``(source, ops, reached)``, the ops giving one size where a compiled transform gives every image of the source
    one size that the ops alone do not fix, as torch's default collate batches it: CIFAR's ``ToTensor()`` +
    ``Normalize()`` over 32 x 32 PNGs, or ``Resize(224)`` (by the shorter side) over images of one size or
    of one aspect ratio. A ``CenterCrop`` of that size, which changes no pixel, goes after the last op whose
    output size the ops do not fix (``Decode`` where there is no resize); so does one where an op that needs
    images of one size (``RandAugment()`` before ``RandomResizedCrop``) meets images of one size.

    The sizes come from the source's scan with the loader's limits, the one the loader then reuses (a source
    keeps its scan per limits): every header is read once, and a file the loader refuses has no size here.
    ``reached``: the sizes the images reach where they reach several (``None`` among them: not known before an
    image is read), else empty."""
    size = None
    for op in ops:
        if op.needs_fixed_size and size is None:  # a policy before the resize: one size only from the images
            break
        size = op.output_size(size)
    else:
        if size is not None:
            return source, ops, set()
    source, found = _stored_sizes(source, max_pixels, max_file_size)
    if not found:
        return source, ops, set()
    last = _last_unsized(ops, found[0])
    reached = {_follow(ops[: last + 1], size) for size in found}
    if len(reached) != 1 or None in reached:
        return source, ops, reached  # images of several sizes: refused naming the transform (_one_size_reached)
    height, width = reached.pop()  # type: ignore[misc]
    return source, [*ops[: last + 1], CenterCrop((height, width)), *ops[last + 1 :]], set()


def _stored_sizes(source: Any, max_pixels: int, max_file_size: int | None) -> tuple[Any, list[tuple[int, int]]]:
    """``(source, sizes)``: the distinct ``(h, w)`` the images are stored at, in order, from the source's scan with
    the loader's limits (kept per limits: read once); a bad file (``-1``) is left to the loader's ``on_error``."""
    source = as_source(source)
    sizes = source.scan(max_pixels, max_file_size).sizes
    return source, [(int(h), int(w)) for h, w in np.unique(sizes[sizes[:, 0] > 0], axis=0)]


def _listed(sizes: list[tuple[int, int]]) -> str:
    """``"32 x 32, 36 x 30, ..."``: the first three sizes, for messages."""
    return ", ".join(f"{h} x {w}" for h, w in sizes[:3]) + (", ..." if len(sizes) > 3 else "")


def _sized_first(ops: list[Op]) -> None:
    """Refuses an op that needs images of one size (a policy, ``RandomErasing``) where the images reaching it
    have their own sizes (``RandAugment()`` before ``RandomResizedCrop``, over images of several sizes): torchvision
    applies it to each image at its size; gpupipe's augments a batch of one size. An ``UnsupportedTransform``,
    so that ``fallback="torchvision"`` runs the transform as it is (the spec's own check would be a bare
    ``ValueError`` naming gpupipe's op index, not the transform)."""
    size = None
    for op in ops:
        if op.needs_fixed_size and size is None:
            why = (
                "before any resize or crop to one size, over images of several sizes: torchvision applies it to "
                "each image at its own size; gpupipe's needs images of one size: put it after the "
                "RandomResizedCrop, Resize((h, w)) or crop"
            )
            raise UnsupportedTransform([(op.name, op.name, why)])
        size = op.output_size(size)


def _one_size_reached(transform: Any, ops: list[Op], reached: set[tuple[int, int] | None]) -> None:
    """Refuses a transform that leaves the images at sizes of their own (``reached``, from ``_one_size``), as an
    ``UnsupportedTransform`` naming it: gpupipe batches images of one size (its spec would refuse the ops with a
    bare ``ValueError`` naming gpupipe's own ops), where torch's ``DataLoader`` batches them one at a time
    (``batch_size=1``), which ``fallback="torchvision"`` then does."""
    size = None
    for op in ops:
        size = op.output_size(size)
    if size is not None:
        return
    known = sorted(s for s in reached if s is not None)
    seen = (
        f"{len(known)} sizes: {_listed(known)}"
        if known and None not in reached
        else "sizes not known before it is read"
    )
    why = (
        f"gives images of varying size ({seen}), and gpupipe batches images of one size; torch's DataLoader "
        "batches them only one at a time (batch_size=1: its collate fails at a batch of two sizes): end the "
        "transform with a resize or crop to one size (Resize((h, w)), CenterCrop), or, with batch_size=1, pass "
        "fallback='torchvision'"
    )
    name = type(transform).__name__
    raise UnsupportedTransform([(name, name, why)])


def _last_unsized(ops: list[Op], size: tuple[int, int]) -> int:
    """The place of the last op whose output size the ops alone do not fix (``Resize(int)``: it depends on
    the image's), followed from an image stored ``size``; ``0`` (``Decode``) where there is none."""
    last = 0
    followed: tuple[int, int] | None = size
    for k, op in enumerate(ops):
        if op.output_size(followed) is None:
            last = k
        followed = None if followed is None else _through(op, followed)
    return last


def _follow(ops: list[Op], size: tuple[int, int]) -> tuple[int, int] | None:
    """The ``(h, w)`` after ``ops`` of an image stored ``size`` (``None``: a bad file, or not known before read)."""
    followed = size if size[0] > 0 else None  # -1: a bad file
    for op in ops:
        followed = None if followed is None else _through(op, followed)
    return followed


def _too_small(crop: RandomCrop, ops: list[Op], size: tuple[int, int]) -> bool:
    """Whether an image stored ``size`` reaches ``crop`` through ``ops`` smaller than its window."""
    followed = _follow(ops, size)
    return followed is not None and (followed[0] < crop.size[0] or followed[1] < crop.size[1])


def _crops_fit(source: Any, ops: list[Op], max_pixels: int, max_file_size: int | None) -> Any:
    """``source``, once every compiled ``RandomCrop`` is known to fit the images it receives.

    torchvision's ``RandomCrop`` (padded or not; ``pad_if_needed`` compiles to a ``CenterCrop`` the crop fits,
    ``gpupipe.interop.crops``) raises ``ValueError`` for an image smaller than its size, where gpupipe's op
    would pad it: refused here, when the loader is built, naming the images. The sizes come from the loader's
    one scan (as ``_one_size``'s), followed through the ops before the crop; a size fixed by those ops needs no
    scan.

    Raises:
        UnsupportedTransform: a ``RandomCrop`` larger than some of its images, naming the first.
    """
    for k, crop in enumerate(ops):
        if not isinstance(crop, RandomCrop):
            continue
        before, fixed = ops[1:k], None
        for op in before:
            fixed = op.size if isinstance(op, CenterCrop) else op.output_size(fixed)
        if fixed is not None:  # the ops before the crop give every image one size
            sizes, names, before = np.array([fixed]), [""], []
        else:
            source = as_source(source)
            sizes, names = source.scan(max_pixels, max_file_size).sizes, list(source.names)
        distinct, which_size = np.unique(np.asarray(sizes).reshape(-1, 2), axis=0, return_inverse=True)
        too_small = np.array([_too_small(crop, before, (int(h), int(w))) for h, w in distinct], dtype=bool)
        small = np.flatnonzero(too_small[which_size.ravel()])  # each distinct stored size followed once
        if small.size:
            first = int(small[0])
            height, width = _follow(before, (int(sizes[first][0]), int(sizes[first][1]))) or (0, 0)
            which = (
                f"the {fixed} images the transforms before it give"
                if fixed is not None
                else f"{small.size} of the {len(names)} images it receives (the first: {names[first]}, "
                f"{height} x {width} before the crop)"
            )
            why = (
                f"larger than {which}; torchvision's RandomCrop raises ValueError for them (gpupipe's would pad "
                "them): crop smaller, or resize first"
            )
            raise UnsupportedTransform([("RandomCrop", f"(size={crop.size})", why)])
    return source


__all__ = ["resolve_inputs"]
