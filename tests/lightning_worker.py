"""Lightning DDP on 2 CPU processes, started by Lightning's own launcher (``python lightning_worker.py ...``).

Two gpupipe loaders feed one ``LightningDataModule`` (a dict of loaders):
``before``, built at the top of the script, before the ``Trainer`` exists
(in rank 0 even before the other process is started), and ``after``, built
anew in ``train_dataloader()`` every epoch (``reload_dataloaders_every_n_epochs=1``:
Lightning tells the new loader its epoch through ``loader.sampler.set_epoch``).
Each rank writes the sample ids it trained on, per epoch and loader, and each loader's threads.
``--backends a,b`` fits each backend in turn (a ``Trainer`` each, in the same processes, into ``OUT/<backend>``;
every ``before`` loader is built at the top): one launch for them all (a launch costs ~10 s of imports on the
2-core VM).

``--mode save`` trains one loader for 2 epochs and checkpoints after the first batch of epoch 1;
``--mode resume`` resumes from that checkpoint (``ckpt_path``), as a restarted job would.
``--then-save BACKEND`` runs ``--mode save`` on BACKEND into ``OUT/save`` after the fits, in the same processes
(another ``Trainer``): one launch fewer (tests/test_frameworks.py). ``save`` and ``resume`` use the first backend
and write into ``OUT``.
"""

import argparse
import json
import sys
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe import env  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--folder", required=True)
parser.add_argument("--backends", required=True, help="comma-separated")
parser.add_argument("--out", required=True)
parser.add_argument("--mode", choices=["fit", "save", "resume"], default="fit")
parser.add_argument("--then-save", metavar="BACKEND")
args = parser.parse_args()
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
BACKENDS = args.backends.split(",")


def make(backend):
    return gpupipe.loader(args.folder, PIPELINE, batch_size=4, backend=backend, device="cpu", seed=3)


BEFORE = {backend: make(backend) for backend in BACKENDS}


class Recorder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = {}

    def training_step(self, batch, index):
        for name, (images, _) in (batch.items() if isinstance(batch, dict) else [("single", batch)]):
            self.seen.setdefault(name, {}).setdefault(str(self.current_epoch), []).extend(sample_ids(images))
        return self.layer(torch.ones(1, 1)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class Data(L.LightningDataModule):
    def __init__(self, backend):
        super().__init__()
        self.backend = backend

    def train_dataloader(self):
        self.after = make(self.backend)
        return {"before": BEFORE[self.backend], "after": self.after}


class Single(Data):
    def train_dataloader(self):
        return make(self.backend)


class SaveMidEpoch(L.Callback):
    def __init__(self, out):
        self.out = out

    def on_train_batch_end(self, trainer, module, outputs, batch, index):
        if trainer.current_epoch == 1 and index == 0:
            trainer.save_checkpoint(Path(self.out, "mid.ckpt"))


def run(mode, backend, out):
    """One ``Trainer.fit`` of ``mode`` on ``backend``; each rank writes ``OUT/rank<rank>.json``."""
    model, data = Recorder(), Data(backend) if mode == "fit" else Single(backend)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        reload_dataloaders_every_n_epochs=1 if mode == "fit" else 0,
                        callbacks=[SaveMidEpoch(out)] if mode == "save" else [])
    trainer.fit(model, datamodule=data, ckpt_path=Path(out, "mid.ckpt") if mode == "resume" else None)
    result = {"rank": trainer.global_rank, "seen": model.seen, "cores": env.cores()}
    if mode == "fit":
        before = BEFORE[backend]
        result["threads"] = {"before": before.num_threads, "after": data.after.num_threads}
        result["world"] = {"before": [before.rank, before.world_size],
                           "after": [data.after.rank, data.after.world_size]}
    Path(out, f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if args.mode == "fit":
    for name in BACKENDS:
        Path(args.out, name).mkdir(exist_ok=True)
        run("fit", name, Path(args.out, name))
else:
    run(args.mode, BACKENDS[0], args.out)
if args.then_save:
    Path(args.out, "save").mkdir(exist_ok=True)
    run("save", args.then_save, Path(args.out, "save"))
