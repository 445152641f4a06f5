"""Class labels: one class index per image; a batch is ``(B,)`` int64."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import is_int
from .base import Indices, SampleSource, Target, check_labels
from .kinds import TargetKind

if TYPE_CHECKING:
    import torch

#: Width of the zero-padded ASCII class index in a packed sample's ``.cls`` member.
CLASS_DIGITS = 8


def encode_class(label: int) -> bytes:
    """The ``.cls`` payload: fixed-width ASCII digits."""
    return b"%0*d" % (CLASS_DIGITS, label)


class Labels(Target):
    """A class index per image, from the source's ``labels`` column."""

    kind = TargetKind.LABEL
    member = "cls"
    manifest_fields = ("labels",)
    sources = "a classification source: ImageFolder, FileList, WebDataset, or a pack of one"

    def read(self, source: SampleSource, index: int) -> int:
        return int(source.labels[index])

    def check(self, source: SampleSource, what: str) -> None:
        check_labels(source.labels, len(source.classes), what, source.names.__getitem__)

    def batch(self, source: SampleSource, indices: Indices) -> torch.Tensor:
        import torch

        return torch.from_numpy(source.labels[np.asarray(indices, np.int64)])

    def bytes_per_sample(self, source: SampleSource) -> int:
        return 8

    def pack(self, value: Any, before, after, settings) -> tuple[bytes, int]:
        return encode_class(int(value)), int(value)

    def rows_problem(self, shard: dict, count: int) -> tuple[str, Any, str] | None:
        rows = shard.get("labels")
        if isinstance(rows, list) and len(rows) == count and all(is_int(v) for v in rows):
            return None
        return "labels", rows, f"{count} ints"

    def member_problem(self, read: Callable[[], bytes], shard: dict, number: int) -> str:
        label = shard["labels"][number]
        return "" if read() == encode_class(label) else f"class differs from the manifest's label {label}"
