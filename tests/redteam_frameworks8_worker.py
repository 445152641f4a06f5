"""Red team of the swap under real frameworks, part 8: 2 CPU ranks (gloo) under torchrun.

``--framework lightning``: one ``Trainer.fit`` (``strategy="ddp"``) reads, side by side, torch's own
``DataLoader`` and ``gpupipe.DataLoader`` over one ``ImageFolder`` with ``sampler=<list of indices>``
(train, reloaded every epoch, and validation, sanity check included; then again, built once); each rank
records the sample ids each loader gave it, per stage and epoch, and what was raised (nothing, for
transforms left alone). Then a
second fit with a progressive-resizing callback that edits ``Resize.size`` in ``on_train_epoch_start``
records what each rank raised (under torchrun Lightning kills no rank: each one's own exception is seen).

``--framework accelerate``: ``accelerator.prepare`` of both loaders; each rank records the sample ids per batch.
Each rank writes ``rank<rank>.json`` into ``--out``.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torchvision
from torchvision import transforms as T

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--folder", required=True)
parser.add_argument("--framework", choices=["lightning", "accelerate"], required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
#: 9 indices (odd: the ranks' shares are padded), one repeated, not in order.
INDICES = [22, 3, 3, 7, 0, 15, 9, 11, 4]
VAL_INDICES = [5, 1, 18, 2, 20]


def dataset():
    return torchvision.datasets.ImageFolder(args.folder, T.Compose([T.Resize((8, 8)), T.PILToTensor()]))


def both(data, indices):
    """``{"torch": ..., "ours": ...}``: the same arguments to torch's ``DataLoader`` and gpupipe's."""
    return {
        "torch": torch.utils.data.DataLoader(data, batch_size=2, sampler=indices),
        "ours": gpupipe.DataLoader(data, batch_size=2, sampler=indices, backend="torchvision", device="cpu"),
    }


def lightning() -> dict:
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen = {}

        def _record(self, stage, name, images):
            key = f"{stage}/{self.current_epoch}/{name}"
            self.seen.setdefault(key, []).append(sample_ids(images))

        def training_step(self, batch, index):
            for name, part in batch.items() if isinstance(batch, dict) else [("ours", batch)]:
                if part is not None:
                    self._record("train", name, part[0])
            return self.layer(torch.ones(1, 1)).sum()

        def validation_step(self, batch, index, dataloader_idx=0):
            stage = "sanity" if self.trainer.sanity_checking else "val"
            self._record(stage, ["torch", "ours"][dataloader_idx], batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(L.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.train_set, self.val_set = dataset(), dataset()

        def train_dataloader(self):
            return L.pytorch.utilities.CombinedLoader(both(self.train_set, INDICES), mode="max_size")

        def val_dataloader(self):
            return list(both(self.val_set, VAL_INDICES).values())

    class ProgressiveResize(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            if trainer.current_epoch == 1:
                trainer.datamodule.train_set.transform.transforms[0].size = [6, 6]

    class OursOnly(Data):
        def train_dataloader(self):
            return both(self.train_set, INDICES)["ours"]

        def val_dataloader(self):
            return []

    def trainer(**kwargs):
        return L.Trainer(
            accelerator="cpu",
            devices=2,
            strategy="ddp",
            max_epochs=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            **kwargs,
        )

    module = Recorder()
    result = {"error": None}
    fit = trainer(reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=-1)
    try:
        fit.fit(module, datamodule=Data())
    except Exception as err:  # noqa: BLE001 -- recorded: nothing must be raised here
        result["error"] = f"{type(err).__name__}: {err}"
    result["seen"], result["rank"] = module.seen, fit.global_rank
    kept = Recorder()  # the loaders built once, read again every epoch
    try:
        trainer(num_sanity_val_steps=-1).fit(kept, datamodule=Data())
        result["kept_error"] = None
    except Exception as err:  # noqa: BLE001 -- recorded: nothing must be raised here
        result["kept_error"] = f"{type(err).__name__}: {err}"
    result["kept_seen"] = sorted(kept.seen)
    resized = Recorder()
    try:
        trainer(callbacks=[ProgressiveResize()]).fit(resized, datamodule=OursOnly())
        result["resize_error"] = None
    except Exception as err:  # noqa: BLE001 -- recorded, per rank
        result["resize_error"] = f"{type(err).__name__}: {err}"
    result["resize_seen"] = resized.seen
    return result


def accelerate() -> dict:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loaders = both(dataset(), INDICES)
    model = torch.nn.Linear(1, 1)
    model, theirs, ours = accelerator.prepare(model, loaders["torch"], loaders["ours"])
    seen = {}
    for name, loader in (("torch", theirs), ("ours", ours)):
        for epoch in range(2):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            seen[f"train/{epoch}/{name}"] = [sample_ids(images) for images, _ in loader]
    return {"seen": seen, "rank": accelerator.process_index, "error": None}


record = lightning() if args.framework == "lightning" else accelerate()
Path(args.out, f"rank{os.environ['RANK']}.json").write_text(json.dumps(record))
