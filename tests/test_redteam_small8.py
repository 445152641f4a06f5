"""Red-team round small8: the demo's next command from another folder, CLI names that start with '-', and folders
that cannot be listed inside a FileList folder or a SegmentationFolder."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import textured_image
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


# --- 1. the demo's next command runs from the folder the user is in -----------------------------------------


@pytest.mark.parametrize("where", ["clone", "inside the clone", "elsewhere"])
def test_the_demo_s_next_command_names_the_example_script_as_the_current_folder_reaches_it(
    tmp_path, monkeypatch, where
):
    # Before: "next: python examples/train_imagefolder.py OUT" wherever the demo ran: from /tmp (or docs/), no file.
    from gpupipe.demo.__main__ import next_step

    cwd = {"clone": ROOT, "inside the clone": ROOT / "docs", "elsewhere": tmp_path}[where]
    monkeypatch.chdir(cwd)
    for task, name in [("classification", "imagefolder"), ("segmentation", "segmentation"), ("detection", "detection")]:
        words = shlex.split(next_step(task, Path("my out"), ROOT / "examples").split("  (or:")[0])
        assert words[:2] == ["next:", "python"], words
        script = Path(words[2])
        assert (cwd / script).resolve() == ROOT / "examples" / f"train_{name}.py" and (cwd / script).is_file()
        assert script == (Path(f"examples/train_{name}.py") if where == "clone" else ROOT / "examples" / script.name)
        assert words[3].startswith("my out"), words


# --- 2. folders and files whose names start with '-' -------------------------------------------------------


def _error_line(capsys, main, argv) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


def test_pack_and_demo_say_how_to_name_a_folder_that_starts_with_a_dash(capsys, tmp_path, monkeypatch):
    # Before: "error: unrecognized arguments: -data -out (see python -m gpupipe.pack --help)", nothing more.
    from gpupipe.demo.__main__ import main as demo_main
    from gpupipe.pack.__main__ import main as pack_main
    from gpupipe.pack.__main__ import parse_args

    hint = "(a name that starts with '-' is read as a flag: for "
    assert _error_line(capsys, pack_main, ["-data", "-out"]) == (
        f"error: unrecognized arguments: -data -out {hint}folders or files so named, write ./-data ./-out, or put "
        "-- before the names) (see python -m gpupipe.pack --help)"
    )
    assert f"{hint}a folder or file so named, write ./-out, or put -- before" in _error_line(
        capsys, pack_main, ["data", "-out"]
    )
    assert f"{hint}a folder or file so named, write --staging ./-s)" in _error_line(
        capsys, pack_main, ["data", "s3://b/p", "--staging", "-s"]
    )
    # the demo: "the following arguments are required: out" for OUT "-demo" (before, no word on why)
    line = _error_line(capsys, demo_main, ["-demo"])
    assert line.startswith("error: the following arguments are required: OUT") and "write ./-demo, or put --" in line
    # what the hint says works; a mistyped flag still gets its guess, alone
    monkeypatch.chdir(tmp_path)
    assert (parse_args(["./-data", "./-out"]).src, parse_args(["--", "-data", "-out"]).dst) == ("./-data", "-out")
    line = _error_line(capsys, demo_main, ["out", "--imgaes", "3"])
    assert "did you mean --images?" in line and hint not in line
    for flag_error in (["--zzzzzz"], ["data", "out", "--quality"], ["data", "out", "--on-error", "-1"]):
        assert hint not in _error_line(capsys, pack_main, flag_error), flag_error


def test_the_bench_says_how_to_pass_a_data_folder_that_starts_with_a_dash():
    # Before: "error: argument --data: expected one argument".
    from gpupipe.bench.args import BenchError, parse_args

    for argv in (["--data", "-photos"], ["--dat", "-photos"]):
        with pytest.raises(BenchError) as caught:
            parse_args(argv)
        assert str(caught.value) == (
            "argument --data: expected one argument (a name that starts with '-' is read as a flag: for a folder or "
            "file so named, write --data ./-photos)"
        )
    with pytest.raises(BenchError) as caught:  # the bench takes no folder but --data's: no ./-photos to write
        parse_args(["-photos"])
    assert "read as a flag" not in str(caught.value)


# --- 3. a folder that cannot be listed is a problem of the source, never lost -----------------------------------

_READ_BOTH = """
import json, sys
from pathlib import Path
import gpupipe
from gpupipe.ops import CenterCrop, Decode, Output
root, out = Path(sys.argv[1]), {}
sources = {
    "segmentation": lambda: gpupipe.SegmentationFolder(root / "seg" / "images", root / "seg" / "masks"),
    "filelist": lambda: gpupipe.FileList(root / "test"),
}
for name in sys.argv[2:]:
    loader = gpupipe.loader(sources[name](), [Decode(), CenterCrop(size=16), Output(dtype="uint8")],
                            backend="torchvision", device="cpu", batch_size=1, shuffle=False, on_error="skip",
                            num_threads=1)
    out[name] = [sum(len(b[0]) for b in loader), {str(Path(s.path).relative_to(root)): s.reason
                                                   for s in loader.skipped}]
    try:
        gpupipe.loader(sources[name](), [Decode(), CenterCrop(size=16)], backend="torchvision", device="cpu",
                       batch_size=1)
    except gpupipe.SampleError as err:
        out[name + " raised"] = str(err)
print(json.dumps(out))
"""

_SHUT = "cannot list the folder: Permission denied; its images are left out"


def _run_without_root_s_override(tmp_path: Path, locked: list[Path], *names: str) -> dict:
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: a chmod 000 folder stays readable")
    caps = "-dac_override,-dac_read_search"
    prefix = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"] if os.geteuid() == 0 else []
    for folder in locked:
        folder.chmod(0)
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _READ_BOTH, str(tmp_path), *names],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
    finally:
        for folder in locked:
            folder.chmod(0o755)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _write(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def test_a_segmentation_folder_lists_the_folders_it_cannot_list_and_names_why_their_pairs_are_broken(tmp_path):
    # Before: images/gone and masks/gone (no permission) were logged only, their pairs in no list; an image whose
    # mask folder was locked had "no mask", a mask whose image folder was locked was "a mask without an image".
    rng = np.random.default_rng(8)
    seg = tmp_path / "seg"
    for key in ["ok/1", "ok/2", "gone/3", "maskless/4", "imageless/5"]:
        _write(seg / "images" / f"{key}.jpg", textured_image(rng, 24, 24))
        _write(seg / "masks" / f"{key}.png", (rng.integers(0, 3, (24, 24))).astype(np.uint8))
    locked = [seg / "images" / "gone", seg / "masks" / "gone", seg / "masks" / "maskless", seg / "images" / "imageless"]
    got = _run_without_root_s_override(tmp_path, locked, "segmentation")
    masks, images = seg / "masks", seg / "images"
    assert got["segmentation"] == [
        2,
        {
            "seg/images/gone": _SHUT,
            "seg/masks/gone": _SHUT,
            "seg/masks/maskless": _SHUT,
            "seg/images/imageless": _SHUT,
            "seg/images/maskless/4.jpg": f"no mask (expected {masks / 'maskless' / '4.png'}) (its folder "
            f"{masks / 'maskless'} cannot be listed)",
            "seg/masks/imageless/5.png": f"a mask without an image (its folder {images / 'imageless'} cannot be "
            "listed)",
        },
    ]
    raised = got["segmentation raised"]
    assert "2 files do not pair up, and 4 folders cannot be listed" in raised, raised
    assert all(f"{folder}: {_SHUT}" in raised for folder in locked), raised


def test_a_file_list_folder_lists_the_folders_it_cannot_list(tmp_path):
    # Before: FileList(folder) logged "cannot list" for test/shut; its image was in no list.
    rng = np.random.default_rng(9)
    for key in ["a/1", "a/2", "shut/3"]:
        _write(tmp_path / "test" / f"{key}.jpg", textured_image(rng, 24, 24))
    got = _run_without_root_s_override(tmp_path, [tmp_path / "test" / "shut"], "filelist")
    assert got["filelist"] == [2, {"test/shut": _SHUT}]
    assert f"{tmp_path / 'test' / 'shut'}: {_SHUT}" in got["filelist raised"]
