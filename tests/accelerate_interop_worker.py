"""Accelerate with loaders that now have a ``dataset`` (issue 33), run by ``accelerate_worker.py`` in its
torchrun launch (one launch for tests/test_frameworks.py and tests/test_interop_frameworks.py).

``gpupipe.DataLoader`` over a torchvision ``ImageFolder`` with a ``DistributedSampler``, and a loader
built from a path, both through ``accelerator.prepare``. Each rank records: the prepared objects' types,
what ``accelerator.skip_first_batches`` did (it must fail at once, before building anything, pointing to
``loader.skip(n)``), the batches of ``loader.skip(1)``, and ``len(loader.dataset)`` / ``len(loader.sampler)``.
"""

import torch
import torchvision
from torch.utils.data import DistributedSampler
from torchvision import transforms as T

import gpupipe
from helpers import sample_ids


def interop(accelerator, folder: str) -> dict:
    """What the rank saw (see the module's docstring), for ``interop-rank<rank>.json``."""
    dataset = torchvision.datasets.ImageFolder(folder, T.Compose([T.CenterCrop(8), T.PILToTensor()]))
    sampler = DistributedSampler(dataset, shuffle=True, seed=3)
    swapped = gpupipe.DataLoader(dataset, batch_size=4, sampler=sampler, backend="torchvision", device="cpu")
    by_path = gpupipe.loader(folder, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
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
    return result
