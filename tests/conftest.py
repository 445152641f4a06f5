"""Fixtures and markers only; shared helpers live in ``helpers.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import HAS_CUDA, HAS_DALI, make_image_folder

if os.environ.get("GPUPIPE_REQUIRE_DALI") == "1" and not HAS_DALI:
    raise RuntimeError("GPUPIPE_REQUIRE_DALI=1 but nvidia.dali does not import: DALI tests would be skipped")


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Scan caches and demo data go to a temporary folder, not the user's ~/.cache."""
    previous = os.environ.get("GPUPIPE_CACHE")
    os.environ["GPUPIPE_CACHE"] = str(tmp_path_factory.mktemp("gpupipe-cache"))
    yield
    if previous is None:
        os.environ.pop("GPUPIPE_CACHE", None)
    else:
        os.environ["GPUPIPE_CACHE"] = previous


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """Three classes, 7 + 5 + 6 = 18 small JPEGs of varied sizes."""
    root = tmp_path / "folder"
    make_image_folder(root, {"ant": 7, "bee": 5, "cat": 6})
    return root
