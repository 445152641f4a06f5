"""The mixed-precision choice: flags, the probe's verdict, explicit choices; no timing asserted as a number."""

import json
import subprocess
import sys
import time

import pytest
import torch

import gpupipe
from gpupipe import amp

NO_BF16 = {"avx512f": True, "avx512_bf16": False, "amx_bf16": False, "bf16": False}
WITH_AMX = {"avx512f": True, "avx512_bf16": True, "amx_bf16": True, "bf16": False}


def sleeping_step(seconds_by_dtype, calls=None):
    def step(dtype):
        if calls is not None:
            calls.append(dtype)
        time.sleep(seconds_by_dtype[dtype])
    return step


def test_a_cpu_without_bf16_instructions_gets_float32_without_a_probe():
    calls = []
    choice = amp.choose_amp("cpu", step=sleeping_step({}, calls), flags=NO_BF16)
    assert choice.name == "off" and choice.dtype == torch.float32 and not choice.enabled
    assert "no bf16 instructions" in choice.reason and calls == []


def test_a_cpu_with_bf16_gets_it_only_where_the_probe_finds_it_faster():
    fast = amp.choose_amp("cpu", step=sleeping_step({torch.float32: 0.03, torch.bfloat16: 0.005}), flags=WITH_AMX,
                          record=False)
    assert fast.name == "bf16" and fast.dtype == torch.bfloat16
    assert "avx512_bf16/amx_bf16" in fast.reason and fast.probe["float32"] > fast.probe["bfloat16"]
    calls = []
    slow = amp.choose_amp("cpu", step=sleeping_step({torch.float32: 0.01, torch.bfloat16: 0.01}, calls),
                          flags=WITH_AMX, record=False, repeats=3)
    assert slow.name == "off" and "float32" in slow.reason and set(slow.probe) == {"float32", "bfloat16"}
    assert calls.count(torch.float32) == calls.count(torch.bfloat16) == 4, "one untimed and three timed calls each"
    assert calls[2:] == [torch.float32, torch.bfloat16] * 3, "the two precisions take turns"


def test_one_lucky_bf16_call_does_not_decide():
    """fp32 then bf16, three turns after one untimed call each: bf16 6x faster in the first turn only
    (the fastest calls alone would say 2x)."""
    times = iter([0.0, 0.0, 0.03, 0.005, 0.03, 0.03, 0.01, 0.03])
    choice = amp.choose_amp("cpu", step=lambda dtype: time.sleep(next(times)), flags=WITH_AMX, record=False, repeats=3)
    assert choice.name == "off" and "least favourable turn" in choice.reason
    assert choice.probe["float32"] > choice.probe["bfloat16"], "the fastest calls alone favour bf16"


def test_explicit_choices_are_kept_and_unknown_ones_refused():
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("off", torch.float32)):
        choice = amp.choose_amp("cpu", name, flags=NO_BF16)
        assert choice.name == name and choice.dtype == dtype and choice.needs_scaler == (name == "fp16")
    with pytest.raises(ValueError, match="amp must be one of auto, bf16, fp16, off, got 'bfloat'"):
        amp.choose_amp("cpu", "bfloat")


def test_the_choice_is_recorded_with_its_reason():
    record = amp.choose_amp("cpu", "off").as_dict()
    assert record == {"choice": "off", "dtype": "float32", "reason": "off as asked (--amp off)", "probe_s_per_step": {}}
    info = amp.cpu_info()
    assert info["model"] and set(info["flags"]) == set(amp.REPORTED_FLAGS)
    assert amp.torch_build() == {"torch": torch.__version__, "cuda": torch.version.cuda}


def test_autocast_dtype_is_public_and_imports_no_bench_extra():
    assert gpupipe.autocast_dtype("cpu", "off") == torch.float32
    code = ("import sys, gpupipe; gpupipe.autocast_dtype('cpu', 'bf16'); "
            "print(sorted({'matplotlib', 'psutil'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


FAST_BF16 = {torch.float32: 0.02, torch.bfloat16: 0.002}


@pytest.fixture
def quiet_machine(monkeypatch, tmp_path):
    """A cache folder of the test's own and a machine the probe finds quiet."""
    monkeypatch.setenv("GPUPIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(amp, "machine_load", lambda: 0.1)
    return tmp_path / "cache"


def test_the_probe_runs_once_per_machine_and_its_choice_is_reused(quiet_machine):
    calls = []
    first = amp.choose_amp("cpu", step=sleeping_step(FAST_BF16, calls), flags=WITH_AMX)
    assert first.name == "bf16" and len(calls) == 2 * (1 + amp.PROBE_TURNS)
    records = list((quiet_machine / "precision").glob("*.json"))
    assert len(records) == 1
    body = json.loads(records[0].read_text())
    assert body["choice"] == "bf16" and body["description"] == amp.machine_description(torch.device("cpu"), WITH_AMX)
    assert set(body["description"]) == {"cpu", "flags", "torch", "device"}
    # a later call (another tool, a loaded machine, a step that would now say float32) reads the record
    again = amp.choose_amp("cpu", step=sleeping_step({torch.float32: 0.01, torch.bfloat16: 0.05}, calls),
                           flags=WITH_AMX)
    assert again.name == "bf16" and len(calls) == 2 * (1 + amp.PROBE_TURNS), "no second probe"
    assert "recorded in" in again.reason and str(records[0]) in again.reason
    assert again.probe == first.probe


def test_a_changed_machine_description_probes_again(quiet_machine, monkeypatch):
    calls = []
    assert amp.choose_amp("cpu", step=sleeping_step(FAST_BF16, calls), flags=WITH_AMX).name == "bf16"
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    slow = amp.choose_amp("cpu", step=sleeping_step({torch.float32: 0.01, torch.bfloat16: 0.03}, calls),
                          flags=WITH_AMX)
    assert slow.name == "off" and len(calls) == 4 * (1 + amp.PROBE_TURNS), "the new torch was probed"
    assert len(list((quiet_machine / "precision").glob("*.json"))) == 2
    other_flags = dict(WITH_AMX, avx512_fp16=True)
    amp.choose_amp("cpu", step=sleeping_step(FAST_BF16, calls), flags=other_flags)
    assert len(calls) == 6 * (1 + amp.PROBE_TURNS), "new CPU flags: probed again"


def test_the_override_wins_over_the_record(quiet_machine):
    assert amp.choose_amp("cpu", step=sleeping_step(FAST_BF16), flags=WITH_AMX).name == "bf16"
    forced = amp.choose_amp("cpu", "off", step=sleeping_step(FAST_BF16), flags=WITH_AMX)
    assert forced.name == "off" and forced.reason == "off as asked (--amp off)"


def test_a_busy_machine_is_not_probed_nor_recorded(quiet_machine, monkeypatch):
    monkeypatch.setattr(amp, "machine_load", lambda: 3.0)
    calls = []
    busy = amp.choose_amp("cpu", step=sleeping_step(FAST_BF16, calls), flags=WITH_AMX)
    assert busy.name == "off" and calls == [] and "too busy" in busy.reason and "load 3.0 per core" in busy.reason
    assert not (quiet_machine / "precision").exists()
    monkeypatch.setattr(amp, "machine_load", lambda: 0.1)
    assert amp.choose_amp("cpu", step=sleeping_step(FAST_BF16, calls), flags=WITH_AMX).name == "bf16"
    assert len(list((quiet_machine / "precision").glob("*.json"))) == 1


def test_a_damaged_record_is_probed_again(quiet_machine):
    amp.choose_amp("cpu", step=sleeping_step(FAST_BF16), flags=WITH_AMX)
    (record,) = (quiet_machine / "precision").glob("*.json")
    record.write_text("{not json")
    calls = []
    assert amp.choose_amp("cpu", step=sleeping_step(FAST_BF16, calls), flags=WITH_AMX).name == "bf16" and calls
    assert json.loads(record.read_text())["choice"] == "bf16"
