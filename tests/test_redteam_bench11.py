"""Red-team round 11 of `python -m gpupipe.bench`: its flags' bounds, as a user types them.

Every check here fails before anything is measured, so each runs the bench's ``main`` in this process
(no training, no subprocess): exit status 2 and one ``error:`` line naming the flag.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from PIL import Image

from gpupipe import env
from gpupipe.bench.__main__ import main

SMALL = ["--model", "resnet18", "--image-size", "32", "--steps", "2", "--train-steps", "2", "--warmup", "1"]
SMALL += ["--train-warmup", "1", "--repeats", "1", "--threads", "1"]


def _error(argv: list[str], capsys) -> str:
    """The one line ``main(argv)`` prints, asserting exit status 2 and nothing on stdout."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, captured.err
    assert captured.out == ""
    return lines[0]


@pytest.mark.parametrize("flag", ["--data", "--out", "--cache-dir"])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_path_is_refused_naming_the_flag_not_read_as_the_current_folder(
    flag, value, tmp_path, monkeypatch, capsys
):
    # `--data "$DATA"` with DATA unset: it used to bench the current folder (--out: write there; --cache-dir:
    # build the demo set there)
    monkeypatch.chdir(tmp_path)
    line = _error([*SMALL, flag, value], capsys)
    assert f"argument {flag}: " in line and "empty" in line and "current folder" in line, line
    assert list(tmp_path.iterdir()) == []  # nothing made or written in the current folder


def test_more_threads_than_the_machine_can_run_is_refused_naming_the_flag(tmp_path, capsys):
    # it used to start 100000 DataLoader worker processes (or DALI threads)
    most = 4 * (os.cpu_count() or 1)
    line = _error([*SMALL, "--threads", "100000", "--out", str(tmp_path / "out")], capsys)
    assert "--threads 100000" in line and f"at most {max(64, most)}" in line, line
    assert f"--threads {env.default_threads()}" in line, line
    assert not (tmp_path / "out").exists()


def test_a_batch_over_one_image_counts_it_in_the_singular(tmp_path, capsys):
    (tmp_path / "data" / "a").mkdir(parents=True)
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(tmp_path / "data" / "a" / "x.jpg")
    line = _error([*SMALL, "--batch-size", "4", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "o")], capsys)
    assert "more than the 1 image of --data" in line and "--batch-size 1 or less" in line, line


def test_the_measured_line_counts_one_image_and_one_class_in_the_singular():
    from gpupipe.bench.report import measured_line

    settings = {
        "model": "resnet18",
        "batch_size": 1,
        "image_size": 32,
        "steps": 2,
        "train_steps": 2,
        "warmup": 1,
        "train_warmup": 1,
        "repeats": 1,
        "device": "cpu",
        "measure_training": False,
    }
    report = {
        "settings": settings,
        "data": {"images": 1, "classes": 1},
        "amp": {"dtype": "float32"},
        "machine": {"label": "cpu-2core"},
    }
    assert measured_line(report).startswith("measured on cpu-2core, 1 image in 1 class, batch 1 at 32 px: ")
    report["data"] = {"images": 8, "classes": 2}
    assert measured_line(report).startswith("measured on cpu-2core, 8 images in 2 classes, batch 1 at 32 px: ")


def test_demo_flags_given_with_data_say_they_are_not_used(tmp_path, caplog):
    # --cache-dir with --data used to do nothing, silently: a URL's shards still filled $GPUPIPE_CACHE
    from gpupipe.bench.args import parse_args

    with caplog.at_level(logging.WARNING, logger="gpupipe.bench"):
        parse_args(["--data", str(tmp_path), "--demo-images", "50", "--cache-dir", str(tmp_path / "c")])
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("--demo-images 50 is not used: --data") for m in lines), lines
    assert any(m.startswith(f"--cache-dir {tmp_path / 'c'} is not used") and "$GPUPIPE_CACHE" in m for m in lines)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpupipe.bench"):
        parse_args(["--demo-images", "50", "--cache-dir", str(tmp_path / "c")])  # the demo set: both used
        parse_args(["--data", str(tmp_path)])
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
