"""Red team: masks, boxes and multi-label targets through the real Lightning and Accelerate (2 ranks, gloo, CPU).

Started by torchrun (``tests/test_redteam_frameworks.py``): Lightning's DDP takes torchrun's ranks, so one
launch serves Lightning and then Accelerate (a launch costs ~10 s of imports on the 2-core VM).

``--phase run``: a Lightning fit of 2 epochs over four train loaders at once (a dict: segmentation, detection,
multi-label and ``DetectionLists``), checkpointed after the first batch of epoch 1, with a detection loader for
exact evaluation (``even_batches=False``, a file that fails to decode) and a segmentation one for validation;
then the Accelerate checks: ``prepare`` of every kind, epochs without ``set_epoch``, ``gather_for_metrics``
of masks, multi-hot and (padded across ranks) boxes, accumulation at the epoch's end, ``skip_first_batches``
on a ``DetectionLists``, ``prepare_data_loader``, ``save_state`` / ``load_state`` of a ``DetectionLists``.
``--phase resume``: the Lightning fit again, in new processes, from the checkpoint; then a fit whose
``even_batches=False`` validation loader of one sample leaves rank 1 without a batch (``empty``).
Each rank writes ``<phase>-rank<r>.json``: per loader and epoch, each sample as ``[id, target]``
(``describe``) and the batches' forms (dtypes, shapes, devices).
"""

import argparse
import faulthandler
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
BATCH = 4


def threads(backend: str) -> int:
    """One DALI thread; torchvision in the main process (no DataLoader worker forked per loader)."""
    return 0 if backend == "torchvision" else 1


def form(value) -> str:
    """A batch's structure, dtypes, shapes and devices as one string (a tensor, or lists / tuples / dicts of)."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype)[6:]}{tuple(value.shape)}@{value.device.type}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {form(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = sorted({form(v) for v in value})
        return f"{type(value).__name__}[{len(value)}]<{' | '.join(inner)}>"
    return type(value).__name__


def describe(images, targets) -> list:
    """``[[id, target], ...]`` per sample: a mask as nested lists, boxes as ``[label, x1, y1, x2, y2]`` rows
    (padding left out, rounded to 3 decimals), a multi-hot row as a list, a label as an int."""
    if isinstance(images, list):  # DetectionLists: a list of images, a list of {"boxes", "labels"}
        ids = sample_ids(torch.stack(images))
        rows = [(t["boxes"], t["labels"]) for t in targets]
    else:
        ids = sample_ids(images)
        if isinstance(targets, dict):
            rows = [(b[lab >= 0], lab[lab >= 0]) for b, lab in zip(targets["boxes"], targets["labels"])]
        else:
            return [[i, t.tolist()] for i, t in zip(ids, targets)]
    return [
        [i, [[int(c), *[round(float(v), 3) for v in box]] for box, c in zip(b, lab)]] for i, (b, lab) in zip(ids, rows)
    ]


def loaders(data: Path, backend: str, only: tuple = ("seg", "det", "ml", "lists")) -> dict:
    """The train loaders: one per target kind (``lists``: ``DetectionLists`` over a detection loader), or only
    those of ``only`` (a loader built and never read costs a scan and a pipeline)."""

    def make(source, **kwargs):
        return gpupipe.loader(
            source, PIPELINE, batch_size=BATCH, backend=backend, device="cpu", seed=5, num_threads=threads(backend),
            **kwargs,
        )

    kinds = {
        "seg": lambda: make(gpupipe.SegmentationFolder(data / "seg" / "images", data / "seg" / "masks")),
        "det": lambda: make(gpupipe.CocoDetection(data / "flat" / "class_0", data / "ann.json")),
        "ml": lambda: make(gpupipe.FileList(data / "tags.txt")),
        "lists": lambda: gpupipe.DetectionLists(
            make(gpupipe.CocoDetection(data / "flat" / "class_0", data / "ann.json"))
        ),
    }
    return {name: kinds[name]() for name in only}


def val_loaders(data: Path, backend: str) -> list:
    """Exact evaluation of boxes (a file fails to decode: left out; 3 batches on rank 0, 2 on rank 1), then
    masks (even batches)."""
    exact = gpupipe.loader(
        gpupipe.CocoDetection(data / "val", data / "val.json"),
        PIPELINE,
        batch_size=3,
        backend=backend,
        device="cpu",
        num_threads=threads(backend),
        shuffle=False,
        even_batches=False,
        on_error="skip",
    )
    masks = gpupipe.loader(
        gpupipe.SegmentationFolder(data / "seg" / "images", data / "seg" / "masks"),
        PIPELINE,
        batch_size=BATCH,
        backend=backend,
        device="cpu",
        num_threads=threads(backend),
        shuffle=False,
    )
    return [exact, masks]


def quiet_trainer(**settings):
    """A Lightning Trainer of 2 CPU processes (ddp under torchrun), without logs, checkpoints or sanity steps."""
    import lightning as L

    return L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **settings)


def lightning(phase: str, data: Path, out: Path, backend: str) -> dict:
    """A Lightning fit (``run``: 2 epochs, checkpoint after epoch 1's first batch; ``resume``: from it, then
    ``empty``: a fit whose exact-evaluation loader of one sample leaves rank 1 without a batch)."""
    import lightning as L

    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen, self.forms, self.val = {}, {}, {}

        def training_step(self, batch, index):
            for name, (images, targets) in batch.items():
                self.seen.setdefault(name, {}).setdefault(str(self.current_epoch), []).extend(describe(images, targets))
                self.forms.setdefault(name, set()).add(form((images, targets)))
            return self.layer(torch.ones(1, 1)).sum()

        def validation_step(self, batch, index, dataloader_idx=0):
            images, targets = batch
            self.val.setdefault(str(dataloader_idx), {}).setdefault(str(self.current_epoch), []).extend(
                describe(images, targets)
            )
            self.forms.setdefault(f"val{dataloader_idx}", set()).add(form(batch))
            if dataloader_idx == 0:  # summed over the ranks once, at the epoch's end (ranks differ in batches)
                self.log(
                    "val_seen",
                    float(len(images)),
                    reduce_fx="sum",
                    sync_dist=True,
                    add_dataloader_idx=False,
                    batch_size=len(images),
                )

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            self.train = loaders(data, backend)
            return self.train

        def val_dataloader(self):
            self.vals = val_loaders(data, backend)
            return self.vals

    class SaveMidEpoch(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, index):
            if trainer.current_epoch == 1 and index == 0:
                trainer.save_checkpoint(out / "mid.ckpt")

    class Empty(Data):
        def val_dataloader(self):
            self.vals = [
                gpupipe.loader(
                    data / "one",
                    PIPELINE,
                    batch_size=BATCH,
                    backend=backend,
                    device="cpu",
                    num_threads=threads(backend),
                    shuffle=False,
                    even_batches=False,
                )
            ]
            return self.vals

    if phase == "empty":  # Lightning skips its loop on a rank without batches: its epoch-end reduction then hangs
        model, datamodule = Recorder(), Empty()
        model.allow_zero_length_dataloader_with_multiple_devices = True  # else Lightning raises on rank 1 only
        trainer = quiet_trainer(max_epochs=1)
        try:
            trainer.fit(model, datamodule=datamodule)
            return {"empty": "no error"}
        except (ValueError, RuntimeError) as err:
            return {"empty": f"{type(err).__name__}: {err}"}
    model, datamodule = Recorder(), Data()
    trainer = quiet_trainer(max_epochs=2, callbacks=[SaveMidEpoch()] if phase == "run" else [])
    trainer.fit(model, datamodule=datamodule, ckpt_path=out / "mid.ckpt" if phase == "resume" else None)
    return {
        "seen": model.seen,
        "val": model.val,
        "forms": {k: sorted(v) for k, v in model.forms.items()},
        "lens": {name: len(loader) for name, loader in datamodule.train.items()},
        "val_lens": [len(loader) for loader in datamodule.vals],
        "rank": trainer.global_rank,
        "val_seen": float(trainer.callback_metrics["val_seen"]),
        "dropped": datamodule.vals[0].stats().dropped,
    }


def accelerate(data: Path, out: Path, backend: str) -> dict:
    """The Accelerate checks, in processes whose group Lightning set up."""
    from accelerate import Accelerator
    from accelerate.utils import gather_object

    before = loaders(data, backend)  # before Accelerator(): the share is taken when iteration starts
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    names = list(before)
    model, optimizer, *prepared = accelerator.prepare(model, optimizer, *before.values())
    train = dict(zip(names, prepared))
    result = {
        "same": [train[n] is before[n] for n in names],
        "lens": {n: len(train[n]) for n in names},
        "epochs": {n: [] for n in names},
        "forms": {},
    }
    for _ in range(2):  # no set_epoch: each pass reads the next epoch (and every rank alike)
        for name, loader in train.items():
            seen = []
            for images, targets in loader:
                seen.extend(describe(images, targets))
                result["forms"].setdefault(name, set()).add(form((images, targets)))
            result["epochs"][name].append(seen)
    result["forms"] = {k: sorted(v) for k, v in result["forms"].items()}

    syncs = []  # 2 batches per rank, 3 per optimizer step: the epoch's last batch still steps
    for _ in train["seg"]:
        with accelerator.accumulate(model):
            syncs.append(accelerator.sync_gradients)
    result["syncs"] = syncs

    gathered = {}  # 13 samples on 2 ranks: one padded repeat, which gather_for_metrics drops
    for name in ("seg", "ml", "det"):
        rows = []
        evaluation = accelerator.prepare(loaders(data, backend, only=(name,))[name])
        evaluation.set_epoch(0)
        for images, targets in evaluation:
            if isinstance(targets, dict):  # N (boxes per image) differs between the ranks' batches
                targets = accelerator.pad_across_processes(targets, dim=1, pad_index=-1)
            images, targets = accelerator.gather_for_metrics((images, targets))
            rows.extend(describe(images, targets))
        gathered[name] = rows
    result["gathered"] = gathered

    exact = []  # exact evaluation of boxes: each sample once, the broken one left out; the ranks differ in
    for images, targets in gpupipe.DetectionLists(val_loaders(data, backend)[0]):  # batches: one gather after
        exact.extend(describe(images, targets))
    result["exact"] = gather_object(exact)

    lists = train["lists"]
    try:
        skipped = accelerator.skip_first_batches(lists, 1)
        result["accelerate_skip"] = f"built {type(skipped).__name__}"
    except (AttributeError, ValueError) as err:  # refused (an AttributeError), or failed building the DataLoader
        result["accelerate_skip"] = f"{type(err).__name__}: {err}"
    try:  # prepare_data_loader (unlike prepare) rebuilds any loader over its dataset, sharded again
        rebuilt = accelerator.prepare_data_loader(train["seg"])
        result["prepare_data_loader"] = f"built {type(rebuilt).__name__} of {len(rebuilt)} batches"
    except (AttributeError, ValueError) as err:
        result["prepare_data_loader"] = f"{type(err).__name__}: {err}"
    accelerator.register_for_checkpointing(lists)
    lists.set_epoch(4)
    it = iter(lists)
    next(it)
    accelerator.save_state(str(out / "accelerate-state"))
    result["rest"] = [describe(*batch) for batch in it]
    accelerator.wait_for_everyone()
    accelerator.load_state(str(out / "accelerate-state"))
    result["resumed"] = [describe(*batch) for batch in lists]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phase", choices=["run", "resume"], required=True)
    parser.add_argument("--backend", required=True)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(150, exit=True)  # a hang shows every thread's stack, then ends the rank
    result = {"lightning": lightning(args.phase, args.data, args.out, args.backend)}
    if args.phase == "run":
        result["accelerate"] = accelerate(args.data, args.out, args.backend)
    else:
        result["empty"] = lightning("empty", args.data, args.out, args.backend)["empty"]
    rank = result["lightning"]["rank"]
    (args.out / f"{args.phase}-rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
