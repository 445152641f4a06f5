"""One torchrun rank of ``test_redteam_resume3.py`` (gloo, CPU, torchvision backend): checkpoints as users save them.

``--phase run`` (2 ranks): an uninterrupted run of 3 epochs that saves each rank's state mid-epoch 1 and after
epoch 0 (``torch.save``); Accelerate's ``save_state`` of a registered loader after 2 batches of epoch 0, read on;
a Lightning fit (2 epochs) and the same fit writing a checkpoint every 2 steps. ``--phase resume`` (2 ranks, new
processes): Accelerate's ``load_state`` followed by what its docs do next (``skip_first_batches``, then the
``loader.skip`` its refusal points to), Lightning's ``fit(ckpt_path=...)`` from each mid-epoch checkpoint, and
ranks that load unalike states.
``--phase other`` (4 ranks): the 2-rank states loaded into a loader of this world size (``weights_only=True``):
the mid-epoch one reads the rest of its epoch, the epoch-end one reads on beside a fresh run of this world size; then
the same into loaders of world size 1 (``rank=0, world_size=1``; the record's ``"one"``). Each rank writes
``<phase><world size>-rank<r>.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PIPELINE = [gpupipe.Decode(), gpupipe.RandomResizedCrop((8, 8)), gpupipe.Output("uint8")]
PLAIN = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
SEED = 11


def make(data: Path, name: str = "d13", **kwargs):
    kwargs = {"batch_size": 2, "seed": SEED, **kwargs}
    return gpupipe.loader(
        data / name, kwargs.pop("pipeline", PLAIN), backend="torchvision", device="cpu", num_threads=0, **kwargs
    )


def passes(loader, count: int) -> list:
    return [[sample_ids(images) for images, _ in loader] for _ in range(count)]


def run(data: Path, out: Path) -> dict:
    rank = dist.get_rank()
    loader = make(data)
    epochs = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        batches = []
        for i, (images, _) in enumerate(loader):
            batches.append(sample_ids(images))
            if epoch == 1 and i + 1 == 2:
                torch.save(loader.state_dict(), out / f"mid-rank{rank}.pt")
        if epoch == 0:
            torch.save(loader.state_dict(), out / f"end-rank{rank}.pt")
        epochs.append(batches)
    return {"epochs": epochs, "accelerate": accelerate("run", data, out), **lightning("run", data, out)}


def refusal(loader, state) -> str:
    try:
        loader.load_state_dict(state)
    except ValueError as error:
        return str(error)
    return "accepted"


def other(data: Path, out: Path, **split) -> dict:
    """The 2-rank states in a loader of this world size (or of ``split``: ``rank``, ``world_size``), and a fresh
    run of that world size from epoch 1."""
    rank = split.get("rank", dist.get_rank())
    mid = torch.load(out / f"mid-rank{rank % 2}.pt", weights_only=True)
    end = torch.load(out / f"end-rank{rank % 2}.pt", weights_only=True)
    rest = make(data, **split)
    rest.load_state_dict(mid)
    resumed = make(data, **split)
    resumed.load_state_dict(end)
    fresh = make(data, **split)
    fresh.set_epoch(1)
    return {"rest": passes(rest, 1)[0], "resumed": passes(resumed, 2), "fresh": passes(fresh, 2), "len": len(resumed)}


def unalike(data: Path, out: Path) -> dict:
    """Ranks that load different states (per-rank files, one rank's older: a job killed between the ranks'
    saves), or a state only one rank refuses: what each rank's ``load_state_dict`` says."""
    rank = dist.get_rank()
    mid = torch.load(out / f"mid-rank{rank}.pt", weights_only=True)
    end = torch.load(out / f"end-rank{rank}.pt", weights_only=True)
    edited = {**mid, "shuffle": False} if rank == 1 else mid
    return {
        "older": refusal(make(data), end if rank == 1 else mid),
        "one_refuses": refusal(make(data), edited),
        "alike": refusal(make(data), mid),
    }


def accelerate(phase: str, data: Path, out: Path) -> dict:
    """A registered loader saved after 2 batches of epoch 0 (``run``), or loaded and skipped as Accelerate's
    docs do after ``load_state`` (``resume``): the batches of epochs 0 and 1 after the save."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(make(data, pipeline=PIPELINE))
    accelerator.register_for_checkpointing(loader)
    result: dict = {}
    if phase == "resume":
        accelerator.load_state(str(out / "accelerate"))
        try:
            accelerator.skip_first_batches(loader, 2)
            result["skip_first_batches"] = "accepted"
        except AttributeError as error:
            result["skip_first_batches"] = str(error)
        loader.skip(2)  # what the refusal points to: the state loaded already resumes there
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for i, (images, _) in enumerate(loader):
            seen.append(sample_ids(images))
            if phase == "run" and epoch == 0 and i + 1 == 2:
                accelerator.save_state(str(out / "accelerate"))
                seen = []
    result["after"] = seen
    return result


def lightning(phase: str, data: Path, out: Path) -> dict:
    """``run``: a fit of 2 epochs, and the same fit writing a checkpoint every 2 steps; ``resume``: the fit
    from each checkpoint written mid-epoch. What each fit saw: ``[epoch, batch index, ids]``."""
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen = []

        def training_step(self, batch, index):
            self.seen.append([self.current_epoch, index, sample_ids(batch[0])])
            return self.layer(torch.ones(1, 1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    def fit(ckpt_path=None, **settings):
        model = Recorder()
        trainer = L.Trainer(
            accelerator="cpu",
            devices=2,
            strategy="ddp",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            max_epochs=2,
            **settings,
        )
        loader = make(data, "d24", batch_size=4, pipeline=PIPELINE)  # 2 ranks x 3 batches of 4
        trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
        return model.seen

    checkpoints = out / "checkpoints"
    if phase == "run":
        every = L.pytorch.callbacks.ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=2, save_top_k=-1)
        return {
            "lightning_full": fit(enable_checkpointing=False),
            "lightning_saving": fit(default_root_dir=str(out), callbacks=[every]),
        }
    dist.barrier()
    resumed = {}
    for step in (2, 4):  # mid-epoch 0 (batch 2 of 3) and mid-epoch 1 (batch 1 of 3)
        (path,) = checkpoints.glob(f"*-step={step}.ckpt")
        resumed[str(step)] = fit(ckpt_path=str(path), enable_checkpointing=False)
    return {"lightning_resumed": resumed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phase", choices=["run", "resume", "other"], required=True)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(240, exit=True)
    dist.init_process_group("gloo")
    if args.phase == "run":
        result = run(args.data, args.out)
    elif args.phase == "resume":
        result = {"accelerate": accelerate("resume", args.data, args.out), **lightning("resume", args.data, args.out)}
        result["unalike"] = unalike(args.data, args.out)
    else:
        result = other(args.data, args.out)
        # world size 1 in the same launch (a launch of its own cost ~10 s of imports): every rank builds the
        # loaders of rank 0 of 1 (``rank=0, world_size=1`` given: what a job of one process infers), so that
        # whatever they exchange, they exchange alike; rank 0's record is the world of 1
        result["one"] = other(args.data, args.out, rank=0, world_size=1)
    name = f"{args.phase}{dist.get_world_size()}-rank{dist.get_rank()}.json"
    (args.out / name).write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
