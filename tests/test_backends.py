"""Backend choice: 'auto', missing packages, and a light ``import gpupipe``."""

import builtins
import logging
import subprocess
import sys

import pytest
import torch

import gpupipe
from gpupipe import backends
from conftest import HAS_DALI


def test_import_gpupipe_does_not_import_dali():
    code = "import sys, gpupipe; print('nvidia.dali' in sys.modules, 'torchvision' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.fixture
def no_dali(monkeypatch):
    """Makes ``import nvidia.dali`` fail as if DALI were not installed."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("nvidia.dali"):
            raise ImportError("No module named 'nvidia.dali'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(backends.importlib, "import_module", lambda name: fake_import(name))


def test_missing_dali_names_the_pip_command(no_dali, image_folder):
    with pytest.raises(ImportError) as info:
        backends.require("dali-cpu")
    assert "nvidia.dali" in str(info.value) and "pip install nvidia-dali-cuda120" in str(info.value)
    with pytest.raises(ImportError, match="pip install nvidia-dali-cuda120"):
        gpupipe.loader(image_folder, batch_size=2, backend="dali-cpu", device="cpu")


def test_auto_falls_back_to_torchvision_without_dali(no_dali, image_folder, caplog):
    backends._auto_logged.clear()
    with caplog.at_level(logging.INFO, logger="gpupipe"):
        loader = gpupipe.loader(image_folder, batch_size=2, device="cpu", num_threads=0)
        gpupipe.loader(image_folder, batch_size=2, device="cpu", num_threads=0)
    assert loader.backend == "torchvision"
    assert caplog.text.count("chose 'torchvision'") == 1, "the choice is logged once"
    images, labels = next(iter(loader))
    assert images.shape == (2, 3, 224, 224)


@pytest.mark.skipif(not HAS_DALI, reason="DALI is not installed")
def test_auto_prefers_dali(image_folder):
    assert backends.resolve("auto", torch.device("cpu")) == "dali-cpu"
    expected = "dali" if torch.cuda.is_available() else "dali-cpu"
    assert backends.resolve("auto", None) == expected
    assert gpupipe.loader(image_folder, batch_size=2).backend == expected


def test_resolve_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        backends.resolve("gpu", None)
