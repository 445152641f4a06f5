"""A torchvision transform without a resize or crop over images of one size (CIFAR's ``ToTensor()`` +
``Normalize()``): the one size is read from the loader's own scan, under its ``max_pixels`` and
``max_file_size``, so every file's header is read once and a file the loader refuses does not count."""

import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torchvision
from PIL import Image
from torchvision import transforms as T

import gpupipe
from gpupipe.errors import SampleError

CPU = {"device": "cpu", "backend": "torchvision"}
RECIPE = T.Compose([T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])
SCANNED = re.compile(r"scanned (\d+) files \((\d+) read")


def cifar_like(root, count=6, size=(12, 10)):
    rng = np.random.default_rng(0)
    for i in range(count):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (*size, 3), np.uint8)).save(root / f"c{i % 2}" / f"{i}.png")
    return root


def headers_read(caplog) -> list:
    """The files each scan read (not from the cache), one entry a scan, from the scan's log line."""
    return [int(m.group(2)) for r in caplog.records if (m := SCANNED.search(r.getMessage()))]


@pytest.mark.parametrize("limits", [{}, {"max_pixels": 50_000_000}, {"max_file_size": 2**20}],
                         ids=["defaults", "max_pixels", "max_file_size"])
def test_every_header_is_read_once_whatever_the_scan_limits(tmp_path, caplog, limits):
    # Before: the one size came from a scan with the default limits, and the loader then scanned again with its
    # own: every file's header read twice where max_pixels or max_file_size was given.
    dataset = torchvision.datasets.ImageFolder(str(cifar_like(tmp_path / "cifar")), RECIPE)
    with caplog.at_level(logging.INFO, logger="gpupipe.scan"):
        loader = gpupipe.loader(dataset, batch_size=2, **CPU, **limits)
    assert headers_read(caplog) == [6]
    images = next(iter(loader))[0]
    assert images.shape == (2, 3, 12, 10)


def test_a_file_the_loader_refuses_does_not_count_as_a_second_size(tmp_path):
    # A 40 x 40 image over the loader's max_pixels is skipped (on_error="skip"): the 12 x 10 images left have one
    # size and batch. Before: the size scan used the default limit, saw two sizes, added no crop, and the loader
    # refused the pipeline as one "of varying size".
    root = cifar_like(tmp_path / "cifar")
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(root / "c0" / "big.png")
    dataset = torchvision.datasets.ImageFolder(str(root), RECIPE)
    loader = gpupipe.loader(dataset, batch_size=3, max_pixels=1_000, on_error="skip", **CPU)
    assert [Path(entry.path).name for entry in loader.skipped] == ["big.png"]  # listed, not lost
    batches = [images for images, _ in loader]
    assert [b.shape for b in batches] == [(3, 3, 12, 10)] * 2
    with pytest.raises(SampleError, match="big.png"):  # with on_error="raise" it is named, as any bad file
        gpupipe.loader(dataset, batch_size=3, max_pixels=1_000, **CPU)


def test_an_image_allowed_over_the_default_max_pixels_still_counts_as_a_size(tmp_path):
    # An image of 10,000 x 10,001 pixels (over the default 100 MP, under the max_pixels given) has a size of its
    # own: the pipeline is refused as one of varying size, where torch's collate fails too. Before: the size scan
    # used the default limit, left the image out, and the loader cropped it to 12 x 10 silently.
    root = cifar_like(tmp_path / "cifar")
    Image.new("L", (10_001, 10_000)).save(root / "c1" / "large.png")
    dataset = torchvision.datasets.ImageFolder(str(root), RECIPE)
    with pytest.raises(ValueError, match="varying size"):
        gpupipe.loader(dataset, batch_size=3, max_pixels=200_000_000, **CPU)
