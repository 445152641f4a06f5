"""Review of the round of 2026-12-06 (b): what the lead's read of the helpers' change found."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import gpupipe


def _class_folders(root, ext: str, mode: str = "I;16") -> None:
    for name in ("cells", "debris"):
        (root / name).mkdir(parents=True)
        for i in range(2):
            if ext in (".tif", ".tiff"):
                Image.fromarray(np.full((6, 6), 300 * (i + 1), np.uint16)).save(root / name / f"{i}{ext}")
            else:
                (root / name / f"{i}{ext}").write_bytes(b"not read")


def test_a_folder_of_only_tiffs_says_the_packer_converts_them(tmp_path):
    # Microscopy data: every image a 16-bit TIFF; the error said only "no images (extensions .jpg, ...)".
    _class_folders(tmp_path / "data", ".tif")
    with pytest.raises(ValueError) as caught:
        gpupipe.ImageFolder(tmp_path / "data")
    message = str(caught.value)
    assert "4 images in formats the loader does not read" in message
    assert "cells/0.tif" in message and "python -m gpupipe.pack" in message


def test_a_folder_of_only_heic_photos_names_one_and_the_conversion(tmp_path):
    _class_folders(tmp_path / "data", ".heic")
    with pytest.raises(ValueError) as caught:
        gpupipe.ImageFolder(tmp_path / "data")
    message = str(caught.value)
    assert "4 files in formats neither torchvision nor gpupipe reads" in message
    assert "cells/0.heic" in message and "convert them to JPEG or PNG" in message


def test_the_examples_offer_every_backend_the_loaders_take():
    # The examples' --backend choices (one line naming --backend for "gpu") are the registry's public names.
    import sys
    from pathlib import Path

    from gpupipe.backends.registry import REGISTRY

    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    try:
        import _common
    finally:
        sys.path.pop(0)
    assert set(_common.BACKEND_CHOICES) == {"auto"} | {name for name, info in REGISTRY.items() if not info.internal}


def test_packing_to_s3_without_its_file_system_says_so_before_packing(tmp_path):
    # Before, every image was packed into the staging folder and only the upload said `pip install 'gpupipe[s3]'`.
    import subprocess
    import sys

    from helpers import make_image_folder

    src = make_image_folder(tmp_path / "src", {"cat": 2, "dog": 2})
    stage = tmp_path / "stage"
    code = (
        "import sys; sys.modules['s3fs'] = None; from gpupipe.pack.__main__ import main; "
        f"sys.exit(main([{str(src)!r}, 's3://bucket/packed', '--staging', {str(stage)!r}, '-q']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "pip install 'gpupipe[s3]'" in proc.stderr
    assert not stage.exists() or not any(stage.rglob("*.tar"))


def test_single_device_lightning_keeps_an_unshuffled_training_loader_in_order(tmp_path):
    # Lightning shuffles a torch DataLoader's share only where it shards it (a DistributedSampler); on one device
    # a training loader with shuffle=False reads in order every epoch, gpupipe's as torch's.
    import lightning as L
    import torch
    import torchvision
    import torchvision.transforms as T

    from helpers import flat_folder, sample_ids

    data = torchvision.datasets.ImageFolder(
        str(flat_folder(tmp_path / "folder", 9)), T.Compose([T.Resize((8, 8)), T.PILToTensor()])
    )
    loaders = {
        "torch": torch.utils.data.DataLoader(data, batch_size=3),
        "ours": gpupipe.DataLoader(data, batch_size=3, backend="torchvision", device="cpu"),
    }
    seen: dict = {}

    class Recorder(L.LightningModule):
        def __init__(self, name):
            super().__init__()
            self.layer, self.name = torch.nn.Linear(1, 1), name

        def training_step(self, batch, index):
            seen.setdefault((self.name, self.current_epoch), []).extend(sample_ids(batch[0]))
            return self.layer(torch.ones(1, 1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    for name, loader in loaders.items():
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        trainer.fit(Recorder(name), loader)
    in_order = [i for c in range(3) for i in range(c, 9, 3)]  # ImageFolder's order: class by class
    assert seen[("torch", 0)] == seen[("torch", 1)] == in_order
    assert seen[("ours", 0)] == seen[("ours", 1)] == in_order
