"""The DALI backend's host work per batch, and its decoder choices (issue #25).

Per batch, the host thread that also launches the model's kernels should
do what a hand-written DALI pipeline does and little more: the planned
parameters reach the pipeline in one feed per batch, drawn a few batches
ahead on a background thread; the GPU's ROI decode is set up so that
nvImageCodec neither refuses it nor logs a warning per image; and
``hw_decoder_load="auto"`` measures a few shares once.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpupipe
from helpers import make_image_folder, needs_cuda, needs_dali

pytestmark = needs_dali


def _loader(root, **kwargs):
    kwargs = {"batch_size": 4, "backend": "dali-cpu", "device": "cpu", "num_threads": 1, **kwargs}
    return gpupipe.loader(root, "train", **kwargs)


def test_parameters_are_drawn_once_per_run_and_fed_once_per_batch(tmp_path, monkeypatch):
    from gpupipe.backends.dali import graph
    from gpupipe.backends.dali.params import PLAN_BATCHES
    from gpupipe.plan import Planner

    make_image_folder(tmp_path / "data", {"a": 6, "b": 6}, seed=3)
    plans, feeds = [], []
    real_plan = Planner.plan
    monkeypatch.setattr(Planner, "plan", lambda self, epoch, positions, *a, **k:
                        plans.append(len(positions)) or real_plan(self, epoch, positions, *a, **k))
    real_feed = graph.Pipelines._feed
    monkeypatch.setattr(graph.Pipelines, "_feed", lambda self, ref: feeds.append(ref.key) or real_feed(self, ref))
    loader = _loader(tmp_path / "data")
    seen = 0
    for epoch in range(3):
        loader.set_epoch(epoch)
        seen += sum(len(labels) for _, labels in loader)
    assert seen == 36
    # the trace draws one sample; then the run (thousands of these short epochs) is drawn PLAN_BATCHES
    # batches at a time as it is read, the next chunk ahead: 9 batches need 2 chunks and start a third
    assert plans[0] == 1 and plans[1:3] == [4 * PLAN_BATCHES] * 2 and plans[3:] in ([], [4 * PLAN_BATCHES])
    # one feed per batch: 9 read, and at most the prefetch queue's 2 ahead
    assert len(feeds) == len(set(feeds)) and 9 <= len(feeds) <= 11
    assert set(feeds) >= {(e, b) for e in range(3) for b in range(3)}


def test_a_run_planned_at_once_gives_every_batch_the_parameters_planned_batch_by_batch(tmp_path):
    from gpupipe.backends.dali.run import BatchRef

    make_image_folder(tmp_path / "data", {"a": 5, "b": 5}, seed=4)
    loader = _loader(tmp_path / "data", batch_size=3)
    pipelines = loader._backend.pipelines
    refs = [BatchRef(epoch, b, np.array([3 * b, 3 * b + 1, 3 * b + 2]) % 10, np.arange(3 * b, 3 * b + 3), 3)
            for epoch in (0, 1) for b in range(3)]
    packed = pipelines._plan(refs)
    assert [p.shape[0] for p in packed] == [18] * len(packed) and len(packed) == pipelines.layout.outputs >= 1
    for k, ref in enumerate(refs):
        plan = pipelines.planner.plan(ref.epoch, ref.positions, pipelines.sizes[ref.indices])
        for whole, alone in zip(packed, pipelines.layout.pack(plan.steps, 3)):
            np.testing.assert_array_equal(whole[3 * k:3 * k + 3], alone)


def test_packed_parameters_come_out_of_the_graph_as_planned():
    from nvidia.dali import fn, pipeline_def

    from gpupipe.backends.dali.params import ParamLayout

    steps = [{"size": np.array([[7, 9], [11, 13]], np.int64), "affine": np.arange(12, dtype=np.float32).reshape(2, 2, 3),
              "flip": np.array([True, False])},
             {"sigma": np.array([0.5, 1.5], np.float32), "ops": np.array([[1, 2], [3, 4]], np.int32)}]
    keys = [(0, "affine"), (0, "flip"), (0, "size"), (1, "ops"), (1, "sigma")]
    layout = ParamLayout(steps, keys)
    assert (layout.float_width, layout.int_width) == (7, 5)
    packed = layout.pack(steps, 2)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        rows = fn.external_source(source=lambda: packed, num_outputs=layout.outputs, batch=True)
        params = layout.nodes(rows)
        return tuple(params[key] for key in keys)

    p = pipe()
    p.build()
    outputs = p.run()
    for key, out in zip(keys, outputs):
        want = steps[key[0]][key[1]]
        got = np.stack([np.asarray(out[i]) for i in range(2)])
        assert got.shape == want.shape, key
        np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_the_gpu_roi_decode_does_not_ask_for_fancy_upsampling():
    """nvImageCodec refuses a ROI with fancy upsampling on 4:2:0 JPEGs (nvJPEG < 13.2): a warning per
    image and a slower decoder. Full decodes keep fancy upsampling (PIL's)."""
    from gpupipe.backends.dali.decoder import DecoderSettings, decoder_kwargs
    from gpupipe.backends.dali.lowering import roi_decoder

    settings = DecoderSettings(hw_decoder_load=0.65)
    gpu, cpu = decoder_kwargs(True, settings), decoder_kwargs(False, settings)
    assert gpu["jpeg_fancy_upsampling"] is True and cpu["jpeg_fancy_upsampling"] is True
    assert roi_decoder(gpu) == {**gpu, "jpeg_fancy_upsampling": False}
    assert roi_decoder(cpu) == cpu


def test_auto_hw_decoder_load_keeps_the_fastest_share_and_logs_what_it_measured(caplog):
    from gpupipe.backends.dali.calibrate import choose_hw_decoder_load

    for peak in (0.65, 1.0, 0.2):
        asked = []

        def rate(load):
            asked.append(load)
            return 20_000 - 30_000 * abs(load - peak)

        with caplog.at_level(logging.INFO, logger="gpupipe.backends.dali.calibrate"):
            best, figures = choose_hw_decoder_load(rate)
        assert len(asked) <= 5 and len(set(asked)) == len(asked)
        assert abs(best - peak) <= 0.15 and figures[best] == max(figures.values())
        assert f"chose {best:.2f}" in caplog.text


def test_hw_decoder_load_is_auto_by_default_and_checked():
    from gpupipe.backends.dali.decoder import DecoderSettings

    assert DecoderSettings().hw_decoder_load == "auto"
    assert gpupipe.LoaderConfig(batch_size=1).hw_decoder_load == "auto"
    with pytest.raises(ValueError, match="hw_decoder_load must be 'auto' or a number in \\[0, 1\\], got 'fast'"):
        gpupipe.loader(".", "train", batch_size=4, hw_decoder_load="fast")


def test_dali_cpu_never_calibrates(tmp_path, monkeypatch):
    from gpupipe.backends.dali import graph

    measured = []
    monkeypatch.setattr(graph, "remembered_hw_decoder_load", lambda *a, **k: measured.append(a) or (0.65, {}))
    make_image_folder(tmp_path / "data", {"a": 8}, seed=5)
    loader = _loader(tmp_path / "data")
    assert sum(len(labels) for _, labels in loader) == 8
    assert measured == [] and loader._backend.pipelines.hw_decoder_load is None


@needs_cuda
def test_a_gpu_run_prints_no_dali_warning_lines(tmp_path):
    """Counts stderr lines of two epochs of the ``dali`` backend on 4:2:0 JPEGs, in a subprocess."""
    make_image_folder(tmp_path / "data", {"a": 24, "b": 24}, sizes=(200, 320), seed=6)
    script = textwrap.dedent(f"""
        import gpupipe
        loader = gpupipe.loader({str(tmp_path / 'data')!r}, "train", batch_size=16, backend="dali", device="cuda")
        for epoch in range(2):
            loader.set_epoch(epoch)
            assert sum(len(labels) for _, labels in loader) == 48
        print("done")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if "warn" in line.lower() or "fancy upsampling" in line]
    assert warnings == []


def test_a_default_run_prints_no_warning_lines(tmp_path):
    """Counts stderr lines of a run that builds several RandAugment pipelines at once (traces in the
    main thread while runs build in the background), in a subprocess with Python's default filters."""
    make_image_folder(tmp_path / "data", {"a": 12, "b": 12}, sizes=(64, 96), seed=7)
    script = textwrap.dedent(f"""
        import gpupipe
        ops = gpupipe.presets.train(32, auto_augment="rand-m9-n2", random_erasing=0.25)
        loaders = [gpupipe.loader({str(tmp_path / 'data')!r}, ops, batch_size=8, backend="dali-cpu", device="cpu",
                                  num_threads=1, seed=s) for s in range(3)]
        for loader in loaders:
            assert sum(len(labels) for _, labels in loader) == 24
        print("done")
    """)
    done = subprocess.run([sys.executable, "-W", "default", "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["done"]
    assert done.stderr.splitlines() == []


def test_run_params_give_each_batch_its_rows_across_chunks(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from gpupipe.backends.dali import params
    from gpupipe.backends.dali.run import BatchRef

    monkeypatch.setattr(params, "PLAN_CHUNK", 4)  # two batches of 2 per chunk
    refs = [BatchRef(0, b, np.array([2 * b, 2 * b + 1]), np.array([2 * b, 2 * b + 1]), 2) for b in range(5)]
    planned = []

    def plan(chunk):
        planned.append([r.batch for r in chunk])
        return [np.concatenate([r.indices for r in chunk])[:, None].astype(np.int32)]

    with ThreadPoolExecutor(1) as pool:
        run = params.RunParams(refs, plan, pool)
        got = [run.batch(k)[0].ravel().tolist() for k in range(5)]
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert sorted(planned) == [[0, 1], [2, 3], [4]], "each chunk planned once"


def test_auto_hw_decoder_load_is_measured_once_per_process_for_the_same_data():
    from gpupipe.backends.dali.calibrate import remembered_hw_decoder_load

    calls = []

    def rate(load):
        calls.append(load)
        return 1000 - abs(load - 0.65)

    first = remembered_hw_decoder_load(("test", 1), rate)
    measured = len(calls)
    again = remembered_hw_decoder_load(("test", 1), rate)
    assert again == first and len(calls) == measured and measured >= 3
    remembered_hw_decoder_load(("test", 2), rate)
    assert len(calls) == 2 * measured, "other data: measured again"


def test_the_gpu_decoder_never_gets_auto_for_a_share():
    """DALI takes a number: before (or without) measuring, ``"auto"`` is DALI's default share."""
    from gpupipe.backends.dali.calibrate import DEFAULT_LOAD
    from gpupipe.backends.dali.decoder import DecoderSettings, decoder_kwargs

    assert decoder_kwargs(True, DecoderSettings())["hw_decoder_load"] == DEFAULT_LOAD
