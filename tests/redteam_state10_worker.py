"""Run under torchrun by tests/test_redteam_state10.py (gloo, 2 ranks), one launch for every case: ranks whose
pipelines, backends, classes or labels differ (refused by name on every rank), ranks whose threads and prefetch
differ (agreed), evaluation loaders of rank 0 alone (state and resume included) while rank 1 waits at a barrier,
a loader over a ``new_group`` of both ranks, and loaders built after ``destroy_process_group``.
Results go to ``OUT/rank<r>.json``: ``{case: outcome}``.
"""

import argparse
import datetime
import faulthandler
import importlib.util
import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))

from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe.ops import Decode, Normalize, Output, Resize  # noqa: E402

UINT8 = [Decode(), Resize(size=(8, 8)), Output(dtype="uint8")]
HAS_DALI = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None


def build(source, pipeline=UINT8, **kw):
    settings = {"batch_size": 2, "backend": "torchvision", "device": "cpu", "num_threads": 0, "seed": 1, **kw}
    return gpupipe.loader(source, pipeline, **settings)


def outcome(make):
    """``{"error": type, "message": ...}`` of building (and reading) a loader, or what it read."""
    try:
        loader = make()
        return {"len": len(loader), "ids": [i for images, _ in loader for i in sample_ids(images)]}
    except gpupipe.Error as err:
        return {"error": type(err).__name__, "message": str(err)}


def files(folder: Path) -> list:
    return sorted(str(p) for p in folder.rglob("*.png"))


def disagree(folder: Path, rank: int) -> dict:
    classes = ["class_0", "class_1", "class_2"]
    entries = [(path, Path(path).parent.name) for path in files(folder)]
    relabelled = [(path, "class_2" if i == 0 and rank == 1 else label) for i, (path, label) in enumerate(entries)]
    float_pipeline = [Decode(), Resize(size=(8, 8)), Normalize(mean=(0.5, 0.5, 0.5 + 0.1 * rank), std=(0.2,) * 3)]
    record = {
        "normalize": outcome(lambda: build(str(folder), float_pipeline)),
        "dtype": outcome(
            lambda: build(str(folder), [Decode(), Resize(size=(8, 8)), Output(("uint8", "float32")[rank])])
        ),
        "resize": outcome(lambda: build(str(folder), [Decode(), Resize(size=(8 + rank, 8)), Output("uint8")])),
        "on_error": outcome(lambda: build(str(folder), on_error=("raise", "skip")[rank])),
        "max_file_size": outcome(lambda: build(str(folder), max_file_size=10**6 + rank)),
        "classes": outcome(lambda: build(gpupipe.FileList(entries, classes=classes[:: 1 - 2 * rank]))),
        "labels": outcome(lambda: build(gpupipe.FileList(relabelled, classes=classes))),
        "threads": outcome(lambda: build(str(folder), num_threads=rank, prefetch=2 + rank)),
    }
    if HAS_DALI:
        record["backend"] = outcome(
            lambda: build(str(folder), backend=("torchvision", "dali-cpu")[rank], num_threads=1)
        )
    return record


def alone(folder: Path, rank: int) -> dict:
    """Rank 0 alone: a loader of world_size 1, its state loaded into another, gpupipe.DataLoader without a
    sampler; rank 1 waits at a barrier (a collective joined by rank 0 alone would hang both)."""
    record: dict = {}
    if rank == 0:
        first = build(str(folder), world_size=1)
        it = iter(first)
        head = [sample_ids(next(it)[0]) for _ in range(3)]
        state = first.state_dict()
        second = build(str(folder), rank=0, world_size=1)
        second.load_state_dict(state)
        second.set_epoch(0)  # the state's epoch: keeps it
        rest = [sample_ids(images) for images, _ in second]
        whole = [sample_ids(images) for images, _ in build(str(folder), world_size=1)]
        record["resume"] = {"head": head, "rest": rest, "whole": whole, "state": state}
        import torchvision
        from torchvision.transforms import v2

        transform = v2.Compose([v2.PILToTensor(), v2.Resize((8, 8))])
        dataset = torchvision.datasets.ImageFolder(str(folder), transform=transform)
        loader = gpupipe.DataLoader(dataset, batch_size=4, shuffle=False, num_workers=0)
        record["dataloader"] = {"len": len(loader), "batches": sum(1 for _ in loader)}
    dist.barrier()
    return record


def subgroup(folder: Path, rank: int) -> dict:
    """A loader over a ``new_group`` of both ranks, given that group's share."""
    group = dist.new_group([0, 1])
    return outcome(lambda: build(str(folder), rank=dist.get_rank(group), world_size=dist.get_world_size(group)))


def after_destroy(folder: Path, rank: int) -> dict:
    """Loaders built after the process group is gone: one of world_size 1, and one whose share comes from
    the launcher (RANK / WORLD_SIZE); each joins no collective."""
    return {"alone": outcome(lambda: build(str(folder), world_size=1)), "launcher": outcome(lambda: build(str(folder)))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(110, exit=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=40))
    rank = dist.get_rank()
    record = {"disagree": disagree(args.folder, rank), "alone": alone(args.folder, rank)}
    record["subgroup"] = subgroup(args.folder, rank)
    dist.barrier()
    dist.destroy_process_group()
    record["after_destroy"] = after_destroy(args.folder, rank)
    (args.out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
