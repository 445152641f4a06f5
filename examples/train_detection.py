"""A detection training script written for a hand-made COCO Dataset + DataLoader, and the same script on
gpupipe: the loader lines are the only difference.

    python examples/train_detection.py IMAGES ANNOTATIONS.json --loader gpupipe   (or --loader dataloader)

The model is torchvision's ``ssdlite320_mobilenet_v3_large``, untrained (nothing is downloaded); the
recipe is torchvision's SSD one (photometric distortion, zoom out, IoU crop, flip, resize).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

import _common
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.models.detection import ssdlite320_mobilenet_v3_large
from torchvision.transforms import v2

import gpupipe


class CocoBoxes(torch.utils.data.Dataset):
    """Before: the usual hand-written Dataset, transforms.v2 moving tv_tensors.BoundingBoxes with the image."""

    def __init__(self, images: str, annotations: str, size: int) -> None:
        data = json.loads(Path(annotations).read_text())
        label_of = {c["id"]: k + 1 for k, c in enumerate(sorted(data["categories"], key=lambda c: c["id"]))}
        self.records = data["images"]
        self.boxes = {r["id"]: [] for r in self.records}
        for ann in data["annotations"]:
            if not ann.get("iscrowd", 0):
                x, y, w, h = ann["bbox"]
                self.boxes[ann["image_id"]].append(([x, y, x + w, y + h], label_of[ann["category_id"]]))
        self.root = Path(images)
        self.transform = v2.Compose([
            v2.RandomPhotometricDistort(p=1), v2.RandomZoomOut(fill={tv_tensors.Image: (124, 116, 104), "others": 0}),
            v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((size, size)), v2.SanitizeBoundingBoxes(),
            v2.ToDtype(torch.float32, scale=True),
        ])

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):
        record = self.records[i]
        pixels = Image.open(self.root / record["file_name"]).convert("RGB")
        image = tv_tensors.Image(v2.functional.pil_to_tensor(pixels))
        found = self.boxes[record["id"]]
        boxes = tv_tensors.BoundingBoxes(torch.tensor([b for b, _ in found], dtype=torch.float32).reshape(-1, 4),
                                         format="XYXY", canvas_size=image.shape[-2:])
        labels = torch.tensor([label for _, label in found], dtype=torch.int64)
        return self.transform(image, {"boxes": boxes, "labels": labels})


def dataloader_version(images: str, annotations: str, size: int, batch_size: int):
    return torch.utils.data.DataLoader(CocoBoxes(images, annotations, size), batch_size=batch_size, shuffle=True,
                                       num_workers=2, drop_last=True, collate_fn=lambda batch: tuple(zip(*batch)))


def gpupipe_version(images: str, annotations: str, size: int, batch_size: int, backend: str = "auto",
                    on_error: str = "raise"):
    # After: the same recipe, boxes moved with the image on DALI (GPU or CPU) or torchvision; DetectionLists
    # hands the batches over as torchvision's detection models take them (label 0 is their background).
    source = gpupipe.CocoDetection(images, annotations)
    loader = gpupipe.loader(source, gpupipe.presets.detection_ssd(size), batch_size=batch_size, backend=backend,
                            drop_last=True, on_error=on_error)
    return gpupipe.DetectionLists(loader, label_offset=1)


def train(loader, num_classes: int, steps: int, device: str = "cpu",
          on_epoch: Optional[Callable[[int, list], None]] = None) -> list:
    """The unchanged training loop; returns the loss of each step (``on_epoch`` gets each epoch's
    losses as it ends, and the last epoch's when ``steps`` stops it early)."""
    torch.manual_seed(0)
    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=num_classes + 1).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses: list = []
    epoch = 0
    while len(losses) < steps:
        first = len(losses)
        for images, targets in loader:
            images = [image.to(device) for image in images]
            targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
            loss = sum(model(images, targets).values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
        if len(losses) == first:
            raise ValueError("the loader gave no batch: fewer images than --batch-size")
        if on_epoch is not None:
            on_epoch(epoch, losses[first:])
        epoch += 1
    return losses


def category_count(annotations: str) -> int:
    """The number of categories in a COCO annotation file (an image or other binary file passed for it, whose
    bytes are no UTF-8, is named as not one: ``UnicodeDecodeError`` is a ``ValueError``, as ``JSONDecodeError``)."""
    try:
        return len(json.loads(Path(annotations).read_text(encoding="utf-8"))["categories"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{annotations}: not a COCO annotation file ({type(err).__name__}: {err})") from None


def main() -> None:
    parser = _common.parser(__doc__)
    parser.add_argument("images", type=_common.existing_folder, help="folder of images")
    parser.add_argument("annotations", type=_common.existing_file, help="COCO annotation file (JSON)")
    parser.add_argument("--loader", choices=["dataloader", "gpupipe"], default="gpupipe")
    _common.backend_option(parser)
    parser.add_argument("--classes", type=_common.positive_int,
                        help="number of categories (default: as many as the annotations name)")
    parser.add_argument("--steps", type=_common.positive_int, default=20,
                        help="training steps (the default finishes within 3 minutes on 2 quiet CPU cores; raise "
                             "it for a real run)")
    parser.add_argument("--size", type=_common.positive_int, default=320,
                        help="image side after the recipe's resize (the model's own input size is 320)")
    parser.add_argument("--batch-size", type=_common.positive_int, default=8)
    _common.on_error_option(parser)
    args = parser.parse_args()
    classes = args.classes or category_count(args.annotations)
    if args.loader == "dataloader":
        loader = dataloader_version(args.images, args.annotations, args.size, args.batch_size)
    else:
        loader = gpupipe_version(args.images, args.annotations, args.size, args.batch_size, args.backend,
                                 args.on_error)
        print(f"gpupipe backend: {loader.backend} ({loader.backend_reason})")

    def report(epoch: int, losses: list) -> None:
        extra = f" (mean of {len(losses)} steps, last {losses[-1]:.3f})"
        print(_common.epoch_line(epoch, sum(losses) / len(losses), loader, extra), flush=True)

    train(_common.progress(loader, args.steps), classes, args.steps, _common.device(), on_epoch=report)


if __name__ == "__main__":
    _common.run(main)
