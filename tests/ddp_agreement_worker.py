"""Run under torchrun by tests/test_ddp_agreement.py (gloo, 2 ranks): what the ranks sharing a loader
must agree on, and a loader of one process that joins no collective.

``--case alone``: rank 0 alone builds and reads a ``world_size=1`` loader while rank 1 waits at a
barrier. ``--case disagree``: both ranks build loaders whose settings or listings differ, one at a
time; each rank records what it was told. ``--case alone disagree`` runs both, in that order, in one
launch. Results go to ``OUT/<case>-rank<r>.json``.
"""

import argparse
import datetime
import faulthandler
import json
import shutil
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))

import gpupipe  # noqa: E402
from gpupipe.ops import Decode, Output, Resize  # noqa: E402
from helpers import sample_ids  # noqa: E402

PIPELINE = [Decode(), Resize(size=(8, 8)), Output(dtype="uint8")]


def build(source, **kw):
    settings = {"batch_size": 2, "backend": "torchvision", "device": "cpu", "num_threads": 0, "seed": 1, **kw}
    return gpupipe.loader(source, PIPELINE, **settings)


def outcome(make):
    """``{"error": type, "message": ...}`` of building (and reading) a loader, or what it read."""
    try:
        loader = make()
        return {"len": len(loader), "ids": [i for images, _ in loader for i in sample_ids(images)]}
    except gpupipe.Error as err:
        return {"error": type(err).__name__, "message": str(err)}


def alone(args, rank):
    record = {}
    if rank == 0:
        record = outcome(lambda: build(str(args.folder), rank=0, world_size=1))
    dist.barrier()
    return record


def disagree(args, rank):
    folder = str(args.folder)
    record = {
        "batch_size": outcome(lambda: build(folder, batch_size=2 + rank)),
        "seed": outcome(lambda: build(folder, seed=rank)),
        "drop_last": outcome(lambda: build(folder, drop_last=rank == 1)),
        "even_batches": outcome(lambda: build(folder, even_batches=rank == 0)),
        "shuffle_given_share": outcome(lambda: build(folder, shuffle=rank == 0, rank=rank, world_size=2)),
        "max_pixels": outcome(lambda: build(folder, max_pixels=10**6 + rank)),
    }
    # a file appears between the ranks' listings: rank 0 lists 20 files, rank 1 lists 21
    source = gpupipe.ImageFolder(folder) if rank == 0 else None
    dist.barrier()
    extra = args.folder / "class_0" / "zz-late.png"
    if rank == 1:
        shutil.copy(args.folder / "class_0" / "s0000.png", extra)
        source = gpupipe.ImageFolder(folder)
    dist.barrier()
    record["listing"] = outcome(lambda: build(source))
    dist.barrier()
    if rank == 1:
        extra.unlink()
    dist.barrier()
    record["agreed"] = outcome(lambda: build(folder))
    return record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=["alone", "disagree"], nargs="+", required=True)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(100, exit=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=40))
    rank = dist.get_rank()
    for case in args.case:
        record = (alone if case == "alone" else disagree)(args, rank)
        (args.out / f"{case}-rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
