"""Accelerate on 2 CPU processes (gloo) with loaders that now have a ``dataset`` (issue 33).

``gpupipe.DataLoader`` over a torchvision ``ImageFolder`` with a ``DistributedSampler``, and a loader
built from a path, both through ``accelerator.prepare``. Each rank writes: the prepared objects' types,
what ``accelerator.skip_first_batches`` did (it must fail at once, before building anything, pointing to
``loader.skip(n)``), the batches of ``loader.skip(1)``, and ``len(loader.dataset)`` / ``len(loader.sampler)``.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torchvision
from accelerate import Accelerator
from torch.utils.data import DistributedSampler
from torchvision import transforms as T

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--folder", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

accelerator = Accelerator(cpu=True)
dataset = torchvision.datasets.ImageFolder(args.folder, T.Compose([T.CenterCrop(8), T.PILToTensor()]))
sampler = DistributedSampler(dataset, shuffle=True, seed=3)
swapped = gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, backend="torchvision", device="cpu")
by_path = gpupipe.loader(args.folder, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
                         batch_size=4, backend="torchvision", device="cpu", seed=3)
model = torch.nn.Linear(1, 1)
model, swapped, by_path = accelerator.prepare(model, swapped, by_path)
result = {"types": [type(swapped).__name__, type(by_path).__name__], "skips": []}
for loader in (swapped, by_path):
    try:
        skipped = accelerator.skip_first_batches(loader, 1)
        result["skips"].append({"type": f"{type(skipped).__module__}.{type(skipped).__name__}"})
    except gpupipe.Error as err:
        result["skips"].append({"error": str(err), "attribute_error": isinstance(err, AttributeError)})
    full = [sample_ids(images) for images, _ in loader]
    loader.set_epoch(0)
    result.setdefault("full", []).append(full)
    result.setdefault("skipped", []).append([sample_ids(images) for images, _ in loader.skip(1)])
    result.setdefault("lengths", []).append([len(loader.dataset), len(loader.sampler), len(loader)])
Path(args.out, f"rank{accelerator.process_index}.json").write_text(json.dumps(result))
