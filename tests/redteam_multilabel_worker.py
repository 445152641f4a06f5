"""Run under torchrun (2 ranks, gloo) by tests/test_redteam_multilabel.py: per rank and per backend of
``--backends``, the sample ids and multi-hot targets of every batch of two epochs of ``--list`` (a multi-label
list file of :func:`helpers.flat_folder` images), with ``even_batches`` on and off, into
``--out/rank<r>.json``; then the same through a pack of the list (``--packed``)."""

import argparse
import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def epochs(source, backend: str, even_batches: bool) -> dict:
    """``{"classes", "epochs": [[{"ids", "targets"} per batch] per epoch]}``."""
    loader = gpupipe.loader(
        source, PIPELINE, batch_size=3, backend=backend, device="cpu", num_threads=1, seed=11, even_batches=even_batches
    )
    out = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        out.append([{"ids": sample_ids(images), "targets": targets.tolist()} for images, targets in loader])
    return {"classes": loader.classes, "len": len(loader), "epochs": out}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--list", type=Path, required=True)
    parser.add_argument("--packed", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backends", default="torchvision")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {}
    for backend in args.backends.split(","):
        for even in (True, False):
            result[f"list-{backend}-{even}"] = epochs(args.list, backend, even)
        result[f"packed-{backend}-True"] = epochs(args.packed, backend, True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
