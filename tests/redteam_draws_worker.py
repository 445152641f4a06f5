"""Two ranks under ``torchrun`` (gloo, CPU) for tests/test_redteam_draws.py: epochs drawn by weight and a folder
dataset's ``target_transform`` on their own, under Accelerate (``prepare``) and under Lightning (``Trainer``,
ddp, ``use_distributed_sampler=True``), all in one launch (a launch costs ~10 s of imports on the 2-core VM).

``python -m torch.distributed.run --nproc_per_node=2 redteam_draws_worker.py FOLDER OUT BACKEND...``: each rank
writes ``OUT/rank<r>.json``: per case, the sample ids (``helpers.sample_ids``) and the labels it read.
"""

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch.utils.data import DistributedSampler, WeightedRandomSampler
from torchvision import transforms as T

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

warnings.simplefilter("ignore")
FOLDER, OUT, BACKENDS = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
SMALL = T.Compose([T.CenterCrop(8), T.PILToTensor()])
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
WEIGHTS = [float(i % 4) for i in range(22)]  # samples 0, 4, 8, ... never drawn


def halved(y):
    return float(y) / 2  # float64 labels, as torch's default_collate makes them


def read(loader, epochs=1):
    got = {"ids": [], "labels": [], "batches": []}
    for _ in range(epochs):
        for images, labels in loader:
            got["ids"] += sample_ids(images)
            got["labels"] += labels.tolist()
            got["batches"].append(len(labels))
            got["dtype"] = str(labels.dtype)
    return got


dist.init_process_group("gloo")
rank = dist.get_rank()
result = {"draws": {}}
for backend in BACKENDS:  # gpupipe.loader(weights=): 9 draws over 2 ranks, padded or not
    for even, drop in ((True, False), (False, False), (True, True)):
        loader = gpupipe.loader(
            FOLDER,
            PIPELINE,
            weights=WEIGHTS,
            num_samples=9,
            batch_size=2,
            seed=4,
            backend=backend,
            device="cpu",
            even_batches=even,
            drop_last=drop,
        )
        result["draws"][f"{backend} even={even} drop_last={drop}"] = {"len": len(loader), **read(loader)}

dataset = torchvision.datasets.ImageFolder(FOLDER, SMALL, target_transform=halved)
sampler = DistributedSampler(dataset, shuffle=True, seed=3)
result["distributed"] = read(gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, device="cpu"))
result["distributed_torch"] = read(torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler))

from accelerate import Accelerator  # noqa: E402

accelerator = Accelerator(cpu=True)
weighted = WeightedRandomSampler(WEIGHTS, 10, generator=torch.Generator().manual_seed(6))
prepared = accelerator.prepare(gpupipe.DataLoader(dataset, batch_size=2, sampler=weighted, device="cpu"))
result["accelerate"] = {**read(prepared), "seed": prepared.seed, "len": len(prepared)}

import lightning as L  # noqa: E402


class Recorder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = {}

    def training_step(self, batch, index):
        images, labels = batch
        seen = self.seen.setdefault(str(self.current_epoch), {"ids": [], "labels": []})
        seen["ids"] += sample_ids(images)
        seen["labels"] += labels.tolist()
        return self.layer(torch.ones(1, 1)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


lightning = gpupipe.DataLoader(dataset, batch_size=2, sampler=WeightedRandomSampler(WEIGHTS, 10), device="cpu")
model = Recorder()
trainer = L.Trainer(
    accelerator="cpu",
    devices=2,
    strategy="ddp",
    max_epochs=2,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(model, train_dataloaders=lightning)
result["lightning"] = {"seen": model.seen, "seed": lightning.seed}
(OUT / f"rank{rank}.json").write_text(json.dumps(result))
dist.destroy_process_group()
