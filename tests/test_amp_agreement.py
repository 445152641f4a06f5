"""One precision decision per machine, read alike by ``choose_amp()``, the bench's precision step and the
examples (issue #34: they disagreed on one machine). The probe is a sleeping step; no speed is asserted."""

import argparse
import json
import time
from pathlib import Path

import pytest
import torch
from helpers import load_example

import gpupipe
from gpupipe import amp
from gpupipe.bench.__main__ import choose_precision
from gpupipe.bench.runner import BenchConfig, TrainStep, kept_batch

WITH_AMX = {"avx512f": True, "avx512_bf16": True, "amx_bf16": True, "bf16": False}
CPU = torch.device("cpu")


def sleeping_step(seconds_by_dtype):
    def step(dtype):
        time.sleep(seconds_by_dtype[dtype])
    return step


@pytest.fixture
def bf16_machine(monkeypatch, tmp_path):
    """A quiet CPU with bf16 instructions, and a cache folder of the test's own."""
    monkeypatch.setenv("GPUPIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(amp, "machine_load", lambda: 0.1)
    monkeypatch.setattr(amp, "cpu_info", lambda: {"model": "test CPU", "flags": dict(WITH_AMX)})
    return tmp_path / "cache"


def bench_choice(requested: str = "auto"):
    config = BenchConfig(data=Path("."), backends=("torchvision",), model="shufflenet_v2_x0_5", batch_size=2,
                         image_size=32, steps=1, train_steps=1, warmup=0, train_warmup=0, repeats=1, amp=requested,
                         threads=1, device=CPU)
    train_step = TrainStep(config, num_classes=3)
    choice, step_s = choose_precision(argparse.Namespace(amp=requested), CPU, train_step, kept_batch(config, 3))
    assert train_step.amp == choice and step_s > 0
    return choice


def example_choice(requested: str = "auto"):
    load_example("train_imagefolder")  # puts examples/ on sys.path, as running a script does
    import _common

    return _common.amp(CPU, requested)


def test_the_bench_the_examples_and_choose_amp_read_one_record(bf16_machine):
    # the first probe decides (here: bf16 ten times as fast) and is recorded
    first = amp.choose_amp(CPU, step=sleeping_step({torch.float32: 0.02, torch.bfloat16: 0.002}))
    assert first.name == "bf16"
    (record,) = (bf16_machine / "precision").glob("*.json")
    # every later auto choice, whatever tool asks and whatever its own probe would now say, reads it
    answers = {"choose_amp": gpupipe.choose_amp(CPU), "bench": bench_choice(), "example": example_choice(),
               "autocast_dtype": gpupipe.autocast_dtype(CPU)}
    assert answers["autocast_dtype"] == torch.bfloat16
    for tool in ("choose_amp", "bench", "example"):
        assert answers[tool].name == "bf16", tool
        assert str(record) in answers[tool].reason and "--amp overrides" in answers[tool].reason, tool
    assert list((bf16_machine / "precision").glob("*.json")) == [record]
    assert json.loads(record.read_text())["choice"] == "bf16"


def test_a_busy_machine_without_a_record_gives_every_tool_float32_and_records_nothing(bf16_machine, monkeypatch):
    monkeypatch.setattr(amp, "machine_load", lambda: 4.0)
    answers = [gpupipe.choose_amp(CPU), bench_choice(), example_choice()]
    assert [a.name for a in answers] == ["off"] * 3
    assert all("too busy" in a.reason for a in answers)
    assert not (bf16_machine / "precision").exists()


def test_amp_overrides_the_record_in_every_tool(bf16_machine):
    amp.choose_amp(CPU, step=sleeping_step({torch.float32: 0.02, torch.bfloat16: 0.002}))
    answers = [gpupipe.choose_amp(CPU, "off"), bench_choice("off"), example_choice("off")]
    assert [(a.name, a.reason) for a in answers] == [("off", "off as asked (--amp off)")] * 3
