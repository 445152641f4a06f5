"""A Lightning fit of ``test_redteam_resplit.py``, in a process of its own (Lightning's own launcher for 2 ranks).

``python redteam_resplit_worker.py FOLDER OUT DEVICES BATCH_SIZE MAX_STEPS [CKPT]``: fits a gpupipe loader (torchvision
backend, CPU, seed 3) on ``DEVICES`` processes (gloo), writing a checkpoint every ``MAX_STEPS`` steps with
``max_steps=MAX_STEPS`` (``save``), or resumes from ``CKPT`` with ``max_epochs=2`` (``resume``). ``fit(last=True)``
writes Lightning's ``last.ckpt`` when ``max_steps`` stops the fit instead, and resumes with ``max_steps=MAX_STEPS``
(Lightning then counts the stopped epoch done: its next epoch reads the rest of it). Rank r writes
``OUT/<phase>-<r>.json``: the sample ids per epoch, Lightning's batch indices per epoch and its
``num_training_batches``, or the error that ended the fit.
"""

import json
import sys
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


class Recorder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen, self.indices, self.lengths = {}, {}, {}

    def training_step(self, batch, index):
        epoch = str(self.current_epoch)
        self.seen.setdefault(epoch, []).extend(sample_ids(batch[0]))
        self.indices.setdefault(epoch, []).append(index)
        self.lengths[epoch] = self.trainer.num_training_batches
        return self.layer(torch.ones(1, 1)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class Data(L.LightningDataModule):
    def __init__(self, folder, batch_size):
        super().__init__()
        self.folder, self.batch_size = folder, batch_size

    def train_dataloader(self):
        return gpupipe.loader(
            self.folder, PIPELINE, batch_size=self.batch_size, backend="torchvision", device="cpu", seed=3
        )


def fit(folder, out, devices, batch_size, steps, ckpt=None, last=False):
    """One fit (see the module docstring); returns what rank 0 recorded."""
    module = Recorder()
    every = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=out / "ck", **({"save_last": True, "save_top_k": 0} if last else {"every_n_train_steps": steps})
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        default_root_dir=out,
        enable_checkpointing=ckpt is None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[every] if ckpt is None else [],
        **({"max_steps": steps} if ckpt is None or last else {"max_epochs": 2}),
    )
    result = {}
    try:
        trainer.fit(module, Data(folder, batch_size), ckpt_path=ckpt)
    except ValueError as error:
        result["error"] = str(error)
    result.update(seen=module.seen, indices=module.indices, lengths=module.lengths)
    phase = "save" if ckpt is None else "resume"
    (out / f"{phase}-{trainer.global_rank}.json").write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    devices, batch_size, steps = (int(value) for value in sys.argv[3:6])
    fit(folder, out, devices, batch_size, steps, sys.argv[6] if len(sys.argv) > 6 else None)
