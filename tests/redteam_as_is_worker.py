"""One rank of ``torchrun --nproc_per_node=2`` (gloo, CPU) for tests/test_redteam_as_is.py.

``lightning OUT``: Lightning fits and validates ``gpupipe.DataLoader(fallback="torchvision")`` over a dataset of
its own (sample ``i`` is ``(tensor([i]), i % 3)``), beside torch's ``DataLoader`` over the same dataset, in one
launch: ``use_distributed_sampler`` on and off, a generator seeded per rank, ``seed_everything``, a validation
loader. ``accelerate OUT``: an ``Accelerator`` with loaders passed to ``prepare()`` and not. Each rank writes
``rank<r>.json`` into ``OUT``: the sample ids each loader gave, per case and epoch, and ``len()`` values.
"""

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

import gpupipe

warnings.simplefilter("ignore", UserWarning)


class Numbered(Dataset):
    """Sample ``i`` is ``(tensor([i]), i % 3)``: a batch names its samples."""

    def __len__(self) -> int:
        return 21

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]), i % 3


def ids(batch) -> list[int]:
    return [int(v) for v in batch[0][:, 0]]


def ours(**kwargs):
    return gpupipe.DataLoader(Numbered(), batch_size=4, fallback="torchvision", device="cpu", **kwargs)


def lightning(out: Path) -> dict:
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: dict = {}
            self.val: list = []

        def training_step(self, batch, index):
            self.seen.setdefault(str(self.current_epoch), []).extend(ids(batch))
            return self.layer(torch.ones(1, 1)).sum()

        def validation_step(self, batch, index):
            self.val.extend(ids(batch))

        def predict_step(self, batch, index):
            self.val.extend(ids(batch))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    def trainer(**kwargs):
        settings = {"num_sanity_val_steps": 0, **kwargs}
        return L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **settings)

    record: dict = {}

    def fit(name, loader, **kwargs):
        model = Recorder()
        record[name + ":len_before"] = len(loader)
        trainer(**kwargs).fit(model, train_dataloaders=loader)
        record[name] = model.seen
        record[name + ":len_after"] = len(loader)

    fit("torch_shuffled", DataLoader(Numbered(), batch_size=4, shuffle=True))
    fit("ours_shuffled", ours(shuffle=True))
    fit("torch_unsharded", DataLoader(Numbered(), batch_size=4), use_distributed_sampler=False)
    fit("ours_unsharded", ours(), use_distributed_sampler=False)
    rank = int(os.environ["RANK"])
    per_rank = torch.Generator().manual_seed(100 + rank)
    fit("torch_generator", DataLoader(Numbered(), batch_size=4, shuffle=True, generator=per_rank))
    fit("ours_generator", ours(shuffle=True, generator=torch.Generator().manual_seed(100 + rank)))
    for name, loader in (("torch_val", DataLoader(Numbered(), batch_size=4)), ("ours_val", ours())):
        model = Recorder()
        trainer().validate(model, dataloaders=loader, verbose=False)
        record[name] = model.val
    for name, loader in (("torch_predict", DataLoader(Numbered(), batch_size=4)), ("ours_predict", ours())):
        model = Recorder()
        trainer().predict(model, dataloaders=loader, return_predictions=False)
        record[name] = model.val
    for name, make in (("torch_fit_val", lambda: DataLoader(Numbered(), batch_size=4)), ("ours_fit_val", ours)):
        model = Recorder()  # the sanity check reads 2 batches of the val loader, then every epoch validates
        trainer(num_sanity_val_steps=2).fit(model, train_dataloaders=make(), val_dataloaders=make())
        record[name] = model.val
    L.seed_everything(7)
    fit("ours_seeded", ours(shuffle=True))
    return record


def accelerate(out: Path) -> dict:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    record: dict = {}
    prepared = accelerator.prepare(ours())
    kept = ours()
    record["prepared"] = [i for batch in prepared for i in ids(batch)]
    record["kept"] = [i for batch in kept for i in ids(batch)]
    torch_prepared = accelerator.prepare(DataLoader(Numbered(), batch_size=4))
    record["torch_prepared"] = [i for batch in torch_prepared for i in ids(batch)]
    record["torch_kept"] = [i for batch in DataLoader(Numbered(), batch_size=4) for i in ids(batch)]
    rank = accelerator.process_index
    for name, loader in (
        ("torch_generator", accelerator.prepare(DataLoader(Numbered(), batch_size=4, shuffle=True,
                                                           generator=torch.Generator().manual_seed(100 + rank)))),
        ("ours_generator", accelerator.prepare(ours(shuffle=True, generator=torch.Generator().manual_seed(100)))),
        ("ours_generator_2", accelerator.prepare(ours(shuffle=True, generator=torch.Generator().manual_seed(200)))),
    ):
        record[name] = [i for batch in loader for i in ids(batch)]
    return record


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    record = lightning(out) if mode == "lightning" else accelerate(out)
    Path(out, f"rank{os.environ['RANK']}.json").write_text(json.dumps(record))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    # the records are written: skip the interpreter's teardown, which aborted now and then (1 launch in ~10 under
    # the full suite's load: "terminate called without an active exception", after both records were complete)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
