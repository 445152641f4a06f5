"""``python -m gpupipe.bench`` judged as a user judges gpupipe on their own machine: no winner declared that
the spread of the repeats does not back (one repeat has no spread at all), a first line that says how many
batches were really timed and with which versions, and no precision the machine cannot honour."""

import json
import subprocess
import sys

import pytest
import torch
from helpers import make_image_folder

from gpupipe.amp import cpu_info
from gpupipe.bench import advice, report
from gpupipe.bench.__main__ import main


def figure(runs, **extra):
    runs = list(runs)
    median = sorted(runs)[len(runs) // 2]
    low, high = min(runs), max(runs)
    return {"images_per_s": median, "min": low, "max": high, "spread": (high - low) / median, "runs": runs, **extra}


def two_backends(dali_runs, tv_runs, repeats=None):
    """A report of ``bench.json``'s shape: dali-cpu and torchvision trained at these rates per repeat."""
    repeats = repeats or len(dali_runs)
    results = {
        name: {
            "loader": figure([10 * r for r in runs]),
            "train": figure(runs, wait_share=0.15, fraction_of_ceiling=0.5),
            "verdict": {"bound": "input-bound", "suggestion": ""},
        }
        for name, runs in (("dali-cpu", dali_runs), ("torchvision", tv_runs))
    }
    return {
        "results": results,
        "ceiling": figure([200.0] * repeats),
        "machine": {"cpu_cores_usable": 2, "label": "cpu-2core"},
        "settings": {
            "model": "m",
            "batch_size": 32,
            "warmup": 10,
            "steps": 20,
            "train_warmup": 3,
            "train_steps": 6,
            "threads": 2,
            "device": "cpu",
            "repeats": repeats,
        },
        "data": {"images": 1000},
        "reliability": [],
    }


def test_one_repeat_declares_no_winner_and_suggests_no_backend_over_another():
    """One repeat has no spread: 110 against 100 img/s was called "1.10x the next", and torchvision was told
    to use dali-cpu, on a difference no repeat could tell from noise."""
    r = two_backends([110.0], [100.0])
    last = report.table(r).splitlines()[-1]
    assert "no clear difference" in last and "1 repeat" in last, last
    assert "x the next" not in last and "dali-cpu at 110.0 img/s" in last and "torchvision at 100.0 img/s" in last
    assert "use backend='dali-cpu'" not in advice.suggestions(r)["torchvision"]
    # with three repeats that do not overlap, the same medians make a winner
    r = two_backends([110.0, 109.0, 111.0], [100.0, 99.0, 101.0])
    last = report.table(r).splitlines()[-1]
    assert "1.10x the next" in last and "no clear difference" not in last, last
    assert advice.suggestions(r)["torchvision"].startswith("use backend='dali-cpu'")


def test_an_interrupted_run_with_one_repeat_done_declares_no_winner():
    r = two_backends([110.0], [100.0], repeats=3)
    r["interrupted"] = {"repeats_done": 1, "repeats_planned": 3}
    last = advice.winner_line(r)
    assert "no clear difference" in last and "x the next" not in last, last


def test_overlapping_ranges_name_no_fastest_backend():
    """Ranges that overlap read "fastest backend ...: dali-cpu at ..., level with torchvision": a winner named
    first, on a difference inside the noise."""
    r = two_backends([90.8, 80.9, 97.9], [89.3, 72.6, 91.0])
    last = advice.winner_line(r)
    head = "fastest backend for training on this machine: no clear difference: "
    assert last.startswith(head), last
    assert "dali-cpu at 90.8 img/s (80.9-97.9) is level with torchvision at 89.3 img/s (72.6-91.0)" in last
    assert "within the spread of the repeats" in last and "either will do" in last


def test_the_first_line_gives_the_batches_really_timed_and_the_versions():
    """A loader-alone window shortened to fit in one epoch (20 asked, 18 timed) was reported as 20 batches;
    and the printed output named no torch or DALI version."""
    r = two_backends([110.0, 109.0, 111.0], [100.0, 99.0, 101.0])
    timed = [{"warmup": 2, "timed": 18, "boundaries_timed": 0, "leftover_processes": 0}] * 3
    for entry in r["results"].values():
        entry["loader"]["batches"] = timed
    r["settings"].update(steps=20, warmup=2, repeats=3, image_size=64, measure_training=True)
    r["amp"] = {"dtype": "float32"}
    r["data"]["classes"] = 10
    r["machine"]["versions"] = {"python": "3.11.7", "torch": "2.14.1", "nvidia-dali-cuda120": "2.4.0", "pillow": "1"}
    line = report.measured_line(r)
    assert "each loader alone (18 batches after 2 of warm-up; 20 asked, fewer to fit in one epoch)" in line, line
    assert line.startswith("measured on cpu-2core (torch 2.14.1, DALI 2.4.0, Python 3.11.7), 1000 images"), line
    timed = [dict(t, timed=n) for t, n in zip(timed, (18, 20, 20))]
    r["results"]["torchvision"]["loader"]["batches"] = timed
    assert "each loader alone (18-20 batches after 2 of warm-up; 20 asked" in report.measured_line(r)


@pytest.mark.skipif(
    torch.cuda.is_available() or cpu_info()["flags"].get("avx512_fp16"), reason="a CPU without float16's refusal"
)
def test_fp16_on_a_cpu_is_refused_up_front_naming_what_works(tmp_path, capsys):
    """``--amp fp16`` on a CPU ran float16 autocast with a GradScaler, emulated on most CPUs: a ceiling twenty
    times under the loops it bounds, and a verdict read from it."""
    folder = tmp_path / "data"
    make_image_folder(folder, {"a": 4, "b": 4}, sizes=(40, 50))
    argv = ["--data", str(folder), "--amp", "fp16", "--backends", "torchvision", "--out", str(tmp_path / "out")]
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: --amp fp16 is for a GPU without bf16"), last
    assert "--amp bf16" in last and "--amp off" in last and "bench:" not in err
    assert not (tmp_path / "out").exists()


def test_a_run_that_ends_without_figures_says_an_earlier_bench_json_is_not_its_own(tmp_path):
    """Ctrl-C before the first repeat ended left the previous run's bench.json in --out, unmentioned: a script
    reading it after the bench took the old figures for this run's."""
    script = (
        "import sys; from gpupipe.bench import runner, __main__ as m\n"
        "def stop(*a, **k): raise KeyboardInterrupt\n"
        "runner.interleaved = stop\n"
        "sys.exit(m.main(sys.argv[1:]))\n"
    )
    folder, out = tmp_path / "data", tmp_path / "out"
    make_image_folder(folder, {"a": 4}, sizes=(40, 50))
    out.mkdir()
    (out / "bench.json").write_text(json.dumps({"results": {"old": {}}}))
    tiny = "--image-size 32 --batch-size 2 --steps 1 --warmup 1 --repeats 1 --threads 1 --no-train".split()
    proc = subprocess.run(
        [sys.executable, "-c", script, "--data", str(folder), *tiny, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted (Ctrl-C) before the first repeat ended: nothing measured"), last
    assert f"{out / 'bench.json'} is an earlier run's" in last, last
    assert json.loads((out / "bench.json").read_text()) == {"results": {"old": {}}}  # left as it was


def test_a_verdict_the_ceilings_noise_cannot_settle_is_flagged():
    """``input-bound: 85% of the model's ceiling`` from a loop at 70-95 img/s under a ceiling at 80-120: some
    repeats were above 90% of the ceiling, and no warning said the verdict rested on noise."""
    r = two_backends([85.0, 70.0, 95.0], [60.0, 59.0, 61.0])
    r["ceiling"] = figure([100.0, 80.0, 120.0])
    r["results"]["dali-cpu"]["train"].update(fraction_of_ceiling=0.85, wait_share=0.01)
    r["results"]["torchvision"]["train"].update(fraction_of_ceiling=0.6, wait_share=0.01)
    r["load_during"] = {"load_average": [0.5], "other_processes_cpu_percent": 1.0}
    notes = report.reliability(r)
    flagged = [n for n in notes if "cannot be told apart" in n]
    assert flagged == [
        "dali-cpu: its verdict rests on 85% of the ceiling, but its repeats (70.0-95.0 img/s) and the ceiling's "
        "(80.0-120.0) fall on both sides of 90% of it: input-bound and compute-bound cannot be told apart in this "
        "noise"
    ], notes
    # a wait share over its rule decides by itself; a loop every repeat of which is under 90%: settled
    r["results"]["dali-cpu"]["train"].update(wait_share=0.3)
    assert not [n for n in report.reliability(r) if "cannot be told apart" in n]


def test_a_run_logged_to_a_file_gets_the_demo_progress_as_log_lines(tmp_path):
    """``python -m gpupipe.bench > log 2>&1`` (a CI job, nohup) filled the log with tqdm's ``\\r`` redraws of the
    demo set's bar, up to ten a second, where the rest of gpupipe (``gpupipe.progress``) logs a line every few
    seconds; the rounds' bar is redrawn every ``LOG_EVERY_S`` at most and still ends ``bench: 100%``."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    flags = "--backends torchvision --no-train --demo-images 8 --batch-size 2 --steps 1 --warmup 1 --repeats 2"
    argv = [sys.executable, "-m", "gpupipe.bench", *flags.split(), "--threads", "1", "--image-size", "32"]
    proc = subprocess.run(
        [*argv, "--cache-dir", str(cache), "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "img/s]" not in proc.stderr and "image/s]" not in proc.stderr, proc.stderr
    assert not [part for part in proc.stderr.split("\r") if part.startswith("demo images")], proc.stderr
    assert "bench: 100%" in proc.stderr and "first repeat measured in" in proc.stderr
    assert json.loads((out / "bench.json").read_text())["settings"]["repeats"] == 2


def test_tiny_data_within_the_noise_names_no_winner_either():
    """On data whose timed windows crossed epoch boundaries, the last line named the faster median "fastest
    backend ..., on this data only" even where the two ranges overlapped."""
    r = two_backends([90.8, 80.9, 97.9], [89.3, 72.6, 91.0])
    for entry in r["results"].values():
        entry["train"]["batches"] = [{"warmup": 3, "timed": 6, "boundaries_timed": 2, "leftover_processes": 0}]
    last = advice.winner_line(r)
    assert last.startswith("fastest backend for training on this machine: no clear difference: dali-cpu"), last
    assert "on this data only" in last and "no ratio given" in last


def test_every_backend_failing_says_the_bench_json_there_is_an_earlier_runs(tmp_path, capsys, monkeypatch):
    from gpupipe.bench import runner

    folder, out = tmp_path / "data", tmp_path / "out"
    make_image_folder(folder, {"a": 4}, sizes=(40, 50))
    out.mkdir()
    (out / "bench.json").write_text("{}")
    monkeypatch.setattr(runner, "make_loader", lambda *a: (_ for _ in ()).throw(OSError("disk gone")))
    tiny = "--image-size 32 --batch-size 2 --steps 1 --warmup 1 --repeats 1 --threads 1 --no-train".split()
    status = main(["--data", str(folder), *tiny, "--backends", "torchvision", "--out", str(out)])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and last.startswith("error: every backend failed: torchvision: loader alone, repeat 1: OSError")
    assert f"; {out / 'bench.json'} is an earlier run's (written " in last and last.endswith("not this one's"), last
    assert (out / "bench.json").read_text() == "{}"


@pytest.mark.parametrize("name", ["bench.json", "results.JSON", "chart.png"])
def test_an_out_named_like_a_file_is_refused_naming_the_folder_meant(tmp_path, capsys, name):
    """``--out res/bench.json`` (the file the user wants) made a folder named ``bench.json`` and wrote
    ``res/bench.json/bench.json`` in it."""
    folder = tmp_path / "data"
    make_image_folder(folder, {"a": 4}, sizes=(40, 50))
    out = tmp_path / "res" / name
    tiny = "--image-size 32 --batch-size 2 --steps 1 --warmup 1 --repeats 1 --threads 1 --no-train".split()
    status = main(["--data", str(folder), *tiny, "--backends", "torchvision", "--out", str(out)])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and last == (
        f"error: --out {out}: --out is the folder bench.json and bench.png are written into, not a file's name: "
        f"pass --out {out.parent}"
    ), last
    assert not (tmp_path / "res").exists()
    out.mkdir(parents=True)  # a folder of that name, made on purpose, is a folder
    assert main(["--data", str(folder), *tiny, "--backends", "torchvision", "--out", str(out)]) == 0
    assert json.loads((out / "bench.json").read_text())["results"]["torchvision"]
