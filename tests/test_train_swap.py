"""A DataLoader training script switches to gpupipe by its loader lines alone, and learns."""


import numpy as np
import pytest

from helpers import CPU_BACKENDS, load_example, textured_image, write_image

example = load_example("train_imagefolder")


@pytest.fixture
def tinted_folder(tmp_path):
    """Two classes told apart by colour: reddish and bluish textures."""
    rng = np.random.default_rng(0)
    for name, tint in (("blue", (0.4, 0.6, 1.3)), ("red", (1.3, 0.6, 0.4))):
        for i in range(24):
            write_image(tmp_path / "data" / name / f"{i}.jpg", textured_image(rng, 40, 48, tint))
    return tmp_path / "data"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_swapped_loader_trains(tinted_folder, backend):
    loader = example.gpupipe_version(str(tinted_folder), size=32, batch_size=8, backend=backend)
    assert loader.classes == ["blue", "red"]
    losses = example.train(loader, num_classes=2, epochs=4)
    assert losses[-1] < 0.6 * losses[0], losses


def test_original_dataloader_script_still_runs(tinted_folder):
    loader = example.dataloader_version(str(tinted_folder), size=32, batch_size=8)
    losses = example.train(loader, num_classes=2, epochs=4)
    assert losses[-1] < 0.6 * losses[0], losses
