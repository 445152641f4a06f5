"""Run under torchrun by tests/test_distributed.py: exact evaluation with even_batches=False.

For each dataset size given, every rank reads its part once and records the
sample ids it saw, its len(loader), and the accuracy-style sum reduced over
ranks with one all_reduce (the README's recipe).
"""

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

import gpupipe
from helpers import sample_ids

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folders", type=Path, nargs="+", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {}
    for folder in args.folders:
        for shuffle in (False, True):
            loader = gpupipe.loader(folder, PIPELINE, batch_size=4, backend=args.backend, shuffle=shuffle,
                                    even_batches=False, num_threads=1)
            ids, totals = [], torch.zeros(2, dtype=torch.float64)
            for images, labels in loader:
                ids.extend(sample_ids(images))
                totals[0] += (labels == labels).sum()  # "correct" predictions: every one here
                totals[1] += len(labels)
            dist.all_reduce(totals)
            result[f"{folder.name}-{shuffle}"] = {"ids": ids, "len": len(loader), "totals": totals.tolist()}
    (args.out / f"eval-rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
