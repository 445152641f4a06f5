"""Backend choice: 'auto', missing packages, and a light ``import gpupipe``."""

import logging
import subprocess
import sys

import pytest
import torch

import gpupipe
from gpupipe import backends, env
from helpers import HAS_DALI


def test_import_gpupipe_does_not_import_dali():
    code = "import sys, gpupipe; print('nvidia.dali' in sys.modules, 'torchvision' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.fixture
def no_dali(monkeypatch):
    """Makes ``import nvidia.dali`` fail as if DALI were not installed."""
    for name in [m for m in sys.modules if m == "nvidia.dali" or m.startswith("nvidia.dali.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)


def test_missing_dali_names_the_pip_command(no_dali, image_folder):
    package = backends.dali_package()
    with pytest.raises(ImportError) as info:
        backends.require("dali-cpu")
    assert "nvidia.dali" in str(info.value) and f"pip install {package}" in str(info.value)
    with pytest.raises(ImportError, match=f"pip install {package}"):
        gpupipe.loader(image_folder, batch_size=2, backend="dali-cpu", device="cpu")


@pytest.mark.parametrize("cuda, package", [("13.2", "nvidia-dali-cuda130"), ("12.8", "nvidia-dali-cuda120"),
                                           (None, "nvidia-dali-cuda120")])
def test_the_dali_wheel_follows_torchs_cuda(monkeypatch, cuda, package):
    monkeypatch.setattr(torch.version, "cuda", cuda)
    assert backends.dali_package() == package


def test_auto_falls_back_to_torchvision_without_dali(no_dali, image_folder, caplog):
    backends.registry._auto_logged.clear()
    with caplog.at_level(logging.INFO, logger="gpupipe"):
        loader = gpupipe.loader(image_folder, batch_size=2, device="cpu", num_threads=0)
        gpupipe.loader(image_folder, batch_size=2, device="cpu", num_threads=0)
    assert loader.backend == "torchvision"
    assert caplog.text.count("chose 'torchvision'") == 1, "the choice is logged once"
    images, labels = next(iter(loader))
    assert images.shape == (2, 3, 224, 224)


@pytest.mark.skipif(not HAS_DALI, reason="DALI is not installed")
def test_auto_prefers_dali(image_folder):
    assert backends.resolve("auto", torch.device("cpu"))[0] == "dali-cpu"
    expected = "dali" if torch.cuda.is_available() else "dali-cpu"
    assert backends.resolve("auto", None)[0] == expected
    assert gpupipe.loader(image_folder, batch_size=2).backend == expected


def test_resolve_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        backends.resolve("gpu", None)


def test_registry_describes_every_backend():
    # torchvision-transform: the user's own transform object, run unchanged (gpupipe.DataLoader's fallback);
    # torch-dataset: a dataset gpupipe cannot read, read as it is (the same fallback).
    assert set(backends.REGISTRY) == {"dali", "dali-cpu", "torchvision", "torchvision-transform", "torch-dataset"}
    assert backends.REGISTRY["dali"].needs_cuda and not backends.REGISTRY["dali-cpu"].needs_cuda
    main_process = [n for n, info in backends.REGISTRY.items() if info.main_process]
    assert main_process == ["torchvision", "torchvision-transform", "torch-dataset"]
    assert [n for n, info in backends.REGISTRY.items() if not info.internal] == ["dali", "dali-cpu", "torchvision"]


@pytest.mark.parametrize("local, cores, expected", [(None, 16, 16), ("8", 16, 2), ("4", 2, 1), ("x", 4, 4)])
def test_default_threads_share_the_cores_among_local_ranks(monkeypatch, local, cores, expected):
    monkeypatch.setattr(env.os, "sched_getaffinity", lambda pid: set(range(cores)))
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert env.default_threads() == expected
