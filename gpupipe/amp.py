"""Mixed precision chosen by what the machine does well.

    dtype = gpupipe.autocast_dtype(device)            # torch.bfloat16, torch.float16 or torch.float32
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = criterion(model(images), labels)        # float16 also wants a torch.amp.GradScaler

``auto`` picks bf16 on a GPU that supports it (float16 on an older one), and
on a CPU only where bf16 is faster: a CPU without bf16 instructions
(``avx512_bf16`` / ``amx_bf16`` in ``/proc/cpuinfo``) gets float32 without
further ado (emulated bf16 runs several times slower than float32), and one
with them gets a short probe, a few steps in both precisions taking turns,
bf16 being chosen only when it is clearly faster in every turn.

The probe decides once per machine: its choice is recorded in gpupipe's
cache folder (``precision/<key>.json`` under ``gpupipe.env.cache_dir()``)
with the machine's description (CPU model and flags, torch version, device),
and every later ``auto`` choice on that machine (the bench, the examples,
``choose_amp()``) reads it; a changed description probes again. A busy
machine (1-minute load average above ``QUIET_LOAD`` per core) is not
probed: it gets float32, unrecorded, until a quiet run decides.
``requested`` (``--amp``) overrides all of this.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import env
from .fileio import read_json_object, sha256_hex

logger = logging.getLogger(__name__)

#: What ``requested`` may be.
AMP_CHOICES = ("auto", "bf16", "fp16", "off")
#: bf16 is chosen on a CPU when the probe runs it at least this many times faster than float32.
MIN_SPEEDUP = 1.2
#: CPU flags that make bf16 fast on a CPU (x86: AVX-512 BF16, AMX; Arm: the BF16 extension).
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
#: The flags recorded (and shown) as the ones that matter.
REPORTED_FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "bf16")
#: Turns of the probe (one call in each precision per turn).
PROBE_TURNS = 5
#: The machine is quiet enough to probe when its 1-minute load average per usable core is at most this.
QUIET_LOAD = 0.75
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": torch.float32}

#: A step the probe times: runs once under autocast to the given dtype (``torch.float32``: no autocast).
ProbeStep = Callable[[torch.dtype], None]


@dataclass(frozen=True)
class AmpChoice:
    """The precision chosen, and why.

    Attributes:
        name: ``"bf16"``, ``"fp16"`` or ``"off"`` (float32).
        reason: one line saying why.
        probe: seconds per step in each precision, when a probe ran.
    """

    name: str
    reason: str
    probe: dict[str, float] = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        """The autocast dtype; ``torch.float32`` means no autocast."""
        return _DTYPES[self.name]

    @property
    def enabled(self) -> bool:
        return self.name != "off"

    @property
    def needs_scaler(self) -> bool:
        """float16 gradients need a ``torch.amp.GradScaler``."""
        return self.name == "fp16"

    def autocast(self, device_type: str) -> torch.autocast:
        """``torch.autocast`` for this choice (disabled for float32)."""
        return torch.autocast(device_type, dtype=self.dtype, enabled=self.enabled)

    def as_dict(self) -> dict:
        return {
            "choice": self.name,
            "dtype": str(self.dtype).replace("torch.", ""),
            "reason": self.reason,
            "probe_s_per_step": dict(self.probe),
        }


@functools.lru_cache(maxsize=1)
def cpu_info() -> dict:
    """This CPU's model name and its flags that matter for bf16 (from ``/proc/cpuinfo`` where there is one)."""
    flags: set[str] = set()
    model, named = platform.processor() or platform.machine(), False
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model name") and not named:
                    model, named = value.strip(), True
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "flags": {name: name in flags for name in REPORTED_FLAGS}}


def torch_build() -> dict:
    """torch's version and the CUDA it was built for (``None``: a CPU-only build)."""
    return {"torch": torch.__version__, "cuda": torch.version.cuda}


def choose_amp(
    device: str | torch.device,
    requested: str = "auto",
    *,
    step: ProbeStep | None = None,
    flags: dict[str, bool] | None = None,
    repeats: int = PROBE_TURNS,
    record: bool = True,
) -> AmpChoice:
    """Picks the autocast precision for ``device``.

    On a CPU with bf16 instructions ``auto`` is decided once per machine: the
    probe's choice is recorded in gpupipe's cache folder with the machine's
    description (CPU model and flags, torch version, device) and read back by
    every later call (the bench and the examples too); a busy machine is not
    probed and gets float32 until a quiet run records the choice.

    Args:
        device: where the model runs.
        requested: ``"auto"``, or ``"bf16"`` / ``"fp16"`` / ``"off"`` to force one.
        step: on a CPU with bf16 instructions, the step the probe times
            (default: a small convolutional network's training step).
        flags: the CPU's flags (default: ``cpu_info``'s); for tests.
        repeats: timed calls of ``step`` per precision (after one untimed call each).
        record: read this machine's recorded choice, and record a new probe's (above); ``False`` probes
            every time.

    Raises:
        ValueError: ``requested`` is not one of ``AMP_CHOICES``.
    """
    if requested not in AMP_CHOICES:
        raise ValueError(f"amp must be one of {', '.join(AMP_CHOICES)}, got {requested!r}")
    device = torch.device(device)
    if requested != "auto":
        return AmpChoice(requested, f"{requested} as asked (--amp {requested})")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return AmpChoice("bf16", f"{torch.cuda.get_device_name(device)} supports bf16")
        return AmpChoice("fp16", f"{torch.cuda.get_device_name(device)} has no bf16: fp16 with a GradScaler")
    if device.type != "cpu":
        return AmpChoice("off", f"no autocast choice for {device.type} devices: float32")
    flags = cpu_info()["flags"] if flags is None else flags
    found = [name for name in BF16_FLAGS if flags.get(name)]
    if not found:
        return AmpChoice(
            "off",
            f"this CPU has no bf16 instructions ({', '.join(BF16_FLAGS[:2])}), where bf16 runs "
            "emulated and slower: float32",
        )
    if not record:
        return _default_probe(tuple(found)) if step is None else _probe(step, found, repeats)
    description = machine_description(device, flags)
    path = record_path(description)
    kept = read_json_object(path)
    if kept is not None and kept.get("description") == description and kept.get("choice") in _DTYPES:
        return AmpChoice(kept["choice"], f"{kept['reason']} (recorded in {path}; --amp overrides)", kept["probe"])
    load = machine_load()
    if load > QUIET_LOAD:
        return AmpChoice(
            "off",
            f"this CPU has {'/'.join(found)}, but the machine is too busy to probe bf16 against float32 "
            f"(load {load:.1f} per core, above {QUIET_LOAD}): float32, not recorded; a quiet run probes "
            "and records the choice (or --amp bf16)",
        )
    choice = _default_probe(tuple(found)) if step is None else _probe(step, found, repeats)
    _write_record(path, description, choice)
    return choice


def machine_description(device: torch.device, flags: dict[str, bool] | None = None) -> dict:
    """What a recorded precision choice holds for: the CPU model and flags, torch's version, the device."""
    info = cpu_info()
    return {
        "cpu": info["model"],
        "flags": dict(info["flags"] if flags is None else flags),
        "torch": torch.__version__,
        "device": str(device),
    }


def record_path(description: dict) -> Path:
    """The file that holds the choice for ``description`` in gpupipe's cache folder."""
    key = sha256_hex(json.dumps(description, sort_keys=True), 16)
    return env.cache_dir("precision", f"{key}.json")


def machine_load() -> float:
    """The 1-minute load average per usable core (0 where the platform has none)."""
    if not hasattr(os, "getloadavg"):
        return 0.0
    return os.getloadavg()[0] / env.cores()


def _write_record(path, description: dict, choice: AmpChoice) -> None:
    """Writes the record atomically; a cache folder that cannot be written only costs a probe next time."""
    body = {"description": description, "choice": choice.name, "reason": choice.reason, "probe": choice.probe}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        with open(tmp, "w") as fh:
            json.dump(body, fh, indent=2)
        os.replace(tmp, path)
    except OSError as err:
        logger.warning("could not record the precision choice in %s: %s", path, err)


def _probe(step: ProbeStep, found, repeats: int = PROBE_TURNS) -> AmpChoice:
    """bf16 where it is faster in every pair of turns: a busy machine slows single calls at random (OpenMP
    threads waiting for a descheduled one), and one lucky bf16 call must not decide."""
    rounds = probe_rounds(step, (torch.float32, torch.bfloat16), repeats)
    fp32, bf16 = (min(r[k] for r in rounds) for k in (0, 1))
    timings = {"float32": round(fp32, 4), "bfloat16": round(bf16, 4)}
    speedup = min(a / b if b > 0 else 0.0 for a, b in rounds)
    has = f"this CPU has {'/'.join(found)}"
    if speedup >= MIN_SPEEDUP:
        return AmpChoice("bf16", f"{has} and a probe ran bf16 at least {speedup:.2f}x as fast as float32", timings)
    return AmpChoice(
        "off",
        f"{has}, but a probe ran bf16 only {speedup:.2f}x as fast as float32 in its "
        f"least favourable turn (bf16 needs >= {MIN_SPEEDUP:.2f}x in each): float32",
        timings,
    )


def probe_rounds(step: ProbeStep, dtypes: tuple[torch.dtype, ...], repeats: int = 3) -> list[tuple[float, ...]]:
    """Seconds of ``step(dtype)`` per dtype in each of ``repeats`` rounds, after one untimed call each;
    the dtypes take turns, so that a machine's drift hits them alike."""
    for dtype in dtypes:
        step(dtype)
    rounds = []
    for _ in range(repeats):
        times = []
        for dtype in dtypes:
            started = time.perf_counter()
            step(dtype)
            times.append(time.perf_counter() - started)
        rounds.append(tuple(times))
    return rounds


def probe_seconds(step: ProbeStep, dtypes: tuple[torch.dtype, ...], repeats: int = 3) -> tuple[float, ...]:
    """Per dtype, the fastest of ``probe_rounds``' calls."""
    rounds = probe_rounds(step, dtypes, repeats)
    return tuple(min(r[k] for r in rounds) for k in range(len(dtypes)))


@functools.lru_cache(maxsize=4)
def _default_probe(found) -> AmpChoice:
    """The probe with a small convolutional network (once per process)."""
    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(128, 10),
    ).to(memory_format=torch.channels_last)
    images = torch.randn(16, 3, 96, 96, generator=generator).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (16,), generator=generator)

    def step(dtype: torch.dtype) -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        model.zero_grad(set_to_none=True)

    return _probe(step, list(found))


def autocast_dtype(device: str | torch.device, requested: str = "auto") -> torch.dtype:
    """The dtype to autocast to on ``device``: ``torch.float32`` means no autocast (see ``choose_amp``)."""
    return choose_amp(device, requested).dtype


__all__ = [
    "AMP_CHOICES",
    "AmpChoice",
    "PROBE_TURNS",
    "QUIET_LOAD",
    "autocast_dtype",
    "choose_amp",
    "cpu_info",
    "machine_description",
    "torch_build",
]
