"""What every kind of target does: the ``Target`` handler each kind implements in its own file.

A handler owns its kind's whole journey, so backends, sources and the
packer never branch on the kind:

* **read**: one sample's target, from the source's public interface
  (``labels``, ``label_sets()``, ``read_mask()``, ``boxes_of()``);
* **moved**: by each geometric op, on each backend. A backend hands the
  handler the op's pixel *kernel* (``kernel(x, fill=..., nearest=...)``,
  the same crop, resize, flip or rotation the image gets) and the op's
  planned parameters (its ``affine`` map and output ``size``); a mask
  samples the kernel with nearest-neighbour, a box moves by the map;
* **packed**: its tar member and manifest rows, written and read back;
* **batched**: stacked or padded into the batch contract.

Image-level kinds (a class per image) do not move with the pixels: they are
looked up on the host for a whole batch (``Target.batch``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .kinds import TargetKind

if TYPE_CHECKING:
    import torch

    from ..plan.spec import PipelineSpec
    from ..sources import Source

#: Sample indices: a sequence of ints or an int array.
Indices = Any
#: A geometric op's pixel work on an image-shaped tensor (``(C, H, W)``) or DALI node:
#: ``kernel(x, fill=..., nearest=...)``; ``nearest`` samples without interpolation (class ids).
Kernel = Callable[..., Any]
#: One op's planned parameters for one sample (torchvision) or as graph nodes (DALI): ``params[name]``.
Params = Any


class Target:
    """The handler of one kind of target (one subclass per kind, one file each).

    Attributes:
        kind: the kind it handles.
        moves_with_pixels: geometric ops move it (masks, boxes); ``False``: one value per image.
        member: the packed sample's tar member that holds it (``cls``, ``json``, ``png``).
        manifest_fields: the manifest's per-sample rows that hold it (none for masks: the member does).
        read_from_tar: the packed member is pixel data that DALI's reader reads with the image (masks);
            otherwise the target comes from the manifest.
        dali_feeds: outputs of ``dali_feed`` (DALI's ``external_source`` gives them per batch).
        sources: the sources that give the kind (for messages).
    """

    kind: ClassVar[TargetKind]
    moves_with_pixels: ClassVar[bool] = False
    member: ClassVar[str]
    manifest_fields: ClassVar[tuple[str, ...]] = ()
    read_from_tar: ClassVar[bool] = False
    dali_feeds: ClassVar[int] = 0
    sources: ClassVar[str]

    @property
    def title(self) -> str:
        return self.kind.title

    # -- reading ------------------------------------------------------------------------------

    def read(self, source: Source, index: int) -> Any:
        """One sample's target, as the packer records it."""
        raise NotImplementedError

    def check(self, source: Source, what: str) -> None:
        """Checks every sample's target against the source's classes.

        Raises:
            ValueError: naming ``what`` and the first sample whose target is out of range.
        """

    def planning_boxes(self, source: Source, indices: Indices) -> list[np.ndarray] | None:
        """Per sample ``(N, 4)`` boxes the planner needs (an IoU crop draws around them), else ``None``."""
        return None

    # -- batches of image-level targets (built on the host) ---------------------------------------

    def batch(self, source: Source, indices: Indices) -> torch.Tensor:
        """The targets of ``indices`` as one batch tensor (image-level kinds)."""
        raise NotImplementedError(f"{self.title} move with the pixels: the backend makes them")

    def bytes_per_sample(self, source: Source) -> int:
        """Bytes one sample's batch row takes (a backend may keep a run's rows on the device)."""
        return 0

    # -- one sample on the torchvision backend --------------------------------------------------

    def load(self, source: Source, index: int, size: tuple[int, int], path: str) -> Any:
        """The sample's target, ready to move with its decoded ``(h, w)`` image; ``None``: image-level.

        Raises:
            gpupipe.errors.DecodeError: naming ``path`` (a mask that does not fit its image).
        """
        return None

    def move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        """``state`` after geometric op ``op`` (its pixel ``kernel`` and planned ``params``)."""
        return state

    def finish(self, state: Any, spec: PipelineSpec) -> Any:
        """The moved sample's target as ``stack`` takes it."""
        return None

    def stack(self, parts: Sequence[Any], spec: PipelineSpec) -> Any:
        """The batch's part made in the workers (``None`` in ``parts``: a failed sample, replaced later)."""
        return None

    def replace(self, part: Any, row: int, value: Any) -> Any:
        """``part`` with row ``row`` made from one sample's ``finish`` (a replaced sample)."""
        return part

    def complete(self, part: Any, source: Source, indices: Indices, content_sizes: np.ndarray) -> Any:
        """The batch's targets from the workers' ``part`` (image-level kinds: from the source).

        ``content_sizes``: ``(B, 2)`` each output image's ``(h, w)`` without padding.
        """
        return self.batch(source, indices)

    # -- the DALI graph --------------------------------------------------------------------------

    def dali_feed(self, source: Source, indices: Indices, *, strict: bool = False) -> list[list[np.ndarray]]:
        """Per ``dali_feeds`` output, per sample, the arrays DALI's ``external_source`` gives.

        ``strict``: an unreadable file raises (the probe names it) instead of feeding nothing.
        """
        return []

    def dali_start(self, inputs: list[Any], *, gpu: bool) -> Any:
        """The graph's state of the target from its inputs (fed, or read by the reader)."""
        return None

    def dali_move(self, state: Any, kernel: Kernel, params: Params, op: Any, spec: PipelineSpec) -> Any:
        """``state`` after op ``op``; ``params[name]`` are the op's planned parameters as nodes."""
        return state

    def dali_outputs(self, state: Any, spec: PipelineSpec) -> list[Any]:
        """The graph outputs that carry the target (after the images)."""
        return []

    def from_dali(self, outputs: list[torch.Tensor], count: int, content_sizes: np.ndarray) -> Any:
        """The batch's targets from the outputs of ``dali_outputs`` (``count`` real samples)."""
        raise NotImplementedError

    # -- packing --------------------------------------------------------------------------------

    def pack_input(self, source: Source, index: int) -> Any:
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

    def manifest_extra(self, source: Source) -> dict[str, Any]:
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


def is_int(value: Any) -> bool:
    """A JSON integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


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
