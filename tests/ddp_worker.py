"""Run under torchrun by tests/test_distributed.py: records which samples each rank reads (and, in the
first launch, the exact evaluation of ``ddp_eval_worker.py``: one launch, several properties), for each
backend of ``--backends`` in turn (one launch for them all: a launch costs ~10 s of imports on the 2-core VM),
into ``OUT/<backend>/``.

Images are flat colours that encode their sample index in steps of 16
levels (R: i % 16, G: i // 16), so the index is read back from any pixel of
the uint8 output, also after the packer re-encodes them as JPEG.
"""

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

import gpupipe
from ddp_eval_worker import evaluate
from gpupipe.ops import Decode, Output, Resize
from helpers import sample_ids

PIPELINE = [Decode(), Resize(size=(8, 8)), Output(dtype="uint8")]


def make(args, source, drop_last, batch_size):
    return gpupipe.loader(source, PIPELINE, batch_size=batch_size, backend=args.backend, device="cpu",
                          drop_last=drop_last, seed=args.seed, num_threads=1)


def run_epochs(loader, epochs, save_at=None, state_file=None):
    """Reads ``epochs`` epochs, saving the state after batch ``save_at`` of the last one."""
    record = {"len": len(loader), "epochs": {}}
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        batches = []
        for i, (images, labels) in enumerate(loader):
            batches.append({"ids": sample_ids(images), "labels": labels.tolist()})
            if save_at is not None and epoch == epochs - 1 and i + 1 == save_at:
                torch.save(loader.state_dict(), state_file)
        record["epochs"][epoch] = batches
        record[f"padded_{epoch}"] = loader.rank_share(epoch).padded
    return record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--small-folder", type=Path, required=True)
    parser.add_argument("--list", type=Path, required=True)
    parser.add_argument("--shards", type=Path, required=True)
    parser.add_argument("--backends", required=True, help="comma-separated, run in turn")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--eval-folders", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    dist.init_process_group("gloo")
    for backend in args.backends.split(","):
        out = args.out / backend
        out.mkdir(exist_ok=True)
        run_backend(argparse.Namespace(**{**vars(args), "backend": backend, "out": out}))
    dist.destroy_process_group()


def run_backend(args):
    """Everything the launch checks, for ``args.backend``, into ``args.out``."""
    rank = dist.get_rank()
    state_file = args.out / f"state-rank{rank}.pt"
    shards_state = args.out / f"shards-state-rank{rank}.pt"
    result = {"rank": rank, "world_size": dist.get_world_size()}
    folder_loader = make(args, args.folder, drop_last=False, batch_size=4)
    assert folder_loader.rank == rank and folder_loader.world_size == dist.get_world_size()
    if args.resume:
        # A new process: first the same epoch 0 again (reproducibility), then the resumed epoch 1.
        result["folder"] = run_epochs(folder_loader, 1)
        resumed = make(args, args.folder, drop_last=False, batch_size=4)
        resumed.load_state_dict(torch.load(state_file, weights_only=True))
        result["resumed"] = [{"ids": sample_ids(x), "labels": y.tolist()} for x, y in resumed]
        resumed = make(args, args.shards, drop_last=False, batch_size=4)
        resumed.load_state_dict(torch.load(shards_state, weights_only=True))
        result["resumed_shards"] = [{"ids": sample_ids(x), "labels": y.tolist()} for x, y in resumed]
    else:
        result["folder"] = run_epochs(folder_loader, 2, save_at=1, state_file=state_file)
        result["list_drop_last"] = run_epochs(make(args, gpupipe.FileList(args.list), drop_last=True, batch_size=4), 2)
        result["small"] = run_epochs(make(args, args.small_folder, drop_last=False, batch_size=4), 1)
        result["shards"] = run_epochs(make(args, args.shards, drop_last=False, batch_size=4), 2, save_at=1,
                                      state_file=shards_state)
    if args.eval_folders:
        evaluate(args.eval_folders, args.backend, args.out)
    name = "resume" if args.resume else "run"
    (args.out / f"{name}-rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__":
    main()
