"""A newcomer's first hour, fifth pass: the rough edges left after the third and fourth passes.

- ``--cache-dir`` (or ``$GPUPIPE_CACHE``) where the demo data cannot be written ended, after the estimate and a
  progress bar, in ``error: [Errno 2] No such file or directory: '/proc/nope'``: no flag named, nothing to do;
- the bench told a CPU user with 80x64 px photos to "pre-resize the images (shorter side ~256 px)", which does
  nothing to images already smaller (the packer never enlarges), and said ~256 px for any ``--image-size``;
- ``--out`` inside the image folder ``--data`` made the next run read bench.png as an image of a new class;
- ``--dtype float16``/``bfloat16`` with a float32 training loop failed every backend ("expected scalar type Half");
- ``--backends "dali-cpu torchvision"`` was "unknown backend 'dali-cpu torchvision'"; "1 batches", "1 steps";
- Ctrl-C while the demo set was made left the progress bar redrawn below the interrupted line;
- ``python -m gpupipe.pack`` into a folder packed earlier with other settings said only "packed from other inputs
  or with other settings", leaving the user to guess which; its resume line read "after 1 finished shards";
  ``--on-error raise`` named the bad input but not what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import make_image_folder

from gpupipe.bench import advice
from gpupipe.bench.__main__ import main as bench_main
from gpupipe.bench.preflight import data_stats
from gpupipe.pack.__main__ import main as pack_main
from gpupipe.sources import as_source

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """2 classes of 6 small photos (sides 40-59 px)."""
    root = tmp_path_factory.mktemp("first-hour5") / "photos"
    make_image_folder(root, {"cat": 6, "dog": 6}, sizes=(40, 60))
    return root


def _last_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert lines, "nothing on stderr"
    return lines[-1]


# --- the bench's cache folder -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["a-file", "a-file/sub"])
def test_a_cache_dir_that_cannot_hold_the_demo_data_is_refused_up_front(tmp_path, capsys, where):
    (tmp_path / "a-file").write_text("x")
    cache = tmp_path / where
    status = bench_main(["--cache-dir", str(cache), "--no-train", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2, err
    last = _last_error(err)
    assert last.startswith(f"error: --cache-dir {cache}: cannot write the demo data there ("), last
    assert "pass another folder" in last and "GPUPIPE_CACHE" in last, last
    assert "Errno" not in err and "Traceback" not in err
    assert "will take" not in err and "demo images" not in err, "refused before the estimate and the demo build"


def test_the_cache_dir_from_the_environment_is_named_as_such(tmp_path):
    """``GPUPIPE_CACHE`` set in a shell profile to a folder that cannot be written: the flag's default."""
    (tmp_path / "a-file").write_text("x")
    env = {**os.environ, "GPUPIPE_CACHE": str(tmp_path / "a-file" / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "gpupipe.bench", "--no-train", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    last = _last_error(done.stderr)
    assert last.startswith(
        f"error: --cache-dir {tmp_path / 'a-file' / 'cache'} (the default: gpupipe's cache folder, set by "
        "$GPUPIPE_CACHE or $XDG_CACHE_HOME): cannot write the demo data there (a file on its path is not a folder)"
    ), last


def test_a_cache_dir_is_not_needed_when_data_is_given(photos, tmp_path, capsys):
    """``--data`` needs no demo set: an unwritable ``--cache-dir`` beside it is no reason to refuse."""
    (tmp_path / "a-file").write_text("x")
    status = bench_main([
        "--data", str(photos), "--cache-dir", str(tmp_path / "a-file"), "--no-train", "--backends", "torchvision",
        "--batch-size", "4", "--image-size", "32", "--steps", "1", "--warmup", "1", "--repeats", "1",
        "--threads", "1", "--out", str(tmp_path / "out"),
    ])
    assert status == 0, capsys.readouterr().err


# --- the bench's advice against the data's image sizes --------------------------------------------------------


def _cpu_report(short_side: int | None, image_size: int = 224, device: str = "cpu", backend: str = "dali-cpu") -> dict:
    """One input-bound ``backend``, on ``device``, at ``image_size``, the data's shorter sides up to ``short_side``."""
    data = {"images": 1000, "min_side": 40, "max_side": 900}
    if short_side is not None:
        data["max_short_side"] = short_side
    return {
        "results": {
            backend: {
                "train": {"images_per_s": 10.0, "min": 9.0, "max": 11.0, "fraction_of_ceiling": 0.5, "wait_share": 0}
            }
        },
        "settings": {"threads": 2, "device": device, "image_size": image_size},
        "machine": {"cpu_cores_usable": 2},
        "data": data,
    }


def test_images_already_small_are_not_told_to_be_pre_resized():
    assert "pre-resize" not in advice.suggestions(_cpu_report(64, image_size=64))["dali-cpu"]  # 80x64 px photos
    tip = advice.suggestions(_cpu_report(80))["dali-cpu"]
    assert tip == (
        "loading and the model share the same 2 CPU cores, and the images are already small (shorter sides up to "
        "80 px, pre-resizing would not shrink them): train on a GPU with backend='dali'"
    )
    on_gpu = advice.suggestions(_cpu_report(200, device="cuda:0", backend="dali"))["dali"]
    assert on_gpu == "more CPU threads than 2 (--threads); the images are already small (shorter sides up to 200 px)"


def test_the_pre_resize_advice_follows_the_crop_size():
    """~256 px is ImageNet's resize for a 224 px crop: a 64 px crop wants ~73 px, not 256."""
    assert "pre-resize the images (shorter side ~73 px)" in advice.suggestions(_cpu_report(600, 64))["dali-cpu"]
    assert "pre-resize the images (shorter side ~256 px)" in advice.suggestions(_cpu_report(600))["dali-cpu"]
    on_gpu = advice.suggestions(_cpu_report(600, device="cuda:0", backend="dali"))["dali"]
    assert on_gpu == "more CPU threads than 2 (--threads), or pre-resized images (shorter side ~256 px)"


def test_a_report_without_the_shorter_sides_keeps_the_advice_it_had():
    """A ``bench.json`` recorded before ``max_short_side`` existed (the committed results)."""
    tip = advice.suggestions(_cpu_report(None))["dali-cpu"]
    assert "pre-resize the images (shorter side ~256 px)" in tip, tip


def test_data_stats_record_the_largest_shorter_side(photos, tmp_path):
    from PIL import Image

    sides = [min(Image.open(p).size) for p in photos.rglob("*.jpg")]
    assert data_stats(as_source(photos))["max_short_side"] == max(sides)
    packed = tmp_path / "packed"
    assert pack_main([str(photos), str(packed), "-q"]) == 0
    assert data_stats(as_source(packed))["max_short_side"] == max(sides)


# --- packing into a folder that holds a pack --------------------------------------------------------------


def test_packing_again_with_other_settings_names_the_settings_that_differ(photos, tmp_path, capsys):
    out = tmp_path / "packed"
    assert pack_main([str(photos), str(out), "-q"]) == 0
    capsys.readouterr()
    done = subprocess.run(
        [sys.executable, "-m", "gpupipe.pack", str(photos), str(out), "--max-size", "32", "--quality", "80", "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2, done.stderr
    last = _last_error(done.stderr)
    assert last == (
        f"error: {out} was packed from other inputs or with other settings; pack into a new folder (or delete it "
        f"first): it was packed with --max-size none, --quality 90, and this command asks for --max-size 32, "
        f"--quality 80"
    ), last


def test_packing_other_inputs_into_a_pack_says_the_settings_are_the_same(photos, tmp_path):
    out = tmp_path / "packed"
    assert pack_main([str(photos), str(out), "-q"]) == 0
    other = tmp_path / "other"
    make_image_folder(other, {"bird": 3}, sizes=(40, 60))
    done = subprocess.run(
        [sys.executable, "-m", "gpupipe.pack", str(other), str(out), "-q"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert _last_error(done.stderr).endswith(
        "(or delete it first): its settings are this command's, so its inputs differ (files added, removed or changed)"
    ), done.stderr


def test_a_rerun_of_a_one_shard_pack_says_one_shard(photos, tmp_path, capsys):
    out = tmp_path / "packed"
    assert pack_main([str(photos), str(out), "-q"]) == 0
    capsys.readouterr()
    assert pack_main([str(photos), str(out), "-q"]) == 0
    said = capsys.readouterr().out
    assert "; resumed after 1 finished shard\n" in said, said


def test_a_pack_stopped_before_its_end_is_named_as_such(tmp_path):
    """No manifest.json yet (Ctrl-C mid-pack), only the journal: nothing to compare the flags with."""
    from gpupipe.pack import PackSettings
    from gpupipe.pack.__main__ import settings_differ

    (tmp_path / ".pack-journal.json").write_text("{}")
    said = settings_differ(tmp_path, PackSettings())
    assert said == "it holds a pack stopped before its end (no manifest.json to compare this command with)"


def test_backends_separated_by_spaces_say_to_use_commas(capsys):
    """``--backends "dali-cpu torchvision"`` was "unknown backend 'dali-cpu torchvision'"."""
    assert bench_main(["--backends", "baseline torchvision", "--no-train"]) == 2
    assert _last_error(capsys.readouterr().err) == (
        "error: --backends: separate the backends with commas: --backends baseline,torchvision"
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_loader_feeds_a_float32_training_loop(photos, tmp_path, capsys, dtype):
    """``--dtype float16`` where the loop runs in float32 (``--amp off``, or ``auto`` on most CPUs) ended in
    "every backend failed: ... expected scalar type Half but found Float"."""
    out = tmp_path / "out"
    status = bench_main([
        "--data", str(photos), "--backends", "torchvision", "--dtype", dtype, "--amp", "off", "--model", "resnet18",
        "--image-size", "32", "--batch-size", "4", "--steps", "1", "--warmup", "1", "--train-steps", "1",
        "--train-warmup", "1", "--repeats", "1", "--threads", "1", "--out", str(out),
    ])
    err = capsys.readouterr().err
    assert status == 0, err
    assert "failed" not in err
    import json

    report = json.loads((out / "bench.json").read_text())
    assert report["failed"] == {} and report["results"]["torchvision"]["train"]["images_per_s"] > 0


def test_an_example_s_progress_counts_one_step_as_one_step(capsys):
    """A tiny folder gives one step an epoch: "training: 1 steps; ..." (examples/_common.progress)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from _common import progress
    finally:
        sys.path.remove(str(ROOT / "examples"))
    batch = (torch.zeros(2, 3, 4, 4), torch.zeros(2))
    assert len(list(progress([batch], 1))) == 1
    assert capsys.readouterr().out.startswith("training: 1 step; a progress line after the first step")
    list(progress([batch, batch], 2))
    assert capsys.readouterr().out.startswith("training: 2 steps; ")


def test_pack_stopped_by_a_bad_input_says_what_to_do(photos, tmp_path):
    """``--on-error raise`` named the file and its reason, and nothing more: not how to go on."""
    src = tmp_path / "src"
    make_image_folder(src, {"cat": 3, "dog": 3}, sizes=(40, 60))
    (src / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    done = subprocess.run(
        [sys.executable, "-m", "gpupipe.pack", str(src), str(tmp_path / "out"), "--on-error", "raise", "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == (
        f"error: {src / 'cat' / 'broken.jpg'}: not an image (unrecognised format); remove or replace it, or pack "
        "without --on-error raise to leave such inputs out and list them\n"
    )


def test_an_out_folder_inside_the_data_is_refused(photos, tmp_path, capsys):
    """``--data photos --out photos/results``: the next run read bench.png as an image of a class "results"."""
    data = tmp_path / "photos"
    make_image_folder(data, {"cat": 4, "dog": 4}, sizes=(40, 60))
    status = bench_main(["--data", str(data), "--no-train", "--batch-size", "4", "--out", str(data / "results")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert _last_error(err) == (
        f"error: --out {data / 'results'} lies inside --data {data}: the next run would read bench.png there as an "
        "image of a class 'results'; pass a folder outside it"
    )
    assert not (data / "results").exists()


def test_the_measured_line_counts_one_batch_as_one_batch():
    from gpupipe.bench import report

    settings = {"steps": 1, "warmup": 1, "measure_training": True, "model": "m", "train_steps": 1,
                "train_warmup": 1, "repeats": 1, "batch_size": 4, "image_size": 32}
    line = report.measured_line({"settings": settings, "data": {"images": 8, "classes": 2},
                                 "amp": {"dtype": "float32"}, "machine": {"label": "cpu-2core"}})
    assert "each loader alone (1 batch after 1 of warm-up)" in line, line
    assert "training loop in float32 (1 step after 1 of warm-up)" in line, line


def test_ctrl_c_while_the_demo_set_is_made_ends_on_one_line(tmp_path):
    """Ctrl-C (the whole process group, as a terminal sends it) while the demo images are generated: the
    interrupted line is the last, not followed by the demo progress bar redrawn at exit."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpupipe.bench", "--cache-dir", str(tmp_path / "cache"), "--no-train",
         "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not list((tmp_path / "cache").glob("*/class_*/*.jpg")):
            time.sleep(0.2)
        assert list((tmp_path / "cache").glob("*/class_*/*.jpg")), "the demo set was never begun"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = err.decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    assert text.rstrip("\n").split("\n")[-1] == "interrupted (Ctrl-C) before the first repeat ended: nothing measured"


def test_python_m_gpupipe_lists_the_commands_and_the_demo_runs_from_an_install(tmp_path):
    """``python -m gpupipe`` and ``python -m gpupipe.demo`` ended in "No module named gpupipe.__main__": the demo
    data came only from ``datasets/make_demo.py`` of a clone, which a pip install has not."""
    listed = subprocess.run([sys.executable, "-m", "gpupipe"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and listed.stderr == ""
    for command in ("python -m gpupipe.bench", "python -m gpupipe.pack SRC DST", "python -m gpupipe.demo OUT"):
        assert command in listed.stdout
    out = tmp_path / "demo"
    args = [sys.executable, "-m", "gpupipe.demo", str(out), "--classes", "2", "--per-class", "2", "--workers", "1"]
    made = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["class_00", "class_01", "demo.json"]
    assert len(as_source(str(out))) == 4 and f"python -m gpupipe.bench --data {out}" in made.stdout
    wrong = subprocess.run([*args[:4], "--images", "0"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert wrong.returncode == 2
    assert wrong.stderr == "error: --images must be >= 1, got 0 (see python -m gpupipe.demo --help)\n"
