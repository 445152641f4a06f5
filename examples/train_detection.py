"""A detection training script written for a hand-made COCO Dataset + DataLoader, and the same script on
gpupipe: the loader lines are the only difference.

    python examples/train_detection.py IMAGES ANNOTATIONS.json --loader gpupipe   (or --loader dataloader)

The model is torchvision's ``ssdlite320_mobilenet_v3_large``, untrained (nothing is downloaded); the
recipe is torchvision's SSD one (photometric distortion, zoom out, IoU crop, flip, resize).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
        image = tv_tensors.Image(v2.functional.pil_to_tensor(Image.open(self.root / record["file_name"]).convert("RGB")))
        found = self.boxes[record["id"]]
        boxes = tv_tensors.BoundingBoxes(torch.tensor([b for b, _ in found], dtype=torch.float32).reshape(-1, 4),
                                         format="XYXY", canvas_size=image.shape[-2:])
        labels = torch.tensor([label for _, label in found], dtype=torch.int64)
        return self.transform(image, {"boxes": boxes, "labels": labels})


def dataloader_version(images: str, annotations: str, size: int, batch_size: int):
    return torch.utils.data.DataLoader(CocoBoxes(images, annotations, size), batch_size=batch_size, shuffle=True,
                                       num_workers=2, drop_last=True, collate_fn=lambda batch: tuple(zip(*batch)))


def gpupipe_version(images: str, annotations: str, size: int, batch_size: int, backend: str = "auto"):
    # After: the same recipe, boxes moved with the image on DALI (GPU or CPU) or torchvision; DetectionLists
    # hands the batches over as torchvision's detection models take them (label 0 is their background).
    source = gpupipe.CocoDetection(images, annotations)
    loader = gpupipe.loader(source, gpupipe.presets.detection_ssd(size), batch_size=batch_size, backend=backend,
                            drop_last=True)
    return gpupipe.DetectionLists(loader, label_offset=1)


def train(loader, num_classes: int, steps: int, device: str = "cpu") -> list:
    """The unchanged training loop; returns the loss of each step."""
    torch.manual_seed(0)
    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=num_classes + 1).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    while len(losses) < steps:
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
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("images")
    parser.add_argument("annotations")
    parser.add_argument("--loader", choices=["dataloader", "gpupipe"], default="gpupipe")
    parser.add_argument("--backend", default="auto", help="gpupipe backend")
    parser.add_argument("--classes", type=int, required=True, help="number of categories in the annotations")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    if args.loader == "dataloader":
        loader = dataloader_version(args.images, args.annotations, args.size, args.batch_size)
    else:
        loader = gpupipe_version(args.images, args.annotations, args.size, args.batch_size, args.backend)
        print(f"gpupipe backend: {loader.backend} ({loader.backend_reason})")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    losses = train(loader, args.classes, args.steps, device)
    for step in range(0, len(losses), 10):
        print(f"step {step}: loss {losses[step]:.3f}")
    print(f"last step: loss {losses[-1]:.3f}")
    if args.loader == "gpupipe":
        print(f"input pipeline: {loader.stats()}")


if __name__ == "__main__":
    main()
