"""``python -m gpupipe.bench`` output that agrees with itself: a ratio to the baseline that the repeats cannot tell
from 1.0 is marked so in the table (as the last line says "no clear difference"), unfinished work never logs
"done", and the CPU advice gives the CPU share it rests on."""

import io
import logging

import pytest

from gpupipe.bench import __main__ as bench_main
from gpupipe.bench import advice, report
from gpupipe.progress import DELAY_S, Progress


def figure(runs, **extra):
    runs = list(runs)
    median = sorted(runs)[len(runs) // 2]
    return {"images_per_s": median, "min": min(runs), "max": max(runs), "runs": runs, **extra}


def with_baseline(dali_runs, base_runs, cpu_percent=None):
    """A report of ``bench.json``'s shape: the baseline and dali-cpu trained at these rates per repeat."""
    results = {}
    for name, runs in (("baseline", base_runs), ("dali-cpu", dali_runs)):
        results[name] = {
            "loader": figure([10 * r for r in runs]),
            "train": figure(runs, wait_share=0.0, fraction_of_ceiling=0.5),
            "verdict": {"bound": "input-bound", "suggestion": ""},
        }
        if cpu_percent is not None:
            results[name]["train_resources"] = {"cpu_percent": cpu_percent}
    median = results["baseline"]
    for entry in results.values():
        for phase in ("loader", "train"):
            entry[phase]["x_baseline"] = round(entry[phase]["images_per_s"] / median[phase]["images_per_s"], 2)
    return {
        "results": results,
        "ceiling": figure([200.0] * len(base_runs)),
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
            "repeats": len(base_runs),
            "image_size": 224,
        },
        "data": {"images": 1000},
        "reliability": [],
    }


def cells(r, name):
    rows = report.table_rows(r)
    header, row = rows[0], next(row for row in rows if row[0] == name)
    return [cell for head, cell in zip(header, row) if head == "x baseline"]


def test_a_ratio_within_the_spread_is_marked_so_in_the_table_and_the_json():
    """Overlapping ranges: the last line said "no clear difference" while the table read a bare "1.03x"."""
    r = with_baseline([103.0, 95.0, 110.0], [100.0, 92.0, 106.0])
    advice.conclude(r)
    assert "no clear difference" in r["winner"]
    loader, train = cells(r, "dali-cpu")
    assert train == "~1.03x (within spread)" and loader == "~1.03x (within spread)", (loader, train)
    assert cells(r, "baseline") == ["1.00x", "1.00x"]
    entry = r["results"]["dali-cpu"]["train"]
    assert entry["x_baseline"] == 1.03, "the number docs and benchmarks read is kept"
    assert entry["x_baseline_clear"] is False and entry["x_baseline_range"] == [0.9, 1.2]
    # ranges apart: the bare ratio, and the JSON says it is a clear difference
    r = with_baseline([120.0, 118.0, 122.0], [100.0, 99.0, 101.0])
    advice.conclude(r)
    assert cells(r, "dali-cpu") == ["1.20x", "1.20x"]
    assert r["results"]["dali-cpu"]["train"]["x_baseline_clear"] is True
    assert r["results"]["dali-cpu"]["train"]["x_baseline_range"] == [1.17, 1.23]


def test_a_ratio_from_one_repeat_is_marked_as_such():
    r = with_baseline([110.0], [100.0])
    advice.conclude(r)
    assert cells(r, "dali-cpu") == ["~1.10x (1 repeat)", "~1.10x (1 repeat)"]
    assert r["results"]["dali-cpu"]["train"]["x_baseline_clear"] is False
    assert "no clear difference" in r["winner"] and "1 repeat" in r["winner"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_work_stopped_midway_logs_that_it_was_interrupted_not_done(caplog, stop):
    clock, log = Clock(), logging.getLogger("test-bench8")
    with caplog.at_level(logging.INFO, logger="test-bench8"), pytest.raises(stop):
        with Progress("scan", total=10, unit="file", logger=log, stream=io.StringIO(), clock=clock) as p:
            clock.now = DELAY_S + 1
            p.update(3)
            raise stop()
    last = caplog.records[-1].getMessage()
    assert "done in" not in last and last.startswith("scan: 3/10 files") and "interrupted after 4 s" in last, last


def test_an_interrupted_demo_build_in_log_mode_says_interrupted(caplog, monkeypatch):
    """``python -m gpupipe.bench > log 2>&1`` stopped by Ctrl-C while building the demo set: the last line read
    "demo images: 40/200 images, ... (done in 12 s)"."""
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal: log lines
    bar = bench_main._DemoProgress()
    clock = Clock()
    bar.progress.clock, bar.progress.started = clock, 0.0
    with caplog.at_level(logging.INFO, logger=bench_main.logger.name):
        clock.now = DELAY_S + 9
        bar(40, 200)
        bar.close()  # what the bench's `finally` does on Ctrl-C
    last = caplog.records[-1].getMessage()
    assert last.startswith("demo images: 40/200 images") and "interrupted after 12 s" in last, last
    assert "done in" not in last
    # finished, it says done
    caplog.clear()
    bar = bench_main._DemoProgress()
    bar.progress.clock, bar.progress.started = clock, 0.0
    with caplog.at_level(logging.INFO, logger=bench_main.logger.name):
        bar(200, 200)
        bar.close()
    assert "done in 12 s" in caplog.records[-1].getMessage()


def test_cpu_advice_gives_the_measured_cpu_share():
    """On a CPU the tip said "loading and the model share the same 2 CPU cores" as the cause, from the verdict
    alone, though the bench measures the process tree's CPU time: it now gives the share."""
    busy = advice.suggestions(with_baseline([100.0, 99.0, 101.0], [100.0, 98.0, 102.0], cpu_percent=190.0))
    assert busy["dali-cpu"].startswith(
        "loading and the model share the same 2 CPU cores, which the training loop kept 95% busy (measured CPU "
        "time): pre-resize the images (shorter side ~256 px)"
    ), busy["dali-cpu"]
    idle = advice.suggestions(with_baseline([100.0, 99.0, 101.0], [100.0, 98.0, 102.0], cpu_percent=80.0))
    tip = idle["dali-cpu"]
    assert "kept only 40% busy (measured CPU time)" in tip and "not what holds it back" in tip, tip
    assert "pre-resize" not in tip
