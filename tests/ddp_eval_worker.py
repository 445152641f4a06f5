"""Exact evaluation with even_batches=False, run by ``ddp_worker.py`` inside its first torchrun launch
(tests/test_distributed.py): one launch checks sharding, resuming and evaluation.

For each dataset size given, every rank reads its part once and records the
sample ids it saw, its len(loader), and the accuracy-style sum reduced over
ranks with one all_reduce (the README's recipe).
"""

import json
from pathlib import Path
from typing import List

import torch
import torch.distributed as dist

import gpupipe
from helpers import sample_ids

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def evaluate(folders: List[Path], backend: str, out: Path) -> None:
    """Writes ``out/eval-rank<rank>.json``: per ``<folder name>-<shuffle>``, ids, len and reduced totals."""
    rank = dist.get_rank()
    result = {}
    for folder in folders:
        for shuffle in (False, True):
            loader = gpupipe.loader(folder, PIPELINE, batch_size=4, backend=backend, shuffle=shuffle,
                                    even_batches=False, num_threads=1)
            ids, totals = [], torch.zeros(2, dtype=torch.float64)
            for images, labels in loader:
                ids.extend(sample_ids(images))
                totals[0] += (labels == labels).sum()  # "correct" predictions: every one here
                totals[1] += len(labels)
            dist.all_reduce(totals)
            result[f"{folder.name}-{shuffle}"] = {"ids": ids, "len": len(loader), "totals": totals.tolist()}
    (out / f"eval-rank{rank}.json").write_text(json.dumps(result))
