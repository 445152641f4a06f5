"""The bench's measurement code on fakes and tiny data; no timing is asserted as a number."""

import json
import statistics
import subprocess
import sys
import time

import pytest
import torch

from helpers import env_without, make_image_folder
from script_batch import run_scripts
from gpupipe.bench import estimate, measure, report, runner
from gpupipe.demo import photos as demo
from gpupipe.bench.__main__ import BenchError, main, parse_args


def fake_batches(sleep: float = 0.0, batch_size: int = 4):
    def gen():
        while True:
            if sleep:
                time.sleep(sleep)
            yield torch.zeros(batch_size, 3, 8, 8), torch.zeros(batch_size, dtype=torch.int64)
    return gen()


def sleeping_step(seconds: float):
    def step(images, labels):
        if seconds:
            time.sleep(seconds)
    return step


def run_loop(batches, step, repeats=2):
    measure.warm_up(batches, 1, step)
    return measure.Result.of(*map(list, zip(*(measure.time_training(batches, step, 4) for _ in range(repeats)))))


def test_a_sleeping_loader_is_input_bound():
    step = sleeping_step(0.002)
    train = run_loop(fake_batches(sleep=0.03), step)
    top = run_loop(measure.repeat_batch(next(fake_batches())), step)
    assert train.wait_share > 0.5 and len(train.wait_shares) == 2
    v = measure.verdict(train, top, backend="torchvision", on_gpu=True, threads=2)
    assert v.bound == "input-bound"
    assert v.fraction_of_ceiling < 0.5
    assert "dali" in v.suggestion


def test_a_sleeping_model_is_compute_bound():
    step = sleeping_step(0.03)
    train = run_loop(fake_batches(), step)
    top = run_loop(measure.repeat_batch(next(fake_batches())), step)
    assert train.wait_share < 0.05
    v = measure.verdict(train, top, backend="dali", on_gpu=True, threads=2)
    assert v.bound == "compute-bound" and v.suggestion == ""
    assert 0.8 < v.fraction_of_ceiling < 1.25


def test_loader_timing_counts_images_and_reports_medians():
    batches = fake_batches(batch_size=5)
    runs = [measure.time_loader(batches, 3) for _ in range(4)]
    result = measure.Result.of(runs)
    assert min(runs) > 0 and result.runs == runs
    assert result.images_per_s == statistics.median(runs) and result.wait_share is None


def test_forever_crosses_epochs_notes_boundaries_and_rejects_empty_loaders():
    ticks = iter(range(100))
    stream = measure.Stream([1, 2], clock=lambda: next(ticks))
    assert [next(stream) for _ in range(5)] == [1, 2, 1, 2, 1]
    assert stream.epochs == 3 and len(stream.boundaries) == 2
    with pytest.raises(ValueError, match="no batch"):
        next(measure.forever([]))


def test_a_noisy_measurement_is_flagged_and_so_are_its_verdicts():
    noisy = measure.Result.of([100.0, 160.0, 95.0, 150.0, 98.0])
    assert noisy.spread == pytest.approx((160 - 95) / 100)
    steady = measure.Result.of([100.0, 101.0, 99.0])
    assert steady.spread < measure.SPREAD_WARNING
    bench = {
        "results": {"baseline": {"loader": {"images_per_s": 100.0, "min": 95.0, "max": 160.0, "spread": noisy.spread}},
                    "dali-cpu": {"loader": {"images_per_s": 150.0, "min": 149.0, "max": 151.0, "spread": 0.013},
                                 "train": {"images_per_s": 10.3, "min": 10.0, "max": 10.5, "spread": 0.05,
                                           "fraction_of_ceiling": 1.03}}},
        "ceiling": {"images_per_s": 10.0, "min": 9.5, "max": 10.6, "spread": 0.11},
        "machine": {"cpu_cores_usable": 2},
        "load_during": {"load_average": [3.4], "other_processes_cpu_percent": 70.0},
    }
    notes = report.reliability(bench)
    assert any("baseline loader: repeats spread 65%" in n for n in notes)
    assert any("103% of the ceiling" in n and "equal within the noise" in n for n in notes)
    above = {**bench, "results": {"x": {"loader": bench["results"]["dali-cpu"]["loader"],
                                        "train": {"images_per_s": 13.0, "min": 12.9, "max": 13.1, "spread": 0.02,
                                                  "fraction_of_ceiling": 1.3}}}}
    assert any("slowed by something else" in n for n in report.reliability(above))
    assert any("load average 3.4 on 2 cores" in n for n in notes)
    assert any("other processes used 70% CPU" in n for n in notes)
    quiet = {**bench, "results": {"dali-cpu": {"loader": bench["results"]["dali-cpu"]["loader"]}},
             "load_during": {"load_average": [0.5], "other_processes_cpu_percent": 3.0}}
    assert report.reliability(quiet) == []


def test_the_table_shows_the_spread_and_the_warnings():
    bench = {"results": {"dali-cpu": {"loader": {"images_per_s": 150.0, "min": 100.0, "max": 190.0, "spread": 0.6}}},
             "machine": {"cpu_cores_usable": 2}, "settings": {"model": "m"}}
    bench["reliability"] = report.reliability(bench)
    text = report.table(bench)
    assert "150 (100-190)" in text and "WARNING: these figures may not be reliable" in text


def test_demo_images_look_like_photos(tmp_path):
    root = demo.ensure_demo(tmp_path, demo.DemoSpec(classes=2, per_class=3))
    stats = demo.folder_stats(root)
    assert stats["images"] == 6 and stats["classes"] == 2
    assert 300 <= stats["min_side"] and stats["max_side"] <= 700
    assert 40 < stats["mean_kib"] < 200  # photo-like JPEG sizes, not flat colour (~5) or noise (~400)
    assert demo.ensure_demo(tmp_path, demo.DemoSpec(classes=2, per_class=3)) == root  # cached


def test_large_demo_photos_are_the_scenes_enlarged(tmp_path):
    small = demo.folder_stats(demo.ensure_demo(tmp_path, demo.DemoSpec(classes=1, per_class=1)))
    root = demo.ensure_demo(tmp_path, demo.DemoSpec(classes=1, per_class=1, scale=3))
    large = demo.folder_stats(root)
    assert root.name.endswith("-x3") and large["images"] == 1 and large["min_side"] >= 900
    assert (large["mean_width"], large["mean_height"]) == (3 * small["mean_width"], 3 * small["mean_height"])


@pytest.fixture(scope="module")
def bench_commands(tmp_path_factory):
    """``python -m gpupipe.bench`` with ``--help``, then ``--data`` a missing and an empty folder, then two whole
    runs: ``"tiny"`` with the default augmentation and ``"heavy"`` with ``--augment heavy``, all in one process
    (script_batch.py: torch, torchvision and DALI imported once): ``(tmp, {case: {"returncode", "stdout",
    "stderr"}})``; the runs write into ``tmp / "<case>-out"``."""
    tmp = tmp_path_factory.mktemp("bench-commands")
    (tmp / "empty").mkdir()
    make_image_folder(tmp / "tiny", {"a": 8, "b": 8}, sizes=(40, 80))
    make_image_folder(tmp / "heavy", {"a": 6, "b": 6}, sizes=(40, 80))
    sizes = ["--backends", _backends(), "--model", "resnet18", "--batch-size", "4", "--image-size", "32", "--steps",
             "2", "--train-steps", "2", "--warmup", "1", "--train-warmup", "1", "--repeats", "1", "--threads", "1"]
    argvs = {"help": ["--help"], "missing": ["--data", str(tmp / "missing")], "empty": ["--data", str(tmp / "empty")],
             "tiny": ["--data", str(tmp / "tiny"), *sizes, "--out", str(tmp / "tiny-out")],
             "heavy": ["--data", str(tmp / "heavy"), *sizes, "--augment", "heavy", "--out", str(tmp / "heavy-out")]}
    results = run_scripts([{"module": "gpupipe.bench", "args": argv, "cwd": str(tmp)} for argv in argvs.values()],
                          tmp, timeout=600)
    return tmp, dict(zip(argvs, results))


@pytest.fixture(scope="module")
def bench_cli(bench_commands):
    """``{case: {"returncode", "stdout", "stderr"}}`` of :func:`bench_commands`."""
    return bench_commands[1]


def test_help_documents_every_flag(bench_cli):
    assert bench_cli["help"]["returncode"] == 0, bench_cli["help"]["stderr"]
    out = bench_cli["help"]["stdout"]
    for flag in ("--data", "--backends", "--model", "--batch-size", "--image-size", "--steps", "--train-steps",
                 "--warmup", "--train-warmup", "--repeats", "--amp", "--threads", "--dtype", "--no-train", "--demo-images",
                 "--cache-dir", "--out", "--augment", "--quick", "--thorough"):
        assert flag in out
    assert "one AMP training loop fed by every backend, measured side by side" in " ".join(out.split())


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "error: --batch-size must be >= 1, got 0"),
    (["--amp", "bfloat"], "error: argument --amp: invalid choice: 'bfloat'"),
    (["--backends", "nope"], "error: --backends: unknown backend 'nope'"),
    (["--backends", ","], "error: --backends: none given"),
    (["--quick", "--thorough"], "error: argument --thorough: not allowed with argument --quick"),
    (["--no-such-flag"], "error: unrecognized arguments: --no-such-flag"),
])
def test_every_bench_error_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "usage:" not in err


def test_quick_is_the_default_and_thorough_repeats_more():
    quick, thorough = parse_args([]), parse_args(["--thorough"])
    assert quick.mode == "quick" and thorough.mode == "thorough"
    assert quick.repeats < thorough.repeats and quick.train_steps < thorough.train_steps
    assert parse_args(["--thorough", "--repeats", "2"]).repeats == 2, "an explicit flag wins over the mode"
    with pytest.raises(BenchError, match="--repeats must be >= 1"):
        parse_args(["--repeats", "0"])


def _config(tmp_path, **changes):
    values = dict(data=tmp_path, backends=("baseline", "torchvision"), model="m", batch_size=32, image_size=224,
                  steps=20, train_steps=6, warmup=10, train_warmup=3, repeats=3, amp="off", threads=2,
                  device=torch.device("cpu"))
    values.update(changes)
    return runner.BenchConfig(**values)


def test_the_estimate_follows_the_measured_speed_and_never_says_zero_minutes(tmp_path):
    config = _config(tmp_path)
    slow = estimate.estimate(config, demo_images=1000, demo_image_s=0.2, step_s=0.5, workers=2)
    fast = estimate.estimate(config, demo_images=1000, demo_image_s=0.1, step_s=0.25, workers=2)
    assert slow.demo == pytest.approx(100.0) and fast.demo == pytest.approx(50.0)
    assert slow.rounds > fast.rounds > 0
    cached = estimate.estimate(config, demo_images=0, demo_image_s=0.1, step_s=0.25, workers=2)
    assert cached.demo == 0 and cached.rounds == fast.rounds
    more = estimate.estimate(_config(tmp_path, repeats=6), demo_images=0, demo_image_s=0.1, step_s=0.25, workers=2)
    assert more.rounds == pytest.approx(2 * cached.rounds)
    assert estimate.revised(config, 1, 40.0) == pytest.approx(2 * 40.0 + estimate.FIXED_S / 2)
    assert [estimate.duration(s) for s in (0.2, 12, 119, 125, 210)] == \
        ["about 5 s", "about 10 s", "about 120 s", "about 2 min", "about 3.5 min"]


def test_a_loader_alone_window_fits_in_one_epoch_where_it_can():
    assert measure.loader_window(20, 10, 31) == 20
    assert measure.loader_window(50, 10, 50) == 40, "the GPU demo set: 50 batches, 10 of them warm-up"
    assert measure.loader_window(20, 10, 12) == 20, "too short an epoch: the window crosses it"
    assert measure.loader_window(20, 10, None) == 20


def test_the_bench_times_the_batches_a_plain_loop_would(tmp_path):
    """Warm-up excluded, the same batches timed in every repeat, no epoch boundary inside the window,
    no earlier loader's workers alive: what a separate loader-alone loop measures."""
    make_image_folder(tmp_path / "data", {"a": 10, "b": 10}, sizes=(40, 60))
    config = _config(tmp_path / "data", backends=("baseline", "torchvision"), batch_size=2, image_size=32,
                     steps=50, warmup=3, repeats=2, threads=1, measure_training=False)
    figures = runner.run(config)
    for name in config.backends:
        batches = figures["results"][name]["loader"]["batches"]
        assert batches == [{"warmup": 3, "timed": 7, "boundaries_timed": 0, "leftover_processes": 0}] * 2, name


def test_no_loop_always_runs_right_after_the_same_one():
    names = ["ceiling", "baseline", "dali-cpu", "torchvision"]
    orders = [runner.rotated(names, r) for r in range(5)]
    assert orders[0] == names and all(sorted(order) == sorted(names) for order in orders)
    for name in names:
        before = {order[order.index(name) - 1] if order.index(name) else None for order in orders}
        assert len(before) > 1, f"{name} always follows {before}"


def test_an_earlier_loaders_workers_are_waited_for(tmp_path):
    before = runner._children()
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    started = time.perf_counter()
    assert runner.wait_for_children(before) == 0 and quick.poll() is not None
    assert time.perf_counter() - started > 0.2
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert runner.wait_for_children(before, timeout=0.1) == 1
    finally:
        stuck.kill()
        stuck.wait()


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_bad_data_is_one_line(bench_cli, case):
    proc = bench_cli[case]
    assert proc["returncode"] == 2 and proc["stderr"].startswith("error: --data: "), proc
    assert "Traceback" not in proc["stderr"] and proc["stderr"].count("\n") == 1


def test_a_missing_bench_extra_is_one_line_naming_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gpupipe.bench", "--data", str(tmp_path)], capture_output=True,
                          text=True, env=env_without(tmp_path / "absent", ["psutil", "matplotlib"]), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == ("error: python -m gpupipe.bench needs the bench extra (missing: psutil, matplotlib): "
                           "pip install 'gpupipe[bench]'\n")


def test_bench_end_to_end_on_tiny_data(bench_commands):
    tmp, runs = bench_commands
    out, proc, backends = tmp / "tiny-out", runs["tiny"], _backends()
    assert proc["returncode"] == 0, proc["stderr"]
    bench = json.loads((out / "bench.json").read_text())
    assert (out / "bench.png").stat().st_size > 10_000
    assert list(bench["results"]) == backends.split(",")
    assert bench["data"]["images"] == 16
    assert bench["machine"]["label"].startswith("cpu-") or bench["machine"]["gpu"]
    for entry in bench["results"].values():
        assert entry["loader"]["images_per_s"] > 0
        assert 0 <= entry["train"]["wait_share"] <= 1
        assert entry["verdict"]["bound"] in ("input-bound", "compute-bound")
        assert entry["loader_resources"]["peak_rss_mib"] > 0
    assert bench["results"]["baseline"]["loader"]["x_baseline"] == 1.0
    assert bench["ceiling"]["images_per_s"] > 0
    for entry in bench["results"].values():
        assert entry["loader"]["min"] <= entry["loader"]["images_per_s"] <= entry["loader"]["max"]
    assert "| backend" in proc["stdout"] and "this bench (quick mode) will take about" in proc["stderr"]
    last = proc["stdout"].strip().splitlines()[-1]
    assert last.startswith("fastest backend for training on this machine: ") and last == bench["winner"]
    assert any(name in last for name in bench["results"]) and "bound" in last
    assert all(entry["verdict"]["reason"].startswith(entry["verdict"]["bound"]) for entry in bench["results"].values())
    assert "bench: 100%" in proc["stderr"] and "mixed precision: " in proc["stderr"]
    assert bench["amp"]["choice"] in ("bf16", "off") and bench["amp"]["reason"] in proc["stderr"]
    assert set(bench["machine"]["cpu_flags"]) >= {"avx512_bf16", "amx_bf16"} and bench["machine"]["cpu"]
    assert bench["machine"]["torch_build"] == {"torch": torch.__version__, "cuda": torch.version.cuda}
    assert bench["estimate"]["planned_s"] > 0 and bench["settings"]["mode"] == "quick"


def test_bench_heavy_augmentation_runs(bench_commands):
    tmp, runs = bench_commands
    out, proc = tmp / "heavy-out", runs["heavy"]
    assert proc["returncode"] == 0, proc["stderr"]
    bench = json.loads((out / "bench.json").read_text())
    assert bench["settings"]["augment"] == "heavy"
    assert all(entry["train"]["images_per_s"] > 0 for entry in bench["results"].values())


def _backends() -> str:
    """The bench runs' ``--backends``: the baseline, torchvision and, where DALI is installed, dali-cpu."""
    return "baseline,torchvision" + (",dali-cpu" if _has_dali() else "")


def _has_dali():
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True
