"""What RandAugment and random erasing would cost as batched torch ops on the GPU batch (``op_costs.py --torch``).

DALI's operators run these ops per sample: on the second H200 run RandAugment (n=2, m=9) cost 13.0 ms per batch
of 256 at 224 px in gpupipe's fused form and 12.5 ms written by hand with DALI's ``auto_aug``, random erasing
6.6 ms, against 15 ms for the whole decode and crop (``benchmarks/NOTES.md``). The candidate fix is to run the
policies after DALI's crop as batched torch ops, as MixUp and CutMix already run: each op one kernel over the
whole batch, with per-sample parameters as tensors. This module is the cost model of that fix, to measure before
building it into the library: the same passes the library would make, one level being

1. one ``grid_sample`` (the shears, translations and rotation; the identity matrix elsewhere, nearest, fill 0);
2. Color (a blend with the grey level) and Sharpness (a blend with PIL's smoothing kernel, a depthwise conv);
3. one per-channel ``x * A + B`` for Brightness, Contrast and AutoContrast (neutral 1 and 0);
4. posterize and solarize as integer operations (mask 255, threshold 256 elsewhere);
5. Equalize from a batched histogram (``scatter_add``), picked per sample by a flag;

and random erasing as one mask over the batch. The parameters are drawn as torchvision's RandAugment draws them
(op uniform over its 14, the magnitude's values for ``num_magnitude_bins=31``), the geometry approximately (the
matrices are built in normalised coordinates): the images are not compared with torchvision's, only the work
is the same kind and amount.
"""

from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn.functional as F

OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
       "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")
_GREY = (0.299, 0.587, 0.114)
_SMOOTH = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0


def draw(batch: int, magnitude: int = 9, bins: int = 31, generator: torch.Generator | None = None,
         op: torch.Tensor | None = None, sign: torch.Tensor | None = None) -> dict:
    """One level's per-sample parameters, neutral except for each sample's drawn op (CPU tensors, ``(B, ...)``);
    ``op`` (indices into ``OPS``) and ``sign`` (+-1.0) instead of the draws."""
    op = torch.randint(len(OPS), (batch,), generator=generator) if op is None else op
    sign = torch.where(torch.rand(batch, generator=generator) < 0.5, -1.0, 1.0) if sign is None else sign
    level = magnitude / (bins - 1)
    chosen = {name: op == k for k, name in enumerate(OPS)}
    theta = torch.eye(2, 3).repeat(batch, 1, 1)
    theta[:, 0, 1] = torch.where(chosen["ShearX"], 0.3 * level * sign, 0.0)
    theta[:, 1, 0] = torch.where(chosen["ShearY"], 0.3 * level * sign, 0.0)
    theta[:, 0, 2] = torch.where(chosen["TranslateX"], 2 * 150 / 331 * level * sign, 0.0)
    theta[:, 1, 2] = torch.where(chosen["TranslateY"], 2 * 150 / 331 * level * sign, 0.0)
    angle = torch.where(chosen["Rotate"], math.radians(30 * level) * sign, 0.0)
    rotation = torch.stack([torch.stack([angle.cos(), -angle.sin()], 1), torch.stack([angle.sin(), angle.cos()], 1)], 1)
    theta[:, :, :2] = rotation @ theta[:, :, :2]
    factor = 1.0 + 0.9 * level * sign
    bits = 8 - round(magnitude / ((bins - 1) / 4))  # torchvision's Posterize: the bits kept
    return {
        "theta": theta,
        "saturation": torch.where(chosen["Color"], factor, 1.0),
        "sharpness": torch.where(chosen["Sharpness"], factor, 1.0),
        "brightness": torch.where(chosen["Brightness"], factor, 1.0),
        "contrast": torch.where(chosen["Contrast"], factor, 1.0),
        "autocontrast": chosen["AutoContrast"],
        "mask": torch.where(chosen["Posterize"], 256 - 2 ** (8 - bits), 255),
        "threshold": torch.where(chosen["Solarize"], 255.0 * (1 - level), 256.0),
        "equalize": chosen["Equalize"],
    }


def _equalize(x: torch.Tensor) -> torch.Tensor:
    """Per image and channel histogram equalisation of a uint8 ``(B, C, H, W)`` batch."""
    b, c, h, w = x.shape
    flat = x.reshape(b * c, h * w).long()
    hist = torch.zeros(b * c, 256, device=x.device).scatter_add_(1, flat, torch.ones_like(flat, dtype=torch.float32))
    cdf = hist.cumsum(1)
    low = cdf.gather(1, (hist > 0).float().argmax(1, keepdim=True))  # the count up to the first level present
    lut = ((cdf - low) * 255 / (h * w - low).clamp(min=1)).clamp(0, 255).round().to(torch.uint8)
    return lut.gather(1, flat).reshape(b, c, h, w)


def level(x: torch.Tensor, p: dict) -> torch.Tensor:
    """One level of RandAugment on a uint8 ``(B, 3, H, W)`` batch with ``draw``'s parameters (on its device)."""
    b = x.shape[0]
    y = F.grid_sample(x.float(), F.affine_grid(p["theta"], list(x.shape), align_corners=False), mode="nearest",
                      padding_mode="zeros", align_corners=False)
    weights = torch.tensor(_GREY, device=x.device).view(1, 3, 1, 1)
    grey = (y * weights).sum(1, keepdim=True)
    y = grey + (y - grey) * p["saturation"].view(b, 1, 1, 1)
    blurred = F.conv2d(y.reshape(b * 3, 1, *y.shape[2:]), _SMOOTH.to(x.device).view(1, 1, 3, 3), padding=1)
    blurred = blurred.reshape(y.shape)
    y = blurred + (y - blurred) * p["sharpness"].view(b, 1, 1, 1)
    contrast = p["contrast"].view(b, 1, 1, 1)
    mean = (y * weights).sum(1, keepdim=True).mean((2, 3), keepdim=True)
    low, high = y.amin((2, 3), keepdim=True), y.amax((2, 3), keepdim=True)
    stretch = torch.where(p["autocontrast"].view(b, 1, 1, 1), 255 / (high - low).clamp(min=1), 1.0)
    scale = p["brightness"].view(b, 1, 1, 1) * contrast * stretch
    shift = (1 - contrast) * mean - torch.where(p["autocontrast"].view(b, 1, 1, 1), low * stretch, 0.0)
    z = (y * scale + shift).clamp(0, 255).round().to(torch.uint8)
    z = z & p["mask"].to(torch.uint8).view(b, 1, 1, 1)
    z = torch.where(z.float() >= p["threshold"].view(b, 1, 1, 1), 255 - z, z)
    return torch.where(p["equalize"].view(b, 1, 1, 1), _equalize(z), z)


def erase(x: torch.Tensor, top, left, height, width, fill: int = 0) -> torch.Tensor:
    """``x`` ``(B, C, H, W)`` with each sample's rectangle (``(B,)`` int tensors; height 0: none) set to ``fill``."""
    rows = torch.arange(x.shape[2], device=x.device).view(1, -1, 1)
    cols = torch.arange(x.shape[3], device=x.device).view(1, 1, -1)
    inside = ((rows >= top.view(-1, 1, 1)) & (rows < (top + height).view(-1, 1, 1))
              & (cols >= left.view(-1, 1, 1)) & (cols < (left + width).view(-1, 1, 1)))
    return x.masked_fill(inside.unsqueeze(1), fill)


def _ms(fn, device: torch.device, repeats: int) -> float:
    times = []
    for k in range(repeats + 2):  # two warm-up calls
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if k >= 2:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def costs(device: torch.device, batch: int, size: int, levels: int = 2, repeats: int = 10) -> dict[str, float]:
    """Median milliseconds per batch of RandAugment (``levels`` levels, parameters drawn and copied each batch)
    and of random erasing (p=0.5), on a uint8 ``(batch, 3, size, size)`` batch on ``device``."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=generator).to(device)

    def randaugment():
        x = images
        for _ in range(levels):
            x = level(x, {k: v.to(device, non_blocking=True) for k, v in draw(batch, generator=generator).items()})
        return x

    def erasing():
        on = torch.rand(batch, generator=generator) < 0.5
        height = (torch.randint(size // 8, size // 2, (batch,), generator=generator) * on).to(device)
        width = torch.randint(size // 8, size // 2, (batch,), generator=generator).to(device)
        top = torch.randint(0, size // 2, (batch,), generator=generator).to(device)
        left = torch.randint(0, size // 2, (batch,), generator=generator).to(device)
        return erase(images, top, left, height, width)

    return {"RandAugment": _ms(randaugment, device, repeats), "RandomErasing": _ms(erasing, device, repeats)}


def main(argv: list[str] | None = None) -> int:
    """Prints both costs on this machine's GPU (or its CPU), milliseconds per batch."""
    import argparse

    parser = argparse.ArgumentParser(description="RandAugment (n=2, m=9) and random erasing as batched torch ops: "
                                                 "milliseconds per batch (the cost model of op_costs.py --torch)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    for name, ms in costs(torch.device(args.device), args.batch, args.size, repeats=args.repeats).items():
        print(f"{name:14s} {ms:8.2f} ms per batch of {args.batch} at {args.size} px on {args.device}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
