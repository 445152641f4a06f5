"""A pack whose every input is bad: not a 0-image pack with exit status 0, but an error that lists them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpupipe.cli import EXIT_ERROR
from gpupipe.pack import NothingPacked, pack


def _all_bad(root: Path) -> Path:
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for i in (1, 2):
            (root / cls / f"{i}.jpg").write_bytes(b"not a jpeg")
    return root


def test_pack_of_only_bad_inputs_raises_naming_the_count_and_the_manifest(tmp_path):
    src = _all_bad(tmp_path / "src")
    with pytest.raises(NothingPacked, match=r"none of the 4 inputs .* could be packed") as raised:
        pack(src, tmp_path / "dst", workers=1, progress=False)
    assert "manifest.json" in str(raised.value)
    assert not list((tmp_path / "dst").glob("*.tar"))


def test_pack_cli_of_only_bad_inputs_lists_them_and_exits_non_zero(tmp_path):
    src = _all_bad(tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-m", "gpupipe.pack", str(src), str(tmp_path / "dst"), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == EXIT_ERROR, done.stderr
    listed = {
        line.split(": ")[0].removeprefix("skipped ") for line in done.stderr.splitlines() if line.startswith("skipped ")
    }
    assert listed == {str(src / c / f"{i}.jpg") for c in ("cat", "dog") for i in (1, 2)}
    assert "error: none of the 4 inputs" in done.stderr
    assert "packed 0 images" not in done.stdout


def test_pack_with_one_good_input_among_bad_ones_still_packs(tmp_path):
    import numpy as np
    from helpers import write_image

    src = _all_bad(tmp_path / "src")
    write_image(src / "cat" / "good.jpg", np.full((8, 8, 3), 120, np.uint8))
    summary = pack(src, tmp_path / "dst", workers=1, progress=False)
    assert (summary.packed, summary.skipped) == (1, 4)
