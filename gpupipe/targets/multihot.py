"""Multi-label targets: a set of class indices per image; a batch is ``(B, num_classes)`` float32 multi-hot."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import is_int
from .base import Indices, SampleSource, Target, check_label_rows, json_member_problem
from .kinds import TargetKind

if TYPE_CHECKING:
    import torch


class MultiHot(Target):
    """Class sets, from the source's ``label_sets()``."""

    kind = TargetKind.MULTI_LABEL
    member = "json"
    manifest_fields = ("label_lists",)
    sources = "a multi-label source: a FileList with several labels per line, or a pack of one"

    def read(self, source: SampleSource, index: int) -> list[int]:
        return source.label_sets([index])[0].tolist()

    def check(self, source: SampleSource, what: str) -> None:
        check_label_rows(source.label_sets(range(len(source))), len(source.classes), what, source.names)

    def batch(self, source: SampleSource, indices: Indices) -> torch.Tensor:
        import torch

        out = torch.zeros(len(indices), len(source.classes), dtype=torch.float32)
        for row, labels in enumerate(source.label_sets(np.asarray(indices, np.int64))):
            out[row, torch.from_numpy(np.asarray(labels, np.int64))] = 1.0
        return out

    def listed(self, source: SampleSource, indices: Indices) -> list[Any]:
        """Each sample's class indices, as lists."""
        return [labels.tolist() for labels in source.label_sets(np.asarray(indices, np.int64))]

    def item(self, source: SampleSource, index: int) -> torch.Tensor:
        """The sample's ``(num_classes,)`` float32 multi-hot row, as its batches carry it."""
        return self.batch(source, [index])[0]

    def bytes_per_sample(self, source: SampleSource) -> int:
        return 4 * len(source.classes)

    def pack(self, value: Any, before, after, settings) -> tuple[bytes, list[int]]:
        labels = [int(v) for v in value]
        return json.dumps({"labels": labels}).encode(), labels

    def describe(self, value: Any) -> str:
        return ",".join(map(str, value))

    def rows_problem(self, shard: dict, count: int) -> tuple[str, Any, str] | None:
        rows = shard.get("label_lists")
        if (
            isinstance(rows, list)
            and len(rows) == count
            and all(isinstance(r, list) and all(is_int(v) for v in r) for r in rows)
        ):
            return None
        return "label_lists", rows, f"{count} lists of ints"

    def member_problem(self, read: Callable[[], bytes], shard: dict, number: int) -> str:
        return json_member_problem(read(), {"labels": shard["label_lists"][number]})

    def unpack(self, shard: dict, count: int) -> dict[str, list]:
        return {"label_lists": [np.asarray(r, np.int64) for r in shard["label_lists"]]}
