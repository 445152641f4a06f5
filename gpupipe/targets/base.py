"""What every kind of target does: the ``Target`` handler each kind implements in its own file.

A handler owns what its kind is, so backends, sources and the packer never
branch on the kind:

* **read**: one sample's target, from the source's public interface
  (``labels``, ``label_sets()``, ``read_mask()``, ``boxes_of()``);
* **checked**: against the source's classes;
* **packed**: its tar member and manifest rows, written and read back;
* **batched**: stacked or padded into the batch contract.

How a kind is moved by each geometric op is not here: each backend owns its
target lowering, keyed by kind (``gpupipe/backends/<name>/targets.py``), so this
package imports no backend library. Image-level kinds (a class per image) do not
move with the pixels: they are looked up on the host for a whole batch
(``Target.batch``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from .kinds import TargetKind

if TYPE_CHECKING:
    import torch

#: Sample indices: a sequence of ints or an int array.
Indices = Any
#: A geometric op's pixel work on an image-shaped tensor (``(C, H, W)``) or a backend's graph node:
#: ``kernel(x, fill=..., nearest=...)``; ``nearest`` samples without interpolation (class ids).
Kernel = Callable[..., Any]
#: One op's planned parameters for one sample (torchvision) or as graph nodes (DALI): ``params[name]``.
Params = Any


class SampleSource(Protocol):
    """What a handler reads of a source (a ``gpupipe.Source`` has it all;
    a kind reads only its own part: ``labels``, ``label_sets()``, ``read_mask()``, ``boxes_of()``).
    Declared here so that ``targets`` sits below ``sources`` and imports none of it."""

    classes: list[str]
    names: list[str]
    labels: np.ndarray
    ignore_index: int
    mask_names: list[str]

    def __len__(self) -> int: ...

    def label_sets(self, indices: Indices) -> list[np.ndarray]: ...

    def read_mask(self, index: int) -> np.ndarray: ...

    def boxes_of(self, index: int) -> tuple[np.ndarray, np.ndarray]: ...


class Target:
    """The handler of one kind of target (one subclass per kind, one file each).

    Attributes:
        kind: the kind it handles (a new kind's class gives a string; ``registry.register`` makes it a
            ``TargetKind``).
        moves_with_pixels: geometric ops move it (masks, boxes); ``False``: one value per image.
        member: the packed sample's tar member that holds it (``cls``, ``json``, ``png``).
        manifest_fields: the manifest's per-sample rows that hold it (none for masks: the member does).
        read_from_tar: the packed member is pixel data that DALI's reader reads with the image (masks);
            otherwise the target comes from the manifest.
        sources: the sources that give the kind (for messages).
    """

    kind: ClassVar[TargetKind]
    moves_with_pixels: ClassVar[bool] = False
    member: ClassVar[str]
    manifest_fields: ClassVar[tuple[str, ...]] = ()
    read_from_tar: ClassVar[bool] = False
    sources: ClassVar[str]

    @property
    def title(self) -> str:
        return self.kind.title

    # -- reading ------------------------------------------------------------------------------

    def read(self, source: SampleSource, index: int) -> Any:
        """One sample's target, as the packer records it."""
        raise NotImplementedError

    def check(self, source: SampleSource, what: str) -> None:
        """Checks every sample's target against the source's classes.

        Raises:
            ValueError: naming ``what`` and the first sample whose target is out of range.
        """

    def planning_boxes(self, source: SampleSource, indices: Indices) -> list[np.ndarray] | None:
        """Per sample ``(N, 4)`` boxes the planner needs (an IoU crop draws around them), else ``None``."""
        return None

    # -- batches of image-level targets (built on the host) ---------------------------------------

    def batch(self, source: SampleSource, indices: Indices) -> torch.Tensor:
        """The targets of ``indices`` as one batch tensor (image-level kinds)."""
        raise NotImplementedError(f"{self.title} move with the pixels: the backend makes them")

    def listed(self, source: SampleSource, indices: Indices) -> list[Any]:
        """Each sample's target as ``loader.dataset.targets`` and ``samples`` show it (a class index)."""
        return [int(source.labels[i]) for i in indices]

    def item(self, source: SampleSource, index: int) -> Any:
        """One sample's target as ``loader.dataset[index]`` gives it (a class index)."""
        return int(source.labels[index])

    def bytes_per_sample(self, source: SampleSource) -> int:
        """Bytes one sample's batch row takes (a backend may keep a run's rows on the device)."""
        return 0

    # -- packing --------------------------------------------------------------------------------

    def pack_input(self, source: SampleSource, index: int) -> Any:
        """What a packer's worker needs to pack the sample's target."""
        return self.read(source, index)

    def pack(self, value: Any, before: tuple[int, int], after: tuple[int, int], settings: Any) -> tuple[bytes, Any]:
        """``(member payload, manifest value)`` of one sample; ``before``/``after``: the image's ``(w, h)``
        as read and as packed (``max_size`` may shrink it).

        Raises:
            gpupipe.images.ImageRefused: the target cannot be packed (a mask that does not fit).
        """
        raise NotImplementedError

    def describe(self, value: Any) -> str:
        """One line for ``sources.tsv``."""
        return str(value)

    def manifest_rows(self, values: Sequence[Any]) -> dict[str, list]:
        """A shard's manifest rows from its samples' manifest values."""
        return {field: list(values) for field in self.manifest_fields}

    def manifest_extra(self, source: SampleSource) -> dict[str, Any]:
        """Manifest fields of the whole pack (masks: ``ignore_index``)."""
        return {}

    def rows_problem(self, shard: dict, count: int) -> tuple[str, Any, str] | None:
        """``(field, value, expected)`` of a shard's first malformed row, else ``None``."""
        for field in self.manifest_fields:
            rows = shard.get(field)
            if not (isinstance(rows, list) and len(rows) == count):
                return field, rows, f"{count} rows"
        return None

    def member_problem(self, read: Callable[[], bytes], shard: dict, number: int) -> str:
        """Why the packed member of sample ``number`` of ``shard`` (``read()`` reads it, where the kind checks
        it) disagrees with the manifest ("" if it agrees)."""
        return ""

    def unpack(self, shard: dict, count: int) -> dict[str, list]:
        """A checked shard's per-sample columns (source attribute -> values) from its manifest rows."""
        return {field: list(shard[field]) for field in self.manifest_fields}


def json_member_problem(payload: bytes, want: dict) -> str:
    """Why a packed JSON member differs from what the manifest says ("" if it does not)."""
    try:
        got = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as err:
        return f"unreadable target ({err})"
    return "" if got == want else "target differs from the manifest's"


def check_label_rows(rows: Sequence[np.ndarray], num_classes: int, what: str, names: Sequence[str]) -> None:
    """Every label of every sample's row (a label set, a box's labels) must index a class.

    Raises:
        ValueError: naming the first sample (``names[i]``) with a label out of range.
    """
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    labels = np.concatenate([np.asarray(r, np.int64).reshape(-1) for r in rows]) if len(rows) else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(len(rows)), lengths)
    check_labels(labels, num_classes, what, lambda k: names[int(owner[k])])


def check_labels(labels: np.ndarray, num_classes: int, what: str, name_of: Callable[[int], str]) -> None:
    """Every label must index a class.

    Raises:
        ValueError: naming the first sample (``name_of(i)``) whose label is out of range.
    """
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"{what}: label {int(labels[i])} of {name_of(i)!r} is outside the class range 0..{num_classes - 1}"
            + (f" ({len(bad)} such labels)" if len(bad) > 1 else "")
        )


def turned_hint(image_path: str, target_hw: Any, image_hw: Any) -> str:
    """Where a target drawn on an image is its image's size turned (``(h, w)`` swapped) and the image
    carries an EXIF orientation that turns it (5 to 8): a sentence saying the target was drawn on the
    image as stored, ``''`` otherwise (another size, no such orientation, or an unreadable header)."""
    (h, w), (image_h, image_w) = (int(v) for v in target_hw), (int(v) for v in image_hw)
    if (h, w) != (image_w, image_h) or h == w:
        return ""
    from ..images import ImageRefused, read_header

    try:
        with open(image_path, "rb") as fh:
            orientation = read_header(fh, 1 << 62).orientation
    except (OSError, ValueError, SyntaxError, ImageRefused):
        return ""
    if orientation not in (5, 6, 7, 8):
        return ""
    return (
        f"; it fits the image as stored, before its EXIF orientation {orientation} turns it: it was drawn by a tool "
        "that ignored the orientation (turn it to match, or save the image upright without the orientation)"
    )
