"""Run under torchrun (2 ranks, gloo) by tests/test_redteam_ddp_resume.py, in two launches.

``--phase run`` records, per rank, what the loaders give: the sample ids of every batch for a matrix of
awkward sizes (``coverage``, torchvision in the main process: the order is decided in Python, the same on
every backend), a pass only rank 0 started (``peek``), a loader built while rank 1 comes late (``waits``),
and, for every backend of ``--backends``, epochs read with random crops, flips, MixUp and CutMix (a digest of
each batch's images and targets), saving states mid-epoch, at an epoch's end and after a recovered bad file
(``torch.save`` and JSON). ``--phase resume`` is a new job: it loads those
states (rank 0's also into rank 1, and each rank's into the other), records what follows, and records the
rest of a mid-epoch state read on another batch size and world size, and the refusals of states that do not fit. With ``--lightning DIR``, the same processes then record, in ``DIR``, a
Lightning fit that ``max_steps`` stops mid-epoch (``run``) and its resume (``resume``): Lightning's DDP takes
torchrun's ranks and the process group already there, so no launch of Lightning's own (a launch costs ~10 s of
imports on the 2-core VM). (``gpupipe.DataLoader`` without a sampler under Lightning and Accelerate:
tests/test_redteam_as_is.py.)
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PLAIN = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
RANDOM = [gpupipe.Decode(), gpupipe.RandomResizedCrop((8, 8)), gpupipe.HorizontalFlip(p=0.5),
          gpupipe.MixUp(alpha=0.4), gpupipe.CutMix(alpha=1.0)]
SEED = 7


def digest(images: torch.Tensor, targets: torch.Tensor) -> str:
    """One batch, bit for bit."""
    h = hashlib.sha256(images.contiguous().numpy().tobytes())
    h.update(targets.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def ids_of(loader):
    return [sample_ids(images) for images, _ in loader]


def coverage(data: Path) -> dict:
    """``{case: {"len", "epochs": [ids of epoch 0, epoch 1], "forgotten": [pass 1, pass 2]}}``."""
    out = {}
    for name in ("d13", "d7"):
        for drop_last in (False, True):
            for shuffle in (False, True):
                for bs in (2, 3):
                    loader = gpupipe.loader(data / name, PLAIN, batch_size=bs, backend="torchvision", device="cpu",
                                            num_threads=0, shuffle=shuffle, drop_last=drop_last, seed=SEED)
                    epochs = []
                    for epoch in (0, 1):
                        loader.set_epoch(epoch)
                        epochs.append(ids_of(loader))
                    again = gpupipe.loader(data / name, PLAIN, batch_size=bs, backend="torchvision",
                                           device="cpu", num_threads=0, shuffle=shuffle, drop_last=drop_last,
                                           seed=SEED)
                    forgotten = [ids_of(again), ids_of(again)]  # no set_epoch at all
                    out[f"{name}-{drop_last}-{shuffle}-{bs}"] = {"len": len(loader), "epochs": epochs,
                                                                "forgotten": forgotten}
    return out


def peek(data: Path) -> dict:
    """Rank 0 peeks at one batch, then both ranks read a pass, without and with ``set_epoch``:
    ``{"plain"|"set_epoch": {"ids", "warnings"}}``."""
    import warnings

    out = {}
    for mode in ("plain", "set_epoch"):
        loader = gpupipe.loader(data / "d13", PLAIN, batch_size=2, backend="torchvision", device="cpu",
                                num_threads=0, seed=SEED)
        if dist.get_rank() == 0:
            next(iter(loader))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if mode == "set_epoch":
                loader.set_epoch(0)
            ids = sum(ids_of(loader), [])
        out[mode] = {"ids": ids, "warnings": [str(w.message) for w in caught]}
    return out


def waits(data: Path) -> dict:
    """Rank 0 builds a loader of the group's share while rank 1 comes 4 s late: ``{"notices", "len"}``, the
    "waits for" messages gpupipe logged on this rank and the loader's length."""
    import logging
    import time

    from gpupipe.loading import agreement

    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("gpupipe")
    logger.addHandler(handler)
    notice, agreement.WAIT_NOTICE_S = agreement.WAIT_NOTICE_S, 1.0
    try:
        dist.barrier()
        if dist.get_rank() == 1:
            time.sleep(4)
        loader = gpupipe.loader(data / "d7", PLAIN, batch_size=2, backend="torchvision", device="cpu", num_threads=0)
    finally:
        agreement.WAIT_NOTICE_S = notice
        logger.removeHandler(handler)
    return {"notices": [m for m in records if "waits for" in m], "len": len(loader)}


def make(data: Path, backend: str, name: str = "d13", **kwargs):
    kwargs.setdefault("batch_size", 2)
    kwargs.setdefault("seed", SEED)
    # torchvision decodes in the main process (no DataLoader worker forked per loader: the batches do not
    # depend on it); DALI on one thread
    return gpupipe.loader(data / name, kwargs.pop("pipeline", RANDOM), backend=backend, device="cpu",
                          num_threads=0 if backend == "torchvision" else 1, **kwargs)


def save(state: dict, path: Path) -> None:
    torch.save(state, path.with_suffix(".pt"))
    path.with_suffix(".json").write_text(json.dumps(state))


def run(data: Path, backend: str, out: Path) -> dict:
    """Three epochs (epoch 1 saved after batch 2, epoch 0 saved at its end), and the bad folder."""
    rank = dist.get_rank()
    loader = make(data, backend)
    epochs = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        batches = []
        for i, (images, targets) in enumerate(loader):
            batches.append(digest(images, targets))
            if epoch == 1 and i + 1 == 2:
                save(loader.state_dict(), out / f"mid-rank{rank}")
            if epoch == 0 and i + 1 == len(loader):
                save(loader.state_dict(), out / f"last-rank{rank}")  # after the last batch, inside the loop
        epochs.append(batches)
        if epoch == 0:
            save(loader.state_dict(), out / f"end-rank{rank}")  # after the loop
    bad = make(data, backend, "bad", pipeline=PLAIN, on_error="skip")
    batches = []
    for i, (images, _) in enumerate(bad):
        batches.append(sample_ids(images))
        if i + 1 == 1:
            save(bad.state_dict(), out / f"bad-rank{rank}")
    exact = make(data, backend, "bad", pipeline=PLAIN, on_error="skip", even_batches=False, batch_size=4)
    seen = sum(ids_of(exact), [])
    everyone = [None, None]
    dist.all_gather_object(everyone, seen)
    return {"epochs": epochs, "len": len(loader), "bad": batches, "bad_len": len(bad),
            "exact": everyone, "exact_skipped": [Path(s.path).name for s in exact.skipped]}


def refusal(loader, state) -> str:
    try:
        loader.load_state_dict(state)
    except ValueError as error:
        return str(error)
    return "accepted"


def resume(data: Path, backend: str, out: Path) -> dict:
    """The states of ``run`` loaded in new processes, and states that must be refused."""
    rank = dist.get_rank()
    result = {}
    for kind in ("mid", "last", "end"):
        for form in ("pt", "json"):
            path = out / f"{kind}-rank{rank}.{form}"
            state = torch.load(path, weights_only=True) if form == "pt" else json.loads(path.read_text())
            loader = make(data, backend)
            loader.load_state_dict(state)
            result[f"{kind}-{form}"] = [[digest(x, y) for x, y in loader] for _ in range(2)]  # rest + next epoch
    other = torch.load(out / f"mid-rank{1 - rank}.pt", weights_only=True)
    loader = make(data, backend)
    loader.load_state_dict(other)
    result["mid-other-rank"] = [digest(x, y) for x, y in loader]
    loader = make(data, backend, "bad", pipeline=PLAIN, on_error="skip")
    loader.load_state_dict(torch.load(out / f"bad-rank{rank}.pt", weights_only=True))
    result["bad"] = ids_of(loader)
    state = torch.load(out / f"mid-rank{rank}.pt", weights_only=True)
    result["refused"] = {
        "seed": refusal(make(data, backend, seed=SEED + 1), state),
        "dataset": refusal(make(data, backend, "d7"), state),
        "renamed": refusal(make(data, backend, "d13b"), state),
    }
    whole = make(data, backend, pipeline=PLAIN)
    whole.set_epoch(1)
    result["resplit"] = {"read": sum(ids_of(whole)[:2], [])}  # this rank's 2 batches before the mid state
    for name, changed in (("batch_size", {"batch_size": 3}), ("world_size", {"rank": 0, "world_size": 1})):
        rest = make(data, backend, pipeline=PLAIN, **changed)
        rest.load_state_dict(state)  # the rest of epoch 1, split as this loader splits
        result["resplit"][name] = sum(ids_of(rest), [])
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phase", required=True, choices=["run", "resume"])
    parser.add_argument("--backends", default="torchvision")
    parser.add_argument("--lightning", type=Path, metavar="DIR", help="then the Lightning fits, into DIR")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {"rank": rank}
    if args.phase == "run":
        result["coverage"] = coverage(args.data)
        result["peek"] = peek(args.data)
        result["waits"] = waits(args.data)
    for backend in args.backends.split(","):
        out = args.out / backend
        out.mkdir(exist_ok=True)
        result[backend] = (run if args.phase == "run" else resume)(args.data, backend, out)
    (args.out / f"{args.phase}-rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    if args.lightning is not None:
        lightning(args.phase, args.data, args.lightning)
        dist.barrier()
    dist.destroy_process_group()


def lightning(phase: str, data: Path, out: Path) -> None:
    """``run``: a fit of ``max_steps=6`` (the uninterrupted run), then one of ``max_steps=4`` that stops mid-epoch 1
    and writes Lightning's default end-of-epoch checkpoint; ``resume``: ``max_steps=6`` from it."""
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

    def fit(name, loader, ckpt_path=None, **settings):
        model = Recorder()
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False,
                            enable_model_summary=False, **settings)
        trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
        result = {"rank": trainer.global_rank, "seen": model.seen, "len": len(loader)}
        (out / f"{name}-rank{trainer.global_rank}.json").write_text(json.dumps(result))

    def train():  # 24 samples: 2 ranks x 3 batches of 4
        return gpupipe.loader(data / "d24", PLAIN, batch_size=4, backend="torchvision", device="cpu",
                              num_threads=0, seed=SEED)

    checkpoints = out / "checkpoints"
    if phase == "run":
        fit("lightning-full", train(), max_steps=6, enable_checkpointing=False)
        fit("lightning-stopped", train(), max_steps=4, default_root_dir=str(out),
            callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=checkpoints)])
    else:
        (saved,) = checkpoints.glob("*.ckpt")
        fit("lightning-resumed", train(), ckpt_path=str(saved), max_steps=6, enable_checkpointing=False)


if __name__ == "__main__":
    main()
