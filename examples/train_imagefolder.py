"""A plain ImageFolder training script, and the same script on gpupipe.

The two loaders below are the only difference: the same ImageFolder and
Compose go to torch's DataLoader or to ``gpupipe.DataLoader``, and the
training loop is the one you already have. Run ``python examples/train_imagefolder.py DATA
--loader gpupipe`` (or ``--loader dataloader`` for the original).
"""

from __future__ import annotations

from typing import Callable, Optional

import _common
import torch
import torchvision
from torch import nn
from torchvision import transforms

import gpupipe

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def recipe(size: int) -> transforms.Compose:
    return transforms.Compose([
        transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(MEAN, STD),
    ])


def dataset(root: str, size: int) -> torchvision.datasets.ImageFolder:
    # The script's own dataset: torchvision ImageFolder + PIL transforms, the same for both loaders.
    return torchvision.datasets.ImageFolder(root, recipe(size))


def dataloader_version(root: str, size: int, batch_size: int) -> torch.utils.data.DataLoader:
    # Before: torch's DataLoader.
    return torch.utils.data.DataLoader(dataset(root, size), batch_size=batch_size, shuffle=True, num_workers=2)


def gpupipe_version(root: str, size: int, batch_size: int, backend: str = "auto",
                    on_error: str = "raise") -> gpupipe.Loader:
    # After: gpupipe's DataLoader, same arguments; the Compose is compiled to gpupipe ops, run by
    # DALI (GPU or CPU) or torchvision. A folder packed by `python -m gpupipe.pack` is read with the
    # same Compose (torchvision's ImageFolder cannot read it).
    if gpupipe.pack.is_packed(root):
        return gpupipe.DataLoader(root, batch_size=batch_size, shuffle=True, backend=backend, pipeline=recipe(size),
                                  on_error=on_error)
    return gpupipe.DataLoader(dataset(root, size), batch_size=batch_size, shuffle=True, num_workers=2,
                              backend=backend, on_error=on_error)


def train(loader, num_classes: int, epochs: int, device: str = "cpu",
          on_epoch: Optional[Callable[[int, float], None]] = None) -> list[float]:
    """The unchanged training loop; returns the mean loss of each epoch (also given to ``on_epoch`` as
    each epoch ends)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for epoch in range(epochs):
        total, count = 0.0, 0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(labels), count + len(labels)
        losses.append(total / count)
        if on_epoch is not None:
            on_epoch(epoch, losses[-1])
    return losses


def main() -> None:
    parser = _common.parser(__doc__)
    parser.add_argument("root", type=_common.image_folder, help="image folder: root/<class>/<image>")
    parser.add_argument("--loader", choices=["dataloader", "gpupipe"], default="gpupipe")
    _common.backend_option(parser)
    parser.add_argument("--epochs", type=_common.positive_int, default=3)
    parser.add_argument("--size", type=_common.positive_int, default=64)
    parser.add_argument("--batch-size", type=_common.positive_int, default=32)
    _common.on_error_option(parser)
    args = parser.parse_args()
    if args.loader == "dataloader" and gpupipe.pack.is_packed(args.root):  # torchvision: "Couldn't find any class"
        parser.error(f"argument root: {args.root} was packed by python -m gpupipe.pack, which --loader gpupipe reads "
                     "and torchvision's ImageFolder does not: pass --loader gpupipe, or the image folder it was "
                     "packed from")
    if args.loader == "dataloader":
        loader = dataloader_version(args.root, args.size, args.batch_size)
        num_classes = len(loader.dataset.classes)
    else:
        loader = gpupipe_version(args.root, args.size, args.batch_size, args.backend, args.on_error)
        num_classes = len(loader.classes)
        print(f"gpupipe backend: {loader.backend} ({loader.backend_reason})")
    train(_common.progress(loader, args.epochs * len(loader)), num_classes, args.epochs, _common.device(),
          on_epoch=lambda epoch, loss: print(_common.epoch_line(epoch, loss, loader), flush=True))


if __name__ == "__main__":
    _common.run(main)
