"""Issue 33: the deterministic recipe (Resize 256 + CenterCrop 224 + ToTensor + Normalize, v1 and v2),
compiled to gpupipe, gives per image what the user's own Compose gives on the PIL image.

Held to the decode tolerance (:data:`helpers.DECODE_TOLERANCE`, mean absolute difference in uint8
levels): on the CPU both backends decode with libjpeg-turbo, and what remains is the antialiased resize.
"""

import numpy as np
import pytest
import torch
import torchvision
from torchvision import transforms as T1
from torchvision.transforms import v2 as T2

import gpupipe
from helpers import CPU_BACKENDS, DECODE_TOLERANCE, textured_image, write_image

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: Image sizes; the last five once differed by a pixel (the longer side of Resize: torchvision truncates;
#: the crop's offset: torchvision rounds halves to even).
SIZES = [(300, 401), (299, 449), (256, 320), (448, 256), (300, 403), (375, 500), (257, 300), (331, 260), (280, 375)]


def recipe(version):
    if version == "v1":
        return T1.Compose([T1.Resize(256), T1.CenterCrop(224), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    return T2.Compose([T2.ToImage(), T2.Resize(256), T2.CenterCrop(224), T2.ToDtype(torch.float32, scale=True),
                       T2.Normalize(MEAN, STD)])


def levels(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """Mean absolute difference of two normalised images, in uint8 levels."""
    std = torch.tensor(STD).view(3, 1, 1)
    return float(((ours - theirs) * std * 255).abs().mean())


def differences(tmp_path, sizes, version, backend):
    rng = np.random.default_rng(3)
    for i, (h, w) in enumerate(sizes):
        write_image(tmp_path / "data" / "c" / f"{i}.jpg", textured_image(rng, h, w))
    dataset = torchvision.datasets.ImageFolder(str(tmp_path / "data"), recipe(version))
    loader = gpupipe.loader(dataset, batch_size=len(sizes), shuffle=False, device="cpu", backend=backend)
    images, labels = next(iter(loader))
    assert images.dtype == torch.float32 and images.shape == (len(sizes), 3, 224, 224)
    return [levels(images[i], dataset[i][0]) for i in range(len(sizes))]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_deterministic_recipe_equals_the_users_compose_per_image(tmp_path, version, backend):
    for size, diff in zip(SIZES, differences(tmp_path, SIZES, version, backend)):
        assert diff <= DECODE_TOLERANCE["cpu"], (size, diff)
