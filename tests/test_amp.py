"""The mixed-precision choice: flags, the probe's verdict, explicit choices; no timing asserted as a number."""

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
    fast = amp.choose_amp("cpu", step=sleeping_step({torch.float32: 0.03, torch.bfloat16: 0.005}), flags=WITH_AMX)
    assert fast.name == "bf16" and fast.dtype == torch.bfloat16
    assert "avx512_bf16/amx_bf16" in fast.reason and fast.probe["float32"] > fast.probe["bfloat16"]
    calls = []
    slow = amp.choose_amp("cpu", step=sleeping_step({torch.float32: 0.01, torch.bfloat16: 0.01}, calls),
                          flags=WITH_AMX)
    assert slow.name == "off" and "float32" in slow.reason and set(slow.probe) == {"float32", "bfloat16"}
    assert calls.count(torch.float32) == calls.count(torch.bfloat16) == 4, "one untimed and three timed calls each"
    assert calls[2:] == [torch.float32, torch.bfloat16] * 3, "the two precisions take turns"


def test_one_lucky_bf16_call_does_not_decide():
    """fp32 then bf16, three turns after one untimed call each: bf16 6x faster in the first turn only
    (the fastest calls alone would say 2x)."""
    times = iter([0.0, 0.0, 0.03, 0.005, 0.03, 0.03, 0.01, 0.03])
    choice = amp.choose_amp("cpu", step=lambda dtype: time.sleep(next(times)), flags=WITH_AMX)
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
