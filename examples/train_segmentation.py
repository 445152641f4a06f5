"""A segmentation training script written for a torchvision Dataset + DataLoader, and the same script on
gpupipe: the loader lines are the only difference.

    python examples/train_segmentation.py IMAGES MASKS --loader gpupipe   (or --loader dataloader)

IMAGES/<name>.jpg pairs with MASKS/<name>.png (8-bit class ids, or a palette PNG as Pascal VOC's);
255 marks pixels the loss ignores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import _common
import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision import tv_tensors
from torchvision.transforms import v2

import gpupipe

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
IGNORE = 255


class MaskFolder(torch.utils.data.Dataset):
    """Before: the usual hand-written Dataset, transforms.v2 moving the image and its tv_tensors.Mask together."""

    def __init__(self, images: str, masks: str, crop: int) -> None:
        self.images = sorted(Path(images).glob("*.*"))
        self.masks = Path(masks)
        self.transform = v2.Compose([
            v2.RandomResize(crop // 2, crop * 2), v2.RandomHorizontalFlip(),
            v2.RandomCrop(crop, pad_if_needed=True, fill={tv_tensors.Image: 0, tv_tensors.Mask: IGNORE}),
            v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64, "others": None}, scale=True),
            v2.Normalize(MEAN, STD),
        ])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i):
        image = tv_tensors.Image(v2.functional.pil_to_tensor(Image.open(self.images[i]).convert("RGB")))
        # np.asarray of a gray or palette PNG gives its class ids (a palette image's indices)
        mask = tv_tensors.Mask(torch.from_numpy(np.asarray(Image.open(self.masks / f"{self.images[i].stem}.png"),
                                                           dtype=np.int64)))
        return self.transform(image, mask)


def dataloader_version(images: str, masks: str, crop: int, batch_size: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(MaskFolder(images, masks, crop), batch_size=batch_size, shuffle=True,
                                       num_workers=2, drop_last=True)


def gpupipe_version(images: str, masks: str, crop: int, batch_size: int, backend: str = "auto",
                    on_error: str = "raise") -> gpupipe.Loader:
    # After: the same recipe; the mask gets the image's window, flip and padding, on DALI (GPU or CPU) or torchvision.
    source = gpupipe.SegmentationFolder(images, masks, ignore_index=IGNORE)
    return gpupipe.loader(source, gpupipe.presets.segmentation_train(crop=crop, base=crop), batch_size=batch_size,
                          backend=backend, drop_last=True, on_error=on_error)


def train(loader, num_classes: int, epochs: int, device: str = "cpu",
          on_epoch: Optional[Callable[[int, float], None]] = None) -> list:
    """The unchanged training loop; returns the mean loss of each epoch (also given to ``on_epoch`` as
    each epoch ends)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, num_classes, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for epoch in range(epochs):
        total, count = 0.0, 0
        for images, masks in loader:
            images, masks = images.to(device), masks.to(device)
            loss = nn.functional.cross_entropy(model(images), masks, ignore_index=IGNORE)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(masks), count + len(masks)
        losses.append(total / count)
        if on_epoch is not None:
            on_epoch(epoch, losses[-1])
    return losses


def main() -> None:
    parser = _common.parser(__doc__)
    parser.add_argument("images", type=_common.existing_folder, help="folder of images")
    parser.add_argument("masks", type=_common.existing_folder, help="folder of masks: <image name>.png")
    parser.add_argument("--loader", choices=["dataloader", "gpupipe"], default="gpupipe")
    _common.backend_option(parser)
    parser.add_argument("--classes", type=_common.positive_int, default=21, help="classes (mask values below it)")
    parser.add_argument("--epochs", type=_common.positive_int, default=3)
    parser.add_argument("--crop", type=_common.positive_int, default=128)
    parser.add_argument("--batch-size", type=_common.positive_int, default=8)
    _common.on_error_option(parser)
    args = parser.parse_args()
    if args.loader == "dataloader":
        loader = dataloader_version(args.images, args.masks, args.crop, args.batch_size)
    else:
        loader = gpupipe_version(args.images, args.masks, args.crop, args.batch_size, args.backend, args.on_error)
        print(f"gpupipe backend: {loader.backend} ({loader.backend_reason})")
    train(_common.progress(loader, args.epochs * len(loader)), args.classes, args.epochs, _common.device(),
          on_epoch=lambda epoch, loss: print(_common.epoch_line(epoch, loss, loader), flush=True))


if __name__ == "__main__":
    _common.run(main)
