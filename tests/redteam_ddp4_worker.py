"""Workers of ``test_redteam_ddp4.py``: Lightning fits in this process, Accelerate under torchrun (gloo, CPU).

``fit(...)`` is a Lightning fit on one CPU device (``limit_train_batches``, ``val_check_interval``,
``accumulate_grad_batches``, ``limit_val_batches`` as asked), writing checkpoints as asked, or resumed from ``ckpt``;
it returns what it saw. ``python -m torch.distributed.run --nproc_per_node=W redteam_ddp4_worker.py FOLDER OUT
PHASE...`` runs these phases in one launch, in order: ``save`` (a loader registered for checkpointing, saved with
``save_state`` into ``OUT/state-W`` after 2 batches of epoch 0 in batches of 2), ``resume-V`` (the state ``V``
processes saved, loaded with ``load_state`` on this world size in batches of 3, then what Accelerate's docs do:
``skip_first_batches``, else ``loader.skip(2)``; the rest of epoch 0 and epoch 1), ``probe`` (sharding under the real
process group). Each rank writes ``OUT/<phase>-<world>-<rank>.json``. Lightning is imported by ``fit`` only (the
launches do without it), and every loader decodes in its process (``num_threads=0``: no worker forked per loader).
"""

import functools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def make(folder, batch_size, **kw):
    # num_threads=0: decoded in the main process (no DataLoader worker forked per loader; the order and the
    # states do not depend on it)
    return gpupipe.loader(
        folder, PIPELINE, batch_size=batch_size, backend="torchvision", device="cpu", seed=3, num_threads=0, **kw
    )


@functools.cache
def lightning_classes():
    """``(L, Recorder, Data)``: Lightning imported only where a fit runs (not in the Accelerate launches, where
    its import alone costs seconds of CPU per process)."""
    import lightning as L

    class Recorder(L.LightningModule):
        """Records the training samples per epoch, Lightning's batch indices, and every validation pass's samples."""

        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen, self.indices, self.val, self.lengths = {}, {}, [], {}

        def training_step(self, batch, index):
            epoch = str(self.current_epoch)
            self.seen.setdefault(epoch, []).extend(sample_ids(batch[0]))
            self.indices.setdefault(epoch, []).append(index)
            self.lengths[epoch] = self.trainer.num_training_batches
            return self.layer(torch.ones(1, 1)).sum()

        def on_validation_epoch_start(self):
            self.val.append([])

        def validation_step(self, batch, index):
            self.val[-1].extend(sample_ids(batch[0]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(L.LightningDataModule):
        def __init__(self, folder, batch_size, val):
            super().__init__()
            self.folder, self.batch_size, self.val = folder, batch_size, val

        def train_dataloader(self):
            return make(self.folder, self.batch_size)

        def val_dataloader(self):
            return make(self.folder, 2, shuffle=False) if self.val else []

    return L, Recorder, Data


def fit(folder, out, batch_size, steps=None, ckpt=None, *, epochs=2, val=False, checkpoint=None, **trainer):
    """One fit on one CPU device: with ``steps``, saving every ``steps`` optimizer steps up to ``max_steps=steps``
    (no ``ckpt``), or resumed from ``ckpt`` for ``epochs`` epochs; without, ``epochs`` epochs saving as
    ``checkpoint`` says (``ModelCheckpoint``'s arguments). ``trainer``: more ``Trainer`` arguments. Returns what it
    saw, and the error that ended it (a ``ValueError``)."""
    L, Recorder, Data = lightning_classes()
    module = Recorder()
    if checkpoint is None and steps is not None:
        checkpoint = {"every_n_train_steps": steps}
    saving = ckpt is None and checkpoint is not None
    callbacks = [L.pytorch.callbacks.ModelCheckpoint(dirpath=Path(out) / "ck", save_top_k=-1, **(checkpoint or {}))]
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        default_root_dir=out,
        enable_checkpointing=saving,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks if saving else [],
        **({"max_steps": steps} if ckpt is None and steps is not None else {"max_epochs": epochs}),
        **trainer,
    )
    result = {}
    try:
        trainer.fit(module, Data(folder, batch_size, val), ckpt_path=ckpt)
    except ValueError as error:
        result["error"] = str(error)
    return {**result, "seen": module.seen, "indices": module.indices, "val": module.val, "lengths": module.lengths}


def accelerate_phase(folder, out, phase, saved_world=None):
    """``save``: 2 batches of epoch 0 read, then ``save_state``; ``resume``: ``load_state`` of what ``saved_world``
    processes saved, ``skip_first_batches`` (refused), ``loader.skip(2)`` (the steps the saved run counted), then the
    rest of epoch 0 and epoch 1. Returns what this rank saw."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loader = make(folder, 2 if phase == "save" else 3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.register_for_checkpointing(loader)
    world = accelerator.num_processes
    result = {"rank": accelerator.process_index, "world": world}
    if phase == "save":
        it = iter(loader)
        result["before"] = [i for _ in range(2) for i in sample_ids(next(it)[0])]
        accelerator.save_state(str(Path(out, f"state-{world}")))
        result["state"] = loader.state_dict()
        it.close()
        return result
    accelerator.load_state(str(Path(out, f"state-{saved_world}")))
    try:
        accelerator.skip_first_batches(loader, 2)
        result["skip_first_batches"] = "accepted"
    except AttributeError as error:
        result["skip_first_batches"] = str(error)
    try:
        loader.skip(2)
        result["skip"] = "accepted"
    except ValueError as error:
        result["skip"] = str(error)
    result["len"] = len(loader)
    result["rest"], result["gathered"] = [], []
    for images, _ in loader:  # as an evaluation of the rest would gather it
        result["rest"].append(sample_ids(images))
        result["gathered"] += accelerator.gather_for_metrics(torch.tensor(sample_ids(images))).tolist()
    result["next"] = [sample_ids(images) for images, _ in loader]
    result["next_len"] = len(loader)
    return result


def probe(folder, out):
    """Sharding under the real process group (Accelerate's): a dataset of one image on 2 ranks, exact evaluation
    gathered with ``gather_for_metrics`` and with ``all_gather_object``, epochs without ``set_epoch`` and with the
    same ``set_epoch`` twice. Returns what this rank saw."""
    import torch.distributed as dist
    from accelerate import Accelerator
    from helpers import flat_folder

    accelerator = Accelerator(cpu=True)
    one = Path(out, "one")
    if accelerator.is_main_process:
        flat_folder(one, 1, classes=1)
    accelerator.wait_for_everyone()
    result = {"rank": accelerator.process_index, "world": accelerator.num_processes, "one": {}}
    for name, kw in {"even": {}, "uneven": {"even_batches": False}, "drop_last": {"drop_last": True}}.items():
        try:
            loader = accelerator.prepare(make(one, 2, **kw))
            result["one"][name] = [len(loader), [sample_ids(images) for images, _ in loader]]
        except ValueError as error:
            result["one"][name] = str(error)
    val = accelerator.prepare(make(folder, 4, shuffle=False))
    result["gathered"] = [
        i for images, _ in val for i in accelerator.gather_for_metrics(torch.tensor(sample_ids(images))).tolist()
    ]
    exact = make(folder, 4, shuffle=False, even_batches=False)
    mine = [i for images, _ in exact for i in sample_ids(images)]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    result["exact"] = [i for ids in everyone for i in ids]
    train = accelerator.prepare(make(folder, 4))
    result["epochs"] = [[i for images, _ in train for i in sample_ids(images)] for _ in range(2)]
    train.set_epoch(5)
    first = [i for images, _ in train for i in sample_ids(images)]
    train.set_epoch(5)
    result["twice"] = [first, [i for images, _ in train for i in sample_ids(images)]]
    return result


if __name__ == "__main__":
    import torch.distributed as dist

    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    for name in sys.argv[3:]:
        kind, _, world = name.partition("-")
        got = probe(folder, out) if kind == "probe" else accelerate_phase(folder, out, kind, int(world or 0))
        Path(out, f"{name}-{got['world']}-{got['rank']}.json").write_text(json.dumps(got))
        if dist.is_initialized():
            dist.barrier()
