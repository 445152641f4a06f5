"""The examples' command lines: a mistake is one line, ``error: ...``, exit status 2, never a
traceback; train_ddp.py says how to start it under torchrun; the segmentation Dataset reads masks
without deprecated Pillow calls. (Their training runs: test_readme_examples.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import load_example, make_detection_set, make_image_folder
from PIL import Image
from script_batch import run_scripts

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    env_free = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in env_free}
    return subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("examples")
    make_image_folder(root / "split" / "train", {"a": 2, "b": 2})
    make_image_folder(root / "split" / "val", {"a": 1, "b": 1})
    images, annotations = make_detection_set(root / "det", 3)
    (root / "broken.json").write_text("{not json")
    return root


CASES = [
    ("train_imagefolder", ["missing"],
     "error: argument root: missing does not exist (see train_imagefolder.py --help)"),
    ("train_imagefolder", ["broken.json"],
     "error: argument root: broken.json is not a folder (see train_imagefolder.py --help)"),
    ("train_imagefolder", ["split"],
     "error: argument root: split/ holds split folders train/, val/, each with class folders, not classes: "
     "pass split/train (see train_imagefolder.py --help)"),
    ("train_imagefolder", ["split/train", "--batch-size", "0"],
     "error: argument --batch-size: expected an int >= 1, got 0 (see train_imagefolder.py --help)"),
    ("train_imagefolder", ["split/train", "--backend", "nope"],
     "error: argument --backend: invalid choice: 'nope' (choose from 'auto', 'dali', 'dali-cpu', 'torchvision') "
     "(see train_imagefolder.py --help)"),
    ("train_segmentation", ["split/train", "nowhere"],
     "error: argument masks: nowhere does not exist (see train_segmentation.py --help)"),
    ("train_detection", ["det/images", "det"],
     "error: argument annotations: det is not a file (see train_detection.py --help)"),
    ("train_detection", ["det/images", "broken.json"],
     "error: broken.json: not a COCO annotation file (JSONDecodeError: Expecting property name enclosed in "
     "double quotes: line 1 column 2 (char 1))"),
    ("train_ddp", ["missing"], "error: argument data: missing does not exist (see train_ddp.py --help)"),
    ("train_ddp", ["split/train", "--model", "nonet"],
     "error: argument --model: 'nonet' is not a torchvision classification model (see train_ddp.py --help)"),
    ("train_ddp", ["split/train"],
     "error: examples/train_ddp.py runs under torchrun, one process per GPU (or CPU share): "
     "torchrun --standalone --nproc_per_node=2 examples/train_ddp.py DATA [options]"),
]


@pytest.fixture(scope="module")
def mistakes(data, tmp_path_factory) -> dict:
    """Every case's command line, run in one process (``script_batch``: torch imported once, not 11 times)."""
    env_free = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in env_free}
    cases = [{"script": str(ROOT / "examples" / f"{name}.py"), "args": args, "cwd": str(data)}
             for name, args, _ in CASES]
    results = run_scripts(cases, tmp_path_factory.mktemp("mistakes"), env=env)
    return {(name, tuple(args)): result for (name, args, _), result in zip(CASES, results)}


@pytest.mark.slow
@pytest.mark.parametrize("name, args, expected", CASES, ids=[f"{n}:{' '.join(a)}" for n, a, _ in CASES])
def test_a_mistake_is_one_error_line_and_exit_2(mistakes, name, args, expected):
    proc = mistakes[name, tuple(args)]
    assert (proc["returncode"], proc["stderr"]) == (2, expected + "\n"), proc["stdout"][-2000:] + proc["stderr"][-3000:]


@pytest.mark.slow
def test_a_damaged_pack_is_one_error_line_naming_the_shard(tmp_path):
    from gpupipe.pack import PackSettings, pack

    make_image_folder(tmp_path / "images", {"a": 6, "b": 6})
    pack(tmp_path / "images", tmp_path / "packed", PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    tar = sorted((tmp_path / "packed").glob("*.tar"))[0]
    tar.write_bytes(tar.read_bytes()[: tar.stat().st_size // 2])  # a copy cut short
    proc = run_example("train_imagefolder", "packed", "--epochs", "1", "--size", "32", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    # one line: "error: ", the shard, and the command that repairs the pack; no traceback
    assert proc.stderr.startswith("error: ") and tar.name in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--verify" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stderr.startswith("error: error"), proc.stderr


def test_the_segmentation_dataset_reads_gray_and_palette_masks_without_deprecated_calls(tmp_path):
    example = load_example("train_segmentation")
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    mask = np.zeros((20, 24), np.uint8)
    mask[4:10, 6:18] = 2
    mask[12:, :5] = 255
    for name, mode in (("gray", "L"), ("palette", "P")):
        Image.fromarray(np.full((20, 24, 3), 90, np.uint8)).save(tmp_path / "images" / f"{name}.png")
        img = Image.fromarray(mask, mode)
        if mode == "P":
            img.putpalette([v for k in range(256) for v in (k, 0, 255 - k)])
        img.save(tmp_path / "masks" / f"{name}.png")
    dataset = example.MaskFolder(str(tmp_path / "images"), str(tmp_path / "masks"), crop=8)
    dataset.transform = lambda image, target: (image, target)  # the masks as read, before augmenting
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masks = [dataset[i][1] for i in range(len(dataset))]
    for got in masks:
        assert got.dtype == torch.int64 and torch.equal(got, torch.from_numpy(mask.astype(np.int64)))


def test_an_error_from_a_dataloader_worker_is_told_by_its_own_message():
    from gpupipe.cli import message

    wrapped = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
                         "last):\n  File \"worker.py\", line 1, in <module>\n    raise ValueError(...)\n"
                         "ValueError: Shards: shard-000003.tar is cut short\n")
    assert message(wrapped) == "Shards: shard-000003.tar is cut short"
    assert message(ValueError("data/ does not exist")) == "data/ does not exist"
    assert message(OSError()) == "OSError"


def test_gpupipe_debug_shows_the_traceback_of_an_error(tmp_path):
    """One ``error:`` line by default; ``GPUPIPE_DEBUG=1`` lets the traceback through (bugs hide otherwise)."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "gpupipe.pack", str(tmp_path / "none"), str(tmp_path / "out")]
    plain = subprocess.run(cmd, capture_output=True, text=True)
    debug = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GPUPIPE_DEBUG": "1"})
    assert plain.returncode == 2 and plain.stderr.startswith("error: ") and "Traceback" not in plain.stderr
    assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr


@pytest.mark.slow
def test_a_bad_image_names_the_scripts_on_error_flag_which_skips_it(tmp_path):
    make_image_folder(tmp_path / "images", {"a": 4, "b": 4})
    (tmp_path / "images" / "a" / "zz_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a whole jpeg")
    stopped = run_example("train_imagefolder", "images", "--epochs", "1", "--size", "32", "--batch-size", "4",
                          "--backend", "torchvision", cwd=tmp_path)
    assert stopped.returncode == 2, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert "zz_broken.jpg" in stopped.stderr and "pass --on-error skip" in stopped.stderr, stopped.stderr
    assert "on_error=" not in stopped.stderr, stopped.stderr  # the script's flag, not the library's argument
    skipped = run_example("train_imagefolder", "images", "--epochs", "1", "--size", "32", "--batch-size", "4",
                          "--backend", "torchvision", "--on-error", "skip", cwd=tmp_path)
    assert skipped.returncode == 0, skipped.stdout[-2000:] + skipped.stderr[-3000:]
    assert "epoch 0: loss" in skipped.stdout, skipped.stdout
