"""Workers of ``test_redteam_ddp5.py``: 2 CPU ranks (gloo) under one real ``torchrun`` launch.

``python -m torch.distributed.run --nproc_per_node=2 redteam_ddp5_worker.py FOLDER OUT`` runs, in order:

- ``same``: one Lightning fit (``strategy="ddp"``, 2 epochs, the whole sanity check) whose ``train_dataloader()``
  and ``val_dataloader()`` return the same loader object (a quick overfit check), once with torch's
  ``DataLoader`` and once with ``gpupipe.DataLoader``, same arguments; then again with ``val_check_interval=0.5``
  (validation mid-epoch, over the loader the training pass is reading);
- ``sampler``: ``gpupipe.DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=..., seed=...))`` beside
  torch's, with ``set_epoch`` per epoch, under the plain process group.

Each rank writes ``OUT/rank<rank>.json``: per scenario, the sample ids of every batch by ``stage/epoch`` and what
was raised.
"""

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

FOLDER, OUT = Path(sys.argv[1]), Path(sys.argv[2])


def dataset():
    return torchvision.datasets.ImageFolder(str(FOLDER), T.Compose([T.Resize((8, 8)), T.PILToTensor()]))


def make(kind, data, **kw):
    if kind == "torch":
        return torch.utils.data.DataLoader(data, batch_size=2, **kw)
    return gpupipe.DataLoader(data, batch_size=2, backend="torchvision", device="cpu", **kw)


def fit(kind, ckpt=None, save=None, predict=False, every=None, drop_last=False, **trainer_kw):
    """A Lightning DDP fit whose train and val loaders are one object; what each rank read, by stage/epoch."""
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen = {}

        def _record(self, stage, images):
            self.seen.setdefault(f"{stage}/{self.current_epoch}", []).append(sample_ids(images))

        def training_step(self, batch, index):
            self._record("train", batch[0])
            return self.layer(torch.ones(1, 1)).sum()

        def predict_step(self, batch, index):
            self._record("predict", batch[0])

        def validation_step(self, batch, index):
            self._record("sanity" if self.trainer.sanity_checking else "val", batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(L.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.loader = make(kind, dataset(), drop_last=drop_last)

        def train_dataloader(self):
            return self.loader

        def val_dataloader(self):
            return self.loader

    module = Recorder()
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=save, save_last=True, every_n_train_steps=every)
    saving = {"callbacks": [checkpoint]} if save else {}
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=bool(save),
        **saving,
        enable_progress_bar=False,
        enable_model_summary=False,
        **{"max_epochs": 2, "num_sanity_val_steps": -1, **trainer_kw},
    )
    result = {"error": None}
    try:
        data = Data()
        trainer.fit(module, datamodule=data, ckpt_path=ckpt)
        if predict:  # then predict over the loader trained on
            trainer.predict(module, dataloaders=data.loader, return_predictions=False)
    except Exception as err:  # noqa: BLE001 -- recorded: the test says what must (not) be raised
        result["error"] = f"{type(err).__name__}: {err}"
    result["seen"] = module.seen
    return result


def same():
    got = {}
    for kind in ("torch", "ours"):
        got[kind] = fit(kind, predict=True)
        got[f"{kind}/mid"] = fit(kind, val_check_interval=0.5)
        save = OUT / f"ck-{kind}"  # validation cut short (limit_val_batches), a checkpoint at the epoch's end
        got[f"{kind}/saved"] = fit(kind, save=str(save), max_epochs=1, limit_val_batches=1)
        got[f"{kind}/resumed"] = fit(kind, ckpt=str(save / "last.ckpt"), limit_val_batches=1)
        got[f"{kind}/drop_last"] = fit(kind, drop_last=True, max_epochs=1, num_sanity_val_steps=0)
        if (
            kind == "ours"
        ):  # Lightning's overfit_batches rebuilds the loader as a torch DataLoader: refused by Lightning
            got[f"{kind}/overfit"] = fit(kind, max_epochs=1, num_sanity_val_steps=0, overfit_batches=2)
        save = OUT / f"ck-{kind}-steps"  # stopped mid-epoch by max_steps, its checkpoint resumed (sanity check first)
        got[f"{kind}/stopped"] = fit(kind, save=str(save), every=2, max_steps=2, num_sanity_val_steps=2)
        got[f"{kind}/continued"] = fit(kind, ckpt=str(save / "last.ckpt"), num_sanity_val_steps=2)
    return got


def sampler():
    """An explicit ``DistributedSampler`` per epoch (``set_epoch``), torch's loader beside gpupipe's."""
    from torch.utils.data import DistributedSampler

    got = {}
    data = dataset()
    for shuffle, seed, drop_last in ((True, 7, False), (False, 0, False), (True, 3, True)):
        name = f"{shuffle}/{seed}/{drop_last}"
        for kind in ("torch", "ours"):
            chosen = DistributedSampler(data, shuffle=shuffle, seed=seed, drop_last=drop_last)
            loader = make(kind, data, sampler=chosen, drop_last=drop_last)
            for epoch in range(2):
                chosen.set_epoch(epoch)
                got[f"{name}/{kind}/{epoch}"] = [sample_ids(images) for images, _ in loader]
                got[f"{name}/indices/{epoch}"] = list(chosen)
    return got


if __name__ == "__main__":
    import torch.distributed as dist

    record = {"same": same()}
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    record["sampler"] = sampler()
    Path(OUT, f"rank{os.environ['RANK']}.json").write_text(json.dumps(record))
