"""The source base class: samples as columns, their targets, sizes, bytes and epoch order.

A source is a fixed list of samples: a name per sample (a file, or
``shard.tar#key.jpg``, used in messages and skip lists), a target, the
size of each image (known before decoding: from the header scan or the
manifest) and the class names. It reads one sample's encoded bytes and
orders an epoch; it knows nothing of decoding. Per-sample data is held in
columns (lists and arrays, one entry per sample) so that a source of a
million images is built and subset quickly.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import env
from ..errors import Skipped
from ..fileio import DEFAULT_MAX_FILE_SIZE, read_file
from ..loading.draws import Draws
from ..loading.sampling import epoch_order
from ..targets import Target, TargetKind, handler
from .scan import ScanResult, scan

#: Sample indices as the loader passes them: a sequence of ints or an int array.
Indices = Sequence[int] | np.ndarray

#: Integer labels imply the classes ``0..largest``; a larger label is refused (an id, not a class).
MAX_NUMBERED_CLASSES = 10_000_000


def refuse_empty(value, what: str, folder: bool = True):
    """``value`` itself, an empty or blank string refused: ``Path("")`` is the current folder, which
    ``os.environ.get("DATA", "")`` with the variable unset would read.

    Args:
        value: the path the user gave (a ``str``, a ``PathLike``, or what else the caller accepts).
        what: how messages name the argument (``"ImageFolder: root"``).
        folder: whether a folder is expected (else a file), for the advice.

    Raises:
        ValueError: ``value`` is empty or blank, naming ``what``.
    """
    if isinstance(value, str) and not value.strip():
        wanted = "a folder ('.' for the current one)" if folder else "a file"
        raise ValueError(
            f"{what}: empty path ({value!r}: an unset environment variable?), which would mean the current folder; "
            f"pass {wanted}"
        )
    return value


def given_path(value: str | os.PathLike, what: str, folder: bool = True) -> Path:
    """``value`` as an absolute path (``~`` expanded); an empty or blank string refused (``refuse_empty``)."""
    return Path(refuse_empty(value, what, folder)).expanduser().absolute()


def numbered_classes(largest: int, what: str, where: str) -> list[str]:
    """``["0", ..., str(largest)]``: the class names that integer labels up to ``largest`` imply.

    Raises:
        ValueError: naming ``where`` the label is, when it implies over ``MAX_NUMBERED_CLASSES`` classes.
    """
    if largest >= MAX_NUMBERED_CLASSES:
        raise ValueError(
            f"{what}: label {largest} ({where}) would make {largest + 1:,} classes, over "
            f"{MAX_NUMBERED_CLASSES:,}: is it an id rather than a class index? Fix it, or pass "
            "classes=[...] to name the classes (then it is a bad sample)"
        )
    return [str(i) for i in range(largest + 1)]


@dataclass(frozen=True)
class Sample:
    """One image and its class index (a multi-label source's: its list of class indices); ``path`` names it (a
    file, or ``shard.tar#key.jpg``)."""

    path: str
    label: int | list[int]


class Source:
    """A fixed list of samples with class names and targets.

    Attributes:
        kind: the target each sample carries ([`TargetKind`][gpupipe.TargetKind]).
        classes: class names; ``classes[label]`` names a class.
        names: per sample, the file (or member) it is read from.
        labels: ``(N,)`` int64 class index per sample (``LABEL``), or -1.
        ignore_index: the mask value of pixels with no class (``MASK``).
        problems: files found when the source was built that are not samples but should be
            (an image without its mask, an annotation without its image); the loader and the
            packer report them by ``on_error``.
    """

    kind: TargetKind = TargetKind.LABEL
    classes: list[str]
    names: list[str]
    labels: np.ndarray
    ignore_index: int = 255
    problems: Sequence[Skipped] = ()
    #: ``{index: why}`` of samples whose target is known bad from the annotations alone.
    annotation_errors: dict[int, str] = {}
    #: ``(N, 2)`` ``(h, w)`` each image must have to match its annotations (``None``: not annotated).
    annotated_sizes: np.ndarray | None = None
    #: Per-sample attributes, sliced together by ``subset``.
    columns: tuple[str, ...] = ("names", "labels")
    #: Whether the loader must scan the files (packed shards were checked when packed).
    needs_scan: bool = True
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    #: Epochs drawn by weight (``gpupipe.loading.draws``; the loader's ``weights=``), else ``None``.
    draws: Draws | None = None
    #: How every decoder reads the images, and the sizes the planner sees: ``"upright"`` (EXIF orientation
    #: applied: gpupipe's own) or ``"stored"`` (not applied: as torchvision's PIL loader opens a file; the swap
    #: of a torchvision dataset, ``gpupipe.interop.datasets``).
    decode_as: str = "upright"

    # Declared for the type checker only (no class attribute): the columns of sources of that kind.
    #: ``MASK`` sources of files: per sample, its mask file.
    mask_names: list[str]
    #: ``BOXES``: per sample, ``(n, 4)`` float32 ``xyxy`` boxes and their ``(n,)`` int64 labels.
    boxes: list[np.ndarray]
    box_labels: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name to label, as in ``torchvision.datasets.ImageFolder``."""
        return {name: i for i, name in enumerate(self.classes)}

    @property
    def paths(self) -> list[str]:
        """Each sample's name (a file path for file sources)."""
        return self.names

    @property
    def samples(self) -> Sequence[Sample]:
        """``Sample(path, label)`` per sample (a view, built on access)."""
        return _SampleView(self)

    # -- sizes and the scan ---------------------------------------------------------

    def sizes(self) -> np.ndarray:
        """``(N, 2)`` int64 ``(h, w)`` of every decoded image (as ``decode_as`` reads it), from the
        latest scan (scanning with the defaults if there was none)."""
        return self.last_scan().sizes

    def last_scan(self) -> ScanResult:
        """The latest scan, its sizes as ``decode_as`` reads the images (scanning with the defaults if none)."""
        scans = self.__dict__.get("_scans", {})
        last = self.__dict__.get("_last_scan")
        return scans[last].as_read(self.decode_as) if last in scans else self.scan()

    def scan(self, max_pixels: int = 100_000_000, max_file_size: int | None = None) -> ScanResult:
        """The header scan of every file (``gpupipe.sources.scan.scan``), done once per source and settings; its
        sizes as ``decode_as`` reads the images (now: the memo keeps the scan's own, upright sizes)."""
        max_file_size = max_file_size or self.max_file_size
        memo = self.__dict__.setdefault("_scans", {})
        key = (max_pixels, max_file_size)
        if key not in memo:
            memo[key] = self._scan(max_pixels, max_file_size)
        self.__dict__["_last_scan"] = key
        return memo[key].as_read(self.decode_as)

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        return scan(self.names, max_pixels=max_pixels, max_file_size=max_file_size, cache_dir=env.cache_dir())

    # -- reading ------------------------------------------------------------------

    def read_bytes(self, index: int) -> np.ndarray:
        """The encoded image of sample ``index`` as a writable 1-D uint8 array.

        Raises:
            gpupipe.fileio.UnreadableFile: the file cannot be read (missing, not regular, too large).
        """
        return np.frombuffer(bytearray(read_file(self.names[index], self.read_limit)), np.uint8)

    @property
    def read_limit(self) -> int:
        """The most bytes one file may hold when read: the ``max_file_size`` of the latest scan (the loader's
        setting, larger or smaller than this source's default), else the source's own."""
        last = self.__dict__.get("_last_scan")
        return last[1] if last else self.max_file_size

    def will_read(self, order: np.ndarray, start: int) -> None:
        """A hint: ``order[start:]`` is read next (remote sources fetch ahead; others ignore it)."""

    def hold(self, indices: Indices) -> _NoHold:
        """Makes the files of ``indices`` readable by a reader outside Python (a DALI pipeline) until
        the returned hold's ``release()``; local files need nothing."""
        return _NoHold()

    @property
    def shards_per_run(self) -> int | None:
        """Tars one DALI run may read (``None``: any number; remote sources bound it by their cache)."""
        return None

    def epoch_order(self, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
        """The order of one epoch (all ranks): a permutation of ``(seed, epoch)``, or the stored order; with
        ``draws``, the samples drawn by weight from ``(seed, epoch)``."""
        if self.draws is not None:
            return self.draws.order(seed, epoch)
        return epoch_order(len(self), seed=seed, epoch=epoch, shuffle=shuffle)

    def tars_of(self, indices: Indices) -> np.ndarray | None:
        """``(n,)`` the tar each sample of ``indices`` is read from (``None``: loose files)."""
        return None

    # -- targets: what the kind's handler (``gpupipe.targets.handler``) reads ----------------

    @property
    def target(self) -> Target:
        """The handler of this source's kind of target."""
        return handler(self.kind)

    def label_sets(self, indices: Indices) -> list[np.ndarray]:
        """Per sample, its class indices (multi-label sources override this)."""
        return [self.labels[i : i + 1] for i in indices]

    def read_mask(self, index: int) -> np.ndarray:
        """``MASK`` sources: the encoded mask of sample ``index``, as ``read_bytes`` reads the image.

        Raises:
            gpupipe.fileio.UnreadableFile: the mask cannot be read.
        """
        raise TypeError(f"{type(self).__name__} gives {self.kind.title}, not masks")

    def boxes_of(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """``BOXES`` sources: sample ``index``'s ``(n, 4)`` float32 xyxy boxes and ``(n,)`` int64 labels."""
        if self.kind is not TargetKind.BOXES:
            raise TypeError(f"{type(self).__name__} gives {self.kind.title}, not boxes")
        return self.boxes[index], self.box_labels[index]

    # -- subsets ------------------------------------------------------------------

    def subset(self, keep: Indices) -> Source:
        """The same source with only the samples at ``keep`` (classes unchanged).

        Every per-sample column (a list, an array, or a dict keyed by sample)
        is sliced, cached per-sample results are sliced too, and nothing that belongs to this object (open files)
        is shared.
        """
        keep = np.asarray(keep, np.int64)
        position = {int(old): new for new, old in enumerate(keep)}
        part = copy.copy(self)
        for name in self.columns:
            column = getattr(self, name)
            if isinstance(column, dict):  # {index: value} of some samples
                setattr(part, name, {position[i]: v for i, v in column.items() if i in position})
            elif isinstance(column, np.ndarray):
                setattr(part, name, column[keep])
            else:
                setattr(part, name, [column[i] for i in keep])
        if self.draws is not None:
            part.draws = self.draws.subset(keep, self.names)
        part.__dict__["_scans"] = {
            k: v.subset(keep, {position[i]: r for i, r in v.bad.items() if i in position})
            for k, v in self.__dict__.get("_scans", {}).items()
        }
        part._after_subset()
        return part

    def problem_summary(self) -> str:
        """What ``problems`` are, counted, for the loader's error message."""
        return f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''} found building the source"

    def _after_subset(self) -> None:
        """Rebuilds lookup tables that depend on the sample order (sources override)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples, {len(self.classes)} classes)"


class _NoHold:
    def release(self) -> None:
        """Nothing held."""


class _SampleView(Sequence):
    def __init__(self, source: Source) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return Sample(self.source.names[i], self.source.target.listed(self.source, [i])[0])
