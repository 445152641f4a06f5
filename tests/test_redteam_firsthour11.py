"""Red-team round 11 of a newcomer's first hour: the commands as README.md and docs/index.md give them, then
typed the way a newcomer gets them wrong (an empty ``"$DATA"``, ``python -m gpupipe bench``, a backend
spelled ``dali_cpu``, Ctrl-C).

Every command-line case runs in one process (``script_batch``: torch imported once); Ctrl-C is sent to
a real process group, as a terminal sends it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import make_image_folder
from script_batch import run_scripts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "train_imagefolder.py")
SEG_EXAMPLE = str(ROOT / "examples" / "train_segmentation.py")

#: (script or module, args, the words the one ``error:`` line must hold). Each runs in an empty folder (the
#: case's own), with the data folder ``data`` made beside it; nothing may be written into that folder.
CASES = [
    # An empty path ("$OUT" unset) was the current folder: the pack was written into it, --verify '' said
    # ": OK", the demo set was made there, the example read the current folder (`[Errno 2] ... ''`).
    ("gpupipe.pack", ["../data", ""], ["argument DST: empty", "unset shell variable", "current folder"]),
    ("gpupipe.pack", ["", "../packed"], ["argument SRC: empty", "unset shell variable"]),
    ("gpupipe.pack", ["--verify", " "], ["argument SRC: empty", "unset shell variable"]),
    ("gpupipe.pack", ["../data", "../packed", "--staging", ""], ["argument --staging: empty"]),
    ("gpupipe.demo", [""], ["argument OUT: empty", "unset shell variable", "current folder"]),
    (EXAMPLE, [""], ["argument root: empty", "unset shell variable"]),
    (SEG_EXAMPLE, ["../data", ""], ["argument masks: empty"]),
    # A value not among the choices, mistyped: the one meant is named.
    (
        EXAMPLE,
        ["../data", "--backend", "dali_cpu"],
        ["argument --backend: invalid choice: 'dali_cpu'", "(did you mean 'dali-cpu'?)", "choose from 'auto'"],
    ),
    (EXAMPLE, ["../data", "--backend", "DALI"], ["(did you mean 'dali'?)"]),
    (
        "gpupipe.demo",
        ["out", "--task", "seg"],
        ["argument --task: invalid choice: 'seg'", "(did you mean 'segmentation'?)"],
    ),
    ("gpupipe.pack", ["../data", "../packed", "--on-error", "Skip"], ["(did you mean 'skip'?)"]),
    # An image passed for the annotations (arguments in the wrong order, a tab-completed neighbour): the bare
    # `'utf-8' codec can't decode byte 0x89`, naming no file.
    (
        str(ROOT / "examples" / "train_detection.py"),
        ["../data/a", "../data/a/img_000.jpg"],
        ["error: ../data/a/img_000.jpg: not a COCO annotation file (UnicodeDecodeError"],
    ),
    # A pack given to the tutorial DataLoader: torchvision's bare "Couldn't find any class folder in ../pack."
    (
        EXAMPLE,
        ["../pack", "--loader", "dataloader"],
        ["argument root: ../pack was packed by python -m gpupipe.pack", "pass --loader gpupipe"],
    ),
    # `python -m gpupipe bench ...` (a command typed as git's) printed the list, exit 0, and ran nothing.
    (
        "gpupipe",
        ["bench", "--data", "my data"],
        ["python -m gpupipe runs no command", "python -m gpupipe.bench --data 'my data'"],
    ),
    ("gpupipe", ["pack", "a", "b"], ["python -m gpupipe.pack a b"]),
    ("gpupipe", ["--data", "x"], ["python -m gpupipe takes no arguments", "python -m gpupipe.bench"]),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """One small image folder (2 classes of 2) for the module."""
    root = tmp_path_factory.mktemp("firsthour11")
    make_image_folder(root / "data", {"a": 2, "b": 2}, sizes=(32, 40))
    from gpupipe.pack import pack

    pack(root / "data", root / "pack", workers=1, progress=False)
    return root


#: Commands that must work (exit 0), run in the same process as ``CASES``, after them; ``$HOME`` is ``home``.
RIGHT = [
    # A '~' the shell left (quoted, `OUT=~/demo` in a .env file): the demo wrote a folder named '~' in the current
    # folder, then its statistics (which read '~' as the home folder) ended in a traceback: PathNotFound.
    ("gpupipe.demo", ["~/demo", "--images", "2", "--workers", "1"]),
]


@pytest.fixture(scope="module")
def mistakes(data) -> list:
    cases = []
    for i, (what, args, *_) in enumerate(CASES + RIGHT):
        (data / f"cwd{i}").mkdir()
        key = "script" if what.endswith(".py") else "module"
        cases.append({key: what, "args": args, "cwd": str(data / f"cwd{i}")})
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "GPUPIPE_DEBUG"}}
    return run_scripts(cases, data, env={**env, "HOME": str(data / "home")})


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{Path(w).name}:{' '.join(map(repr, a))}" for w, a, _ in CASES])
def test_a_newcomer_s_mistake_is_one_line_naming_the_argument_and_nothing_is_written(data, mistakes, i):
    _, _, words = CASES[i]
    result = mistakes[i]
    lines = result["stderr"].splitlines()
    assert result["returncode"] == 2 and len(lines) == 1 and lines[0].startswith("error: "), result
    assert "Traceback" not in result["stderr"] and result["stdout"] == ""
    for word in words:
        assert word in lines[0], lines[0]
    assert list((data / f"cwd{i}").iterdir()) == []  # no pack, demo set or stray file in the current folder
    assert not (data / "packed").exists()


def test_a_tilde_the_shell_left_is_the_home_folder(data, mistakes):
    result = mistakes[len(CASES)]
    assert result["returncode"] == 0 and "Traceback" not in result["stderr"], result["stderr"]
    assert list((data / f"cwd{len(CASES)}").iterdir()) == []  # no folder named '~'
    assert len(list((data / "home" / "demo").rglob("*.jpg"))) == 2


def test_python_m_gpupipe_alone_or_with_help_still_lists_the_commands():
    from gpupipe.__main__ import main

    for argv in ([], ["--help"], ["--version"]):
        assert main(argv) == 0


def _interrupt_when(cmd: list, ready: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs ``cmd`` in its own process group and sends the group SIGINT (a terminal's Ctrl-C) once ``ready``
    is in its output (stdout or stderr); returns the finished process's status, stdout and stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = cwd / "stdout.txt", cwd / "stderr.txt"
    with open(logs[0], "w") as out, open(logs[1], "w") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True, env=env, start_new_session=True)

        def said() -> str:
            return logs[0].read_text() + logs[1].read_text()

        deadline = time.monotonic() + timeout
        while ready not in said() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, f"finished before Ctrl-C: {said()[-2000:]}"
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, logs[0].read_text(), logs[1].read_text())


def test_ctrl_c_in_the_demo_is_one_line_and_the_same_command_writes_the_folder_anew(tmp_path):
    # Ctrl-C printed a traceback per worker and left OUT half-written; the rerun then refused it ("OUT holds
    # files already"), so the user had to find and delete it. Now: one line, status 130, and a rerun (here
    # with other arguments) writes exactly its own set there.
    cmd = [sys.executable, "-m", "gpupipe.demo", "out", "--images", "400", "--workers", "2"]
    proc = _interrupt_when(cmd, "demo: 20/400", tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "interrupted: out is unfinished" in proc.stderr, proc.stderr
    assert "run the same command again" in proc.stderr
    again = subprocess.run(
        [sys.executable, "-m", "gpupipe.demo", "out", "--images", "4", "--workers", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    written = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.jpg"))
    assert len(written) == 4 and {w.split("/")[0] for w in written} == {f"class_0{i}" for i in range(4)}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"class_0{i}" for i in range(4)] + ["demo.json"]


def test_ctrl_c_in_an_example_is_one_line_not_a_traceback(data, tmp_path):
    cmd = [
        sys.executable,
        EXAMPLE,
        str(data / "data"),
        "--loader",
        "dataloader",
        "--epochs",
        "100000",
        "--batch-size",
        "2",
        "--size",
        "32",
    ]
    proc = _interrupt_when(cmd, "step 1/", tmp_path)  # Ctrl-C while it trains
    assert proc.returncode == 130, proc.stderr
    # Ctrl-C while the loader forks its workers: Python prints and drops the KeyboardInterrupt raised in its own
    # at-fork hook (logging's), and the worker Ctrl-C ended then fails the pass; the script still ends as Ctrl-C
    stderr = re.sub(r"Exception ignored in: <function _releaseLock.*?\nKeyboardInterrupt: ?\n", "", proc.stderr, flags=re.S)
    assert "Traceback" not in stderr, proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1] == "interrupted: nothing to clean up; run the same command again "
        "(it starts over)"
    )


def test_every_link_of_the_readme_and_the_home_page_reaches_its_page_and_heading():
    # mkdocs checks the anchors of docs/ (validation: anchors), but README.md is no page of the site: a renamed
    # heading left its `docs/x.md#old-heading` links dead, unseen. Headings are slugged as mkdocs slugs them.
    import re

    from markdown.extensions.toc import slugify

    def headings(page: Path) -> set:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        return {slugify(m.group(1).strip(), "-") for m in re.finditer(r"^#+\s+(.+)$", text, flags=re.M)}

    dead = []
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path) if path else page
            if not target.exists() or (anchor and target.suffix == ".md" and anchor not in headings(target)):
                dead.append(f"{page.name}: {link}")
    assert dead == []


@pytest.mark.parametrize("command", ["gpupipe.bench.args", "gpupipe.pack.__main__", "gpupipe.demo.__main__"])
def test_help_never_breaks_a_name_at_its_hyphen(command, monkeypatch, capsys):
    # `--help` at 80 columns read `comma-separated from baseline,dali,dali-` / `cpu,torchvision`, `./bench-` /
    # `out`, `.../gpupipe/pack-` / `staging`: a backend, file or folder name cut in two, which a copy breaks.
    import importlib
    import re

    monkeypatch.setenv("COLUMNS", "80")
    module = importlib.import_module(command)
    run = getattr(module, "parse_args", None) or module.main
    with pytest.raises(SystemExit) as stopped:
        run(["--help"])
    assert stopped.value.code == 0
    text = capsys.readouterr().out
    cut = [line for line in text.splitlines() if re.search(r"\w-$", line)]
    assert cut == [], text
    if "bench" in command:
        assert "baseline,dali,dali-cpu,torchvision" in text


def test_training_flags_given_with_no_train_are_named_as_unused(caplog):
    # `--no-train --model resnet18` measured the loaders alone and never said that --model did nothing (a
    # newcomer compares two runs believing the model changed).
    import logging

    from gpupipe.bench.args import parse_args

    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        parse_args(["--no-train", "--model", "resnet18", "--train-steps", "4", "--amp", "off"])
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "--model, --train-steps, --amp are not used: --no-train measures the loaders alone (no model)" in said, said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        parse_args(["--no-train"])
    assert caplog.records == []
