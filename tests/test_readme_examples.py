"""The documented example commands, run as written, on tiny generated data.

The commands live where a user reads them: the home page of the documentation
(``docs/index.md``, "The examples") and the DDP page; README.md links there.
The rule: every line of a fenced code block in README.md or a page under
``docs/`` that runs an example
(``python examples/<name>.py ...`` or ``torchrun ... examples/<name>.py ...``,
``\\``-continued lines joined, ``# comments`` dropped) is run with exactly its
own arguments: the ``python`` commands one after the other in one subprocess
(``script_batch.py``: torch imported once, each run with its own ``sys.argv``,
output and warnings), a ``torchrun`` command in its own launch; except that:

- a path starting with ``data/`` or ``ckpt/`` is taken under a temporary folder,
  where the test writes a tiny data set of the layout the path names (the
  ``datasets/make_demo.py`` lines that write the full demo data are not run);
- flags the example already accepts are appended (:data:`SMALL`) for few
  images, epochs and steps; argparse takes the last value of a flag, so an
  appended flag overrides the command's own;
- ``python`` is this interpreter and ``torchrun`` is ``python -m torch.distributed.run``;
- a command for several machines (``--nnodes`` above 1) is not run.

Each must exit 0 without a traceback or a warning, and print one line per
epoch with its statistics (``input pipeline: N batches``, N the epoch's own
batches) where it trains on gpupipe.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import make_detection_set, make_image_folder
from PIL import Image
from script_batch import run_scripts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("train_imagefolder", "train_ddp", "train_segmentation", "train_detection")
#: Flags appended to each example's commands, and what one epoch then holds.
SMALL = {
    "train_imagefolder": ["--epochs", "2", "--size", "32", "--batch-size", "8"],  # 16 images: 2 batches
    "train_ddp": ["--epochs", "2", "--size", "32", "--batch-size", "4", "--save-every", "0"],  # 2 ranks x 2 batches
    "train_segmentation": ["--epochs", "2", "--crop", "32", "--batch-size", "4"],  # 8 pairs: 2 batches
    "train_detection": ["--steps", "4", "--size", "128", "--batch-size", "4"],  # 8 images: 2 epochs of 2 batches
}
EPOCHS, BATCHES = 2, 2
#: Where the commands are read: README.md and every documentation page.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Each example both ways (DataLoader and gpupipe), DDP once: the count found must be this.
EXPECTED_COMMANDS = 7


def readme_commands() -> list:
    """The documented example commands: ``(example name, argv as written)``, each once."""
    text = "\n".join(page.read_text() for page in PAGES)
    found = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            if line.split()[:1] not in (["python"], ["torchrun"]):
                continue
            argv = shlex.split(line, comments=True)
            script = next((a for a in argv if a.startswith("examples/") and a.endswith(".py")), None)
            nodes = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--nnodes=")), 1)
            if script and nodes == 1 and (Path(script).stem, argv) not in found:
                found.append((Path(script).stem, argv))
    return found


COMMANDS = readme_commands()


def test_the_readme_shows_every_example_both_ways():
    assert len(COMMANDS) == EXPECTED_COMMANDS, COMMANDS
    index = (ROOT / "docs" / "index.md").read_text()
    assert all(" ".join(argv) in " ".join(index.split()) for _, argv in COMMANDS), "docs/index.md lists them all"
    shown = {(name, argv[argv.index("--loader") + 1] if "--loader" in argv else "gpupipe") for name, argv in COMMANDS}
    assert {name for name, _ in shown} == set(EXAMPLES)
    for name in EXAMPLES:
        if name != "train_ddp":
            assert {(name, "dataloader"), (name, "gpupipe")} <= shown, name


def write_tiny_data(data: Path) -> None:
    """What the README's paths name: an image folder, a segmentation set and a COCO detection set."""
    rng = np.random.default_rng(0)
    make_image_folder(data / "train", {"cat": 8, "dog": 8}, sizes=(40, 64))
    for folder in ("images", "masks"):
        (data / "seg" / folder).mkdir(parents=True)
    for i in range(8):
        mask = np.zeros((48, 56), np.uint8)
        mask[8:30, 10:40] = 1 + i % 2
        image = rng.integers(0, 60, (48, 56, 3), dtype=np.uint8)
        image[mask > 0] = (220, 40, 40) if i % 2 == 0 else (40, 220, 40)
        Image.fromarray(image).save(data / "seg" / "images" / f"{i:03d}.jpg")
        if i % 2:  # a palette mask as Pascal VOC's, and gray ones
            palette = Image.fromarray(mask, "P")
            palette.putpalette([v for k in range(256) for v in (k, 255 - k, k // 2)])
            palette.save(data / "seg" / "masks" / f"{i:03d}.png")
        else:
            Image.fromarray(mask, "L").save(data / "seg" / "masks" / f"{i:03d}.png")
    make_detection_set(data / "det", 8, seed=2)


def localised(argv: list, tmp: Path, name: str) -> list:
    start = [sys.executable] if argv[0] == "python" else [sys.executable, "-m", "torch.distributed.run"]
    rest = [str(tmp / a) if a.startswith(("data/", "ckpt/")) else a for a in argv[1:]]
    return start + rest + SMALL[name]


@pytest.fixture(scope="module")
def python_runs(tmp_path_factory) -> dict:
    """The ``python`` commands, run in one process on one tiny data set (none of them writes to it):
    ``{command: its result}``."""
    tmp = tmp_path_factory.mktemp("readme")
    write_tiny_data(tmp / "data")
    commands = [(name, argv) for name, argv in COMMANDS if argv[0] == "python"]
    cases = [{"script": str(ROOT / command[1]), "args": command[2:], "cwd": str(ROOT)}
             for command in (localised(argv, tmp, name) for name, argv in commands)]
    results = run_scripts(cases, tmp, timeout=800)
    return {tuple(argv): (tmp, SimpleNamespace(**result)) for (_, argv), result in zip(commands, results)}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name, argv", COMMANDS, ids=[" ".join(argv[1:]) for _, argv in COMMANDS])
def test_a_readme_example_command_runs_as_written(request, tmp_path, name, argv):
    if argv[0] == "python":
        tmp_path, proc = request.getfixturevalue("python_runs")[tuple(argv)]
    else:
        write_tiny_data(tmp_path / "data")
    for arg in argv:
        if arg.startswith("data/"):
            assert (tmp_path / arg).exists(), f"the documentation names {arg}, which the tiny data set lacks"
    if argv[0] != "python":
        proc = subprocess.run(localised(argv, tmp_path, name), cwd=ROOT, capture_output=True, text=True,
                              timeout=800)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr[-3000:]
    epoch_lines = [line for line in out.splitlines() if re.match(r"epoch \d+: ", line)]
    assert [int(line.split()[1].rstrip(":")) for line in epoch_lines] == list(range(EPOCHS)), out
    gpupipe_mode = "dataloader" not in argv
    for line in epoch_lines:
        assert ("input pipeline" in line) == gpupipe_mode, line
        if gpupipe_mode:
            assert re.search(rf"input pipeline(, rank 0)?: {BATCHES} batches, ", line), line
    if name == "train_ddp":
        assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["rank0.pt", "rank1.pt"]
