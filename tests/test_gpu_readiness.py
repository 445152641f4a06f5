"""What the GPU path relies on, tested on the CPU with fakes: buffer lifetime, runs across epochs
and the background build, decoder settings, threads, and dali-cpu feeding a GPU with uint8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gpupipe
from gpupipe import backends
from gpupipe.loading.transfer import _constants, normalize_uint8
from gpupipe.errors import ErrorPolicy
from gpupipe.plan.spec import build_spec
from helpers import env_without, flat_folder, make_image_folder, needs_dali


class FakeEvent:
    """A CUDA event stand-in: completes when the test says so."""

    def __init__(self, clock):
        self.clock = clock
        self.recorded_at = clock["now"]

    def query(self):
        return self.clock["done"] >= self.recorded_at


def test_keep_alive_holds_buffers_until_the_consumers_stream_has_passed_them():
    from gpupipe.backends.dali.lifetime import KeepAlive

    clock = {"now": 0, "done": -1}
    keep = KeepAlive(lambda: FakeEvent(clock))
    keep.handed_out(["batch0"])
    assert keep.held == 1
    clock["now"] = 1
    keep.asked_again()  # the consumer has queued its work on batch 0; the GPU has not run it yet
    keep.handed_out(["batch1"])
    assert keep.held == 2, "batch 0 is still held: its kernels may not have run"
    clock["now"], clock["done"] = 2, 1  # the GPU passed the event recorded for batch 0
    keep.asked_again()
    assert keep.held == 1, "batch 0 released once its event completed; batch 1's event is pending"
    synced = []
    keep.release_all(lambda: synced.append(True))
    assert keep.held == 0 and synced == [True]


@needs_dali
def test_decoder_settings_reach_the_gpu_decoder_only():
    from gpupipe.backends.dali.decoder import DecoderSettings, decoder_kwargs

    settings = DecoderSettings(hw_decoder_load=0.9, width_hint=640, height_hint=480)
    gpu = decoder_kwargs(True, settings)
    assert gpu["device"] == "mixed" and gpu["hw_decoder_load"] == 0.9
    assert (gpu["preallocate_width_hint"], gpu["preallocate_height_hint"]) == (640, 480)
    assert "hw_decoder_load" not in decoder_kwargs(False, settings)


@needs_dali
def test_preallocation_hints_are_the_99th_percentile_of_the_scanned_sizes(tmp_path):
    from gpupipe.backends.dali.decoder import decoder_settings

    root = tmp_path / "data"
    make_image_folder(root, {"a": 50}, sizes=(40, 200), seed=1)
    source = gpupipe.ImageFolder(root)
    config = gpupipe.LoaderConfig(batch_size=4, hw_decoder_load=0.5, preallocate="auto")
    sizes = source.sizes()
    settings = decoder_settings(config, sizes)
    assert settings.height_hint == int(np.percentile(sizes[:, 0], 99))
    assert settings.width_hint == int(np.percentile(sizes[:, 1], 99))
    assert settings.hw_decoder_load == 0.5


@needs_dali
def test_dali_cpu_feeding_a_gpu_makes_uint8_and_normalises_there(image_folder):
    from gpupipe.backends.dali import DaliBackend

    source = gpupipe.ImageFolder(image_folder)
    source.scan()
    spec = build_spec(gpupipe.presets.train(32))
    config = gpupipe.LoaderConfig(batch_size=4, num_threads=1)
    backend = DaliBackend(source, spec, config, backends.Placement(torch.device("cuda"), 1), ErrorPolicy("raise"),
                          gpu=False)
    assert backend.finish_on_gpu and backend.graph_spec.output.dtype == "uint8"
    assert spec.output.dtype == "float32", "the batch contract is unchanged"
    backend.close()


def test_normalisation_constants_are_made_once_per_device():
    spec = build_spec(gpupipe.presets.train(8))
    images = torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8)
    _constants.cache_clear()
    normalize_uint8(images, spec)
    normalize_uint8(images, spec)
    assert _constants.cache_info().hits == 1 and _constants.cache_info().misses == 1


@needs_dali
def test_short_epochs_share_one_pipeline_and_the_next_run_is_built_ahead(tmp_path, monkeypatch):
    from gpupipe.backends.dali import backend as dali
    from gpupipe.backends.dali.graph import Pipelines

    root = flat_folder(tmp_path / "data", 12)
    built = []
    original = Pipelines.run
    monkeypatch.setattr(Pipelines, "run", lambda self, refs: built.append(refs[0].key) or original(self, refs))
    monkeypatch.setattr(dali, "RUN_SAMPLES", 48)  # 4 epochs of 12 samples per run
    loader = gpupipe.loader(root, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")], batch_size=4,
                            backend="dali-cpu", num_threads=1)
    for _ in range(6):
        assert len(list(loader)) == 3
    ahead = loader._backend._next
    assert ahead is not None and ahead.result().next_key == (8, 0), "the run after is being built while this one is read"
    assert built == [(0, 0), (4, 0), (8, 0)], "one pipeline per 4 epochs"
    loader.set_epoch(20)  # a jump: the run ahead does not fit, a new one is built
    list(loader)
    assert built[-1] == (20, 0)


@needs_dali
def test_a_resumed_or_jumping_loader_reads_the_same_batches_as_a_fresh_one(tmp_path):
    root = flat_folder(tmp_path / "data", 10)
    pipeline = [gpupipe.Decode(), gpupipe.RandomResizedCrop(8), gpupipe.Output("uint8")]
    long_run = gpupipe.loader(root, pipeline, batch_size=4, backend="dali-cpu", num_threads=1, seed=2)
    for _ in range(3):
        list(long_run)
    third = [x for x, _ in long_run]  # epoch 3, read by a pipeline that started at epoch 0
    fresh = gpupipe.loader(root, pipeline, batch_size=4, backend="dali-cpu", num_threads=1, seed=2)
    fresh.set_epoch(3)
    again = [x for x, _ in fresh]
    assert len(third) == len(again) == 3, "10 images in batches of 4"
    assert all(torch.equal(a, b) for a, b in zip(third, again)), \
        "augmentations depend on (seed, epoch, slot), not on which pipeline read them"


def test_gpu_proof_refuses_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_proof.py"
    proc = subprocess.run([sys.executable, str(script), "--out", "/tmp/never-written"], capture_output=True, text=True,
                          timeout=120, env={**os.environ})
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr
    assert not Path("/tmp/never-written").exists()


NOT_ON_THE_GPU_MACHINE = ("hypothesis", "moto", "s3fs", "aiohttp", "matplotlib", "psutil")


@pytest.mark.slow
def test_the_cuda_tests_collect_on_a_machine_with_only_torch_and_pytest(tmp_path):
    """The GPU machine has torch, torchvision and pytest but not the test extra: the proof's
    ``pytest -m cuda`` must collect the same tests there instead of stopping at an import."""
    def start(env):  # both collections at once: each spends its time importing, on one core
        return subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "cuda",
                                 "-p", "no:cacheprovider", "tests"], cwd=Path(__file__).parents[1], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def collected(proc):
        stdout, _ = proc.communicate(timeout=300)
        return proc.returncode, sorted(line for line in stdout.splitlines() if "::" in line), stdout

    bare_env = {**env_without(tmp_path, NOT_ON_THE_GPU_MACHINE), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    full_proc, bare_proc = start(dict(os.environ)), start(bare_env)
    (full_exit, full, _), (bare_exit, bare, bare_out) = collected(full_proc), collected(bare_proc)
    assert full_exit == 0 and len(full) > 100
    assert bare_exit == 0, bare_out[-3000:]
    assert bare == full


def _proof(out: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_proof.py"
    return subprocess.run([sys.executable, str(script), "--out", str(out), *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "GPUPIPE_CACHE": str(cache)})


def test_gpu_proof_steps_are_checked_before_anything_runs(tmp_path):
    proc = _proof(tmp_path / "out", "--steps", "epochs,bench-resnet5", cache=tmp_path / "cache")
    assert proc.returncode == 2 and "--steps: unknown bench-resnet5; choose from tests, data," in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.slow
@needs_dali
def test_gpu_proof_runs_in_parts_whose_figures_add_up(tmp_path, proof_cache):
    """Device calls are limited to minutes: the proof runs a few steps per call into one OUT."""
    out, cache = tmp_path / "out", proof_cache
    first = _proof(out, "--rehearse", "--steps", "epochs", cache=cache)
    assert first.returncode == 0, first.stderr[-2000:]
    second = _proof(out, "--rehearse", "--steps", "hw_decoder_load,decode_tolerance", cache=cache)
    assert second.returncode == 0, second.stderr[-2000:]
    figures = json.loads((out / "figures.json").read_text())
    assert set(figures["seconds"]) == {"data", "epochs", "hw_decoder_load", "decode_tolerance"}, \
        "data came along; tests did not"
    tolerance = figures["decode_tolerance"]
    assert [tolerance[k]["images"] for k in ("0.0", "0.65", "1.0")] == [32, 32, 32]
    assert max(v["max"] for v in tolerance.values()) <= 0.5, "dali-cpu decodes as PIL does (both libjpeg-turbo)"
    assert figures["epochs"]["batches_per_epoch"] == 5 and set(figures["hw_decoder_load"]) == {"0.0", "0.3", "0.65",
                                                                                                "0.9", "1.0"}
    summary = (out / "summary.md").read_text()
    assert '"batches_per_epoch": 5' in summary and '"0.65":' in summary and "Failed steps" not in summary
    assert not [p for p in out.rglob("*") if p.suffix in (".tar", ".jpg")], "the data stay in the cache, not in OUT"
