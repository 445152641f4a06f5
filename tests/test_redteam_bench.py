"""``python -m gpupipe.bench`` as a user runs it on their own data and arguments: mistakes refused before
anything is measured, naming the argument; a backend that fails listed with its reason; Ctrl-C keeping the
repeats measured; the baseline reading the files the gpupipe loaders read; text that agrees with the figures."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from helpers import make_image_folder
from servers import FolderServer, small_pack

from gpupipe.bench import advice, report, runner
from gpupipe.bench.__main__ import main
from gpupipe.bench.args import BenchError, choose_backends, parse_args
from gpupipe.bench.baseline import tutorial_loader
from gpupipe.bench.preflight import data_stats
from gpupipe.sources import as_source

#: The smallest whole run: resnet18 on 32 px crops, 1 batch of warm-up, 2 timed, one loader thread.
TINY = (
    "--model resnet18 --image-size 32 --batch-size 4 --steps 2 --train-steps 2 --warmup 1 --train-warmup 1 "
    "--repeats 1 --threads 1"
).split()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("redteam-bench") / "data"
    make_image_folder(root, {"a": 6, "b": 6}, sizes=(40, 60))
    return root


def error_of(argv, capsys):
    """``(exit status, stderr)`` of the bench run in this process."""
    status = main(argv)
    return status, capsys.readouterr().err


def assert_refused_up_front(status, err, start):
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(start), last
    assert "bench:" not in err and "Traceback" not in err, "refused before any round is measured"


def test_an_out_path_that_cannot_be_written_is_refused_before_measuring(folder, tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    for out in (tmp_path / "a-file", tmp_path / "a-file" / "sub"):
        status, err = error_of(["--data", str(folder), *TINY, "--out", str(out)], capsys)
        assert_refused_up_front(status, err, f"error: --out {out}: ")
    deeper = tmp_path / "new" / "deeper"
    status, err = error_of(
        ["--data", str(folder), *TINY, "--no-train", "--backends", "torchvision", "--out", str(deeper)], capsys
    )
    assert status == 0 and (deeper / "bench.json").is_file(), err
    assert not list(deeper.glob(".*")), "the write probe leaves nothing behind"


def test_a_batch_larger_than_the_data_is_refused_up_front_naming_both(folder, tmp_path, capsys):
    status, err = error_of(["--data", str(folder), *TINY, "--batch-size", "13", "--out", str(tmp_path)], capsys)
    assert_refused_up_front(status, err, "error: --batch-size 13 is more than the 12 images of --data")
    assert "pass --batch-size 12 or less" in err
    status, err = error_of(
        ["--demo-images", "5", "--batch-size", "32", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path)],
        capsys,
    )
    assert_refused_up_front(status, err, "error: --batch-size 32 is more than the 5 images of the demo set")
    assert "--demo-images 320" in err and not (tmp_path / "cache").exists(), "no demo set built to fail on"


def test_an_unknown_model_is_refused_up_front_with_the_one_meant(folder, tmp_path, capsys):
    status, err = error_of(["--data", str(folder), *TINY, "--model", "resnet500", "--out", str(tmp_path)], capsys)
    assert_refused_up_front(status, err, "error: --model: unknown torchvision model 'resnet500'")
    assert "(did you mean 'resnet50'?)" in err


def test_a_batch_that_cannot_fit_in_memory_is_one_line(folder, tmp_path, capsys):
    status, err = error_of(["--data", str(folder), *TINY, "--image-size", "100000", "--out", str(tmp_path)], capsys)
    assert_refused_up_front(status, err, "error: --batch-size 4 at --image-size 100000 needs ")
    assert "GiB" in err


def test_backends_named_twice_run_once_and_the_baseline_alone_on_a_pack_is_refused(tmp_path, capsys):
    assert choose_backends("torchvision, baseline,torchvision", on_gpu=False) == ["torchvision", "baseline"]
    assert choose_backends("ALL", on_gpu=False)[0] == "baseline"
    with pytest.raises(BenchError, match="'all' stands alone"):
        choose_backends("all,torchvision", on_gpu=False)
    packed = small_pack(tmp_path, 12, 6)
    status, err = error_of(["--data", str(packed), *TINY, "--backends", "baseline", "--out", str(tmp_path)], capsys)
    assert_refused_up_front(status, err, "error: --backends: the baseline reads only image folders")


def test_the_baseline_reads_the_files_and_classes_the_gpupipe_loaders_read(folder, tmp_path):
    """A Jupyter checkpoint folder (hidden, empty) stopped the tutorial loader mid-run; TIFFs it read and the
    gpupipe loaders leave out made the two measure different data."""
    import shutil

    from PIL import Image

    root = tmp_path / "data"
    shutil.copytree(folder, root)
    (root / ".ipynb_checkpoints").mkdir()
    (root / "a" / "sub").mkdir()
    shutil.copy(root / "a" / "img_000.jpg", root / "a" / "sub" / "nested.jpg")
    Image.new("RGB", (40, 40)).save(root / "b" / "scan.tif")
    source = as_source(root)
    config = _config(root, backends=("baseline",), repeats=1)
    dataset = tutorial_loader(config, source).dataset
    assert dataset.classes == source.classes == ["a", "b"]
    assert [p for p, _ in dataset.samples] == list(source.names) and len(dataset) == 13
    assert [t for _, t in dataset.samples] == list(source.labels)
    stats = data_stats(source)
    assert (stats["images"], stats["classes"]) == (13, 2), "the nested image is counted, the TIFF is not"


def test_a_pack_behind_a_url_is_benched(tmp_path, capsys):
    packed = small_pack(tmp_path, 12, 6)
    assert parse_args(["--data", "http://127.0.0.1:1/packed"]).data == "http://127.0.0.1:1/packed"
    server = FolderServer(packed.parent)
    try:
        status = main(
            [
                "--data",
                f"{server.url}/packed",
                *TINY,
                "--no-train",
                "--backends",
                "torchvision",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert status == 0, err
    bench = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert bench["data"]["images"] == 12 and bench["data"]["classes"] == 3
    assert list(bench["results"]) == ["torchvision"]


def _config(root, backends=("baseline", "torchvision"), repeats=2):
    settings = dict(model="resnet18", batch_size=4, image_size=32, steps=2, train_steps=2, warmup=1, train_warmup=1)
    return runner.BenchConfig(
        data=root,
        backends=backends,
        repeats=repeats,
        amp="off",
        threads=1,
        device=torch.device("cpu"),
        measure_training=False,
        **settings,
    )


def test_a_backend_that_fails_is_listed_with_its_reason_and_the_others_reported(folder, monkeypatch):
    real = runner.make_loader

    def failing(backend, config, source):
        if backend == "torchvision":
            raise RuntimeError("decoder exploded on img_003.jpg")
        return real(backend, config, source)

    monkeypatch.setattr(runner, "make_loader", failing)
    figures = runner.run(_config(folder))
    assert list(figures["results"]) == ["baseline"]
    assert figures["failed"] == {"torchvision": "loader alone, repeat 1: RuntimeError: decoder exploded on img_003.jpg"}
    full = {
        **figures,
        "machine": {"cpu_cores_usable": 2, "label": "cpu-2core"},
        "settings": {
            "model": "m",
            "batch_size": 4,
            "steps": 2,
            "warmup": 1,
            "repeats": 2,
            "image_size": 32,
            "measure_training": False,
        },
        "data": {"images": 12, "classes": 2},
        "reliability": [],
    }
    text = report.table(full)
    assert "FAILED (not in the table):\n- torchvision: loader alone, repeat 1: RuntimeError: decoder exploded" in text
    assert text.splitlines()[-1].endswith("; torchvision failed (see above)")
    monkeypatch.setattr(runner, "make_loader", lambda *a: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(
        BenchError,
        match=r"every backend failed: baseline: loader alone, repeat 1: OSError: disk "
        r"gone; torchvision: .*disk gone",
    ):
        runner.run(_config(folder))


def test_an_interrupt_keeps_the_repeats_measured(folder, monkeypatch):
    real = runner.fresh_stream
    rounds = []

    def interrupted(name, *args, **kwargs):
        rounds.append(name)
        if len(rounds) == 4:  # the second repeat's second loader
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(runner, "fresh_stream", interrupted)
    figures = runner.run(_config(folder, repeats=3))
    assert figures["interrupted"] == {"repeats_done": 1, "repeats_planned": 3}
    for entry in figures["results"].values():
        assert len(entry["loader"]["runs"]) == 1 and len(entry["loader"]["batches"]) == 1
    rounds.clear()
    monkeypatch.setattr(runner, "fresh_stream", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        runner.run(_config(folder))


def test_a_loader_stopped_by_the_same_ctrl_c_is_the_interrupt_not_a_failed_backend(folder, monkeypatch):
    """Ctrl-C reaches a DataLoader's worker processes too: the loader then raises "worker exited
    unexpectedly", which was taken for the backend failing, and the bench went on without it."""
    real, made = runner.make_loader, []

    class StoppedWorkers:
        def __len__(self):
            return 3

        def __iter__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, to the bench and its workers
            raise RuntimeError("DataLoader worker (pid(s) 12345) exited unexpectedly")

    def loader(backend, config, source):
        made.append(backend)
        return (
            StoppedWorkers() if backend == "torchvision" and made.count(backend) == 2 else real(backend, config, source)
        )

    monkeypatch.setattr(runner, "make_loader", loader)
    figures = runner.run(_config(folder, repeats=3))
    assert figures["failed"] == {} and list(figures["results"]) == ["baseline", "torchvision"]
    assert figures["interrupted"] == {"repeats_done": 1, "repeats_planned": 3}


def test_ctrl_c_in_a_real_run_prints_the_repeats_done_without_a_traceback(folder, tmp_path):
    flags = "--no-train --repeats 500 --backends baseline,torchvision --out".split()
    argv = [sys.executable, "-m", "gpupipe.bench", "--data", str(folder), *TINY, *flags, str(tmp_path / "out")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    for line in proc.stderr:  # tqdm redraws with \r; the revised estimate is a line of its own
        seen.append(line)
        if "first repeat measured" in line:
            break
    else:
        pytest.fail("".join(seen))
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the bench and its workers
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    bench = json.loads((tmp_path / "out" / "bench.json").read_text())
    done = bench["interrupted"]["repeats_done"]
    assert 1 <= done < 500 and bench["interrupted"]["repeats_planned"] == 500
    assert all(len(e["loader"]["runs"]) == done for e in bench["results"].values())
    assert f"WARNING: interrupted (Ctrl-C) after {done} of 500 repeats" in out
    assert f"{done} of 500 repeats of each" in out.splitlines()[0]
    assert out.strip().splitlines()[-1].endswith(f"; interrupted after {done} of 500 repeats")


def test_ctrl_c_before_a_repeat_ends_is_one_line(tmp_path):
    script = (
        "import sys; from gpupipe.bench import runner, __main__ as m\n"
        "def stop(*a, **k): raise KeyboardInterrupt\n"
        "runner.interleaved = stop\n"
        "sys.exit(m.main(sys.argv[1:]))\n"
    )
    folder = tmp_path / "data"
    make_image_folder(folder, {"a": 4}, sizes=(40, 50))
    proc = subprocess.run(
        [sys.executable, "-c", script, "--data", str(folder), *TINY, "--no-train", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "interrupted (Ctrl-C) before the first repeat ended: nothing measured"
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "bench.json").exists()


def _entry(fraction, wait):
    return {"train": {"fraction_of_ceiling": fraction, "wait_share": wait}}


def test_a_verdict_never_reads_as_its_own_threshold():
    """0.898 printed as "90% of the model's ceiling, under 90%"; a 9.96% wait as "data wait 10%" under a
    rule of 10% or more."""
    assert (
        advice.verdict_text(_entry(0.898, 0.0)) == "input-bound: 89.8% of the model's ceiling, under 90% (data wait 0%)"
    )
    assert advice.verdict_text(_entry(0.9, 0.0996)) == "compute-bound: 90% of the model's ceiling, data wait 9.96%"
    assert advice.verdict_text(_entry(0.5, 0.02)) == "input-bound: 50% of the model's ceiling, under 90% (data wait 2%)"


def test_cpu_advice_names_the_machines_cores_not_the_loader_threads():
    r = {
        "results": {
            "dali-cpu": {
                "train": {"images_per_s": 10.0, "min": 9.0, "max": 11.0, "fraction_of_ceiling": 0.5, "wait_share": 0.0}
            }
        },
        "settings": {"threads": 1, "device": "cpu"},
        "machine": {"cpu_cores_usable": 2},
    }
    assert advice.suggestions(r)["dali-cpu"].startswith("loading and the model share the same 2 CPU cores:")


def test_one_repeat_says_there_is_no_spread_to_judge_by():
    one = {"images_per_s": 10.0, "min": 10.0, "max": 10.0, "spread": 0.0, "runs": [10.0]}
    full = {"results": {"torchvision": {"loader": one}}, "machine": {"cpu_cores_usable": 2}, "settings": {"repeats": 1}}
    notes = report.reliability(full)
    assert any(n.startswith("1 repeat: no spread measured") for n in notes), notes
    full["settings"]["repeats"] = 2
    assert not report.reliability(full)


def test_a_pack_of_masks_is_refused_for_training_up_front(tmp_path, capsys):
    import numpy as np
    from PIL import Image

    import gpupipe
    from gpupipe.pack import PackSettings, pack

    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    for i in range(8):
        Image.fromarray(np.full((40, 48, 3), 30 * i, np.uint8)).save(tmp_path / "images" / f"{i}.jpg")
        Image.fromarray(np.full((40, 48), i % 2, np.uint8)).save(tmp_path / "masks" / f"{i}.png")
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", classes=["bg", "fg"])
    pack(source, tmp_path / "packed", PackSettings(), workers=1, progress=False)
    argv = ["--data", str(tmp_path / "packed"), *TINY, "--backends", "torchvision", "--out", str(tmp_path / "o")]
    status, err = error_of(argv, capsys)
    assert_refused_up_front(status, err, f"error: --data {tmp_path / 'packed'} holds masks: ")
    assert "--no-train" in err
    status, err = error_of([*argv, "--no-train"], capsys)
    assert status == 0, err


def test_running_out_of_memory_in_the_model_is_one_line_naming_the_batch(folder, tmp_path, capsys, monkeypatch):
    def oom(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 1.00 GiB free)")

    monkeypatch.setattr(runner.TrainStep, "run", oom)
    status, err = error_of(["--data", str(folder), *TINY, "--out", str(tmp_path)], capsys)
    assert status == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: out of memory training resnet18 at --batch-size 4, --image-size 32 (CUDA out of memory. Tried to "
        "allocate 2.00 GiB (GPU 0; 1.00 GiB free)): pass a smaller --batch-size or --image-size, or another --model"
    )


def test_the_bench_run_twice_in_one_process_logs_each_line_once(folder, tmp_path, capsys):
    for _ in range(2):
        status, err = error_of(["--data", str(folder), *TINY, "--batch-size", "13", "--out", str(tmp_path)], capsys)
        assert status == 2 and err.count("scanned 12 files") == 1 and "Logging error" not in err, err


@pytest.fixture
def dali_cpu_missing(monkeypatch):
    """``dali-cpu`` as on a machine without DALI: its module does not import."""
    import dataclasses

    from gpupipe.backends import REGISTRY

    info = dataclasses.replace(REGISTRY["dali-cpu"], module="gpupipe_no_such_dali")
    monkeypatch.setitem(REGISTRY, "dali-cpu", info)
    return info


def test_a_backend_named_that_cannot_run_here_is_refused_with_the_pip_command(dali_cpu_missing):
    with pytest.raises(
        BenchError,
        match=r"--backends: 'dali-cpu' cannot run here: backend 'dali-cpu' needs the "
        r"package 'gpupipe_no_such_dali'.*install it with: " + dali_cpu_missing.pip,
    ):
        choose_backends("torchvision,dali-cpu", on_gpu=False)
    assert "dali-cpu" not in choose_backends("all", on_gpu=False)


def test_advice_naming_a_backend_this_machine_lacks_says_so_and_how_to_get_it():
    slow = {"images_per_s": 10.0, "min": 9.0, "max": 11.0, "fraction_of_ceiling": 0.5, "wait_share": 0.3}
    r = {
        "results": {"baseline": {"train": slow}, "torchvision": {"train": slow}},
        "settings": {"threads": 8, "device": "cuda:0"},
        "machine": {"cpu_cores_usable": 8},
        "unavailable": {"dali": "backend 'dali' needs the package 'nvidia.dali' ...; install it with: pip install X"},
    }
    tips = advice.suggestions(r)
    for name in ("baseline", "torchvision"):
        assert tips[name] == (
            "decode and augment on the GPU: backend='dali' (not available here: backend 'dali' "
            "needs the package 'nvidia.dali' ...; install it with: pip install X)"
        )
