"""The GPU proof: one command that checks the ``dali`` backend on a real GPU and measures it.

    python benchmarks/gpu_proof.py --out proof/        (or: bash benchmarks/gpu_proof.sh proof/)

The steps (``--steps`` names; about 8 minutes in all, estimated, on one H100/H200 with 16
cores), writing everything into OUT:

1. ``tests``: ``tests.log``, ``tests.xml``, the ``cuda`` tests (pytest -m cuda);
2. ``data``: a demo set of 50 batches and its packed copy (``--max-size 256``), in the cache;
3. ``stream_safety``: ``stream_safety.json``, a training-like consumer that reads each batch
   late, without synchronising, compared with a synchronised reference (and without
   gpupipe's buffer keep-alive, to see whether DALI alone orders the buffer's reuse);
4. ``decode_tolerance``: ``decode_tolerance.json``, per image the mean absolute difference
   between the GPU decode and PIL's, for hw_decoder_load 0, 0.65 and 1;
5. ``epochs``: ``epochs.json``, GPU memory (torch and NVML) after epochs 1, 2 and 5, and every
   epoch boundary's time against the median batch;
6. ``hw_decoder_load``: ``hw_decoder_load.json``, loader-alone images/s for hw_decoder_load 0 .. 1;
7. ``bench-resnet50``, ``bench-resnet18``, ``bench-heavy``, ``bench-shards``: ``bench-*``,
   ``python -m gpupipe.bench`` with ResNet-50 and ResNet-18 (standard), heavy augmentation,
   and the packed shards;
8. ``peer_compare``: ``peer_compare.json``, gpupipe ``dali`` against a hand-written DALI pipeline
   of the same graph and a ``torchvision.io`` GPU loader, loader alone and ResNet-18/50 end to
   end, with the host time inside ``next()`` (``benchmarks/peer_compare.py``);
9. ``op_costs``: ``op_costs.json``, milliseconds per batch each op of the heavy setting adds on
   the GPU (``benchmarks/op_costs.py``);

and, after any of them, ``summary.md``: every figure and the targets, met or missed.

Without a CUDA GPU it says so and exits 2, doing nothing else. ``--rehearse`` runs every
step on the CPU (``dali-cpu``, tiny sizes) to check this script itself.

``--steps a,b`` runs some steps only (the data step comes along where a step needs it), so that
the proof fits in calls of a few minutes each: OUT keeps what earlier calls measured
(``figures.json``, ``bench-*/bench.json``) and ``summary.md`` is rewritten from all of it each
time. The data live in gpupipe's cache folder (``gpupipe.env.cache_dir()``), never in
OUT, so OUT can be committed as it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from gpu_quick import run_logged  # noqa: E402
from gpu_results import TARGETS, judge  # noqa: E402,F401 -- TARGETS: the targets' one home, re-exported

logger = logging.getLogger("gpu_proof")

STEPS = ("tests", "data", "stream_safety", "decode_tolerance", "epochs", "hw_decoder_load", "bench-resnet50",
         "bench-resnet18", "bench-heavy", "bench-shards", "peer_compare", "op_costs")
TESTS_TIMEOUT_S = 480  # the whole ``pytest -m cuda`` run; one test may take 240 s where pytest-timeout is there

class Proof:
    """Runs the steps, keeps going past a failing one, and collects the figures for the summary."""

    def __init__(self, out: Path, rehearse: bool) -> None:
        self.out = out
        self.rehearse = rehearse
        self.device = "cpu" if rehearse else "cuda"
        self.backend = "dali-cpu" if rehearse else "dali"
        self.figures: Dict = {"rehearsal": rehearse, "failures": {}}
        earlier = out / "figures.json"
        if earlier.exists():  # an earlier call of the same proof: keep what it measured
            kept = json.loads(earlier.read_text())
            if kept.get("rehearsal") == rehearse:
                self.figures.update(kept)
        self.figures["bench"] = {name[len("bench-"):]: json.loads((out / name / "bench.json").read_text())
                                 for name in STEPS if (out / name / "bench.json").exists()}
        from gpupipe import env

        self.cache = env.cache_dir()
        self.figures["machine"] = machine()  # this call's machine: a proof run in parts may have no bench yet

    @property
    def failures(self) -> List[str]:
        return list(self.figures["failures"].values())

    def step(self, name: str, fn: Callable[[], None]) -> None:
        started = time.perf_counter()
        logger.info("== %s", name)
        self.figures["failures"].pop(name, None)
        try:
            fn()
        except Exception:  # noqa: BLE001 -- a failing step is recorded and the proof goes on to the next one
            self.figures["failures"][name] = f"{name}: {traceback.format_exc().strip().splitlines()[-1]}"
            (self.out / f"failed-{name}.log").write_text(traceback.format_exc())
            logger.error("%s failed:\n%s", name, traceback.format_exc())
        self.figures.setdefault("seconds", {})[name] = round(time.perf_counter() - started, 1)
        self.write("figures.json", {k: v for k, v in self.figures.items() if k != "bench"})

    def write(self, name: str, data) -> None:
        (self.out / name).write_text(json.dumps(data, indent=2) + "\n")

    def process(self, name: str, cmd: List[str], timeout: float = 400) -> None:
        """Runs ``cmd`` in its own process (``gpu_quick.run_logged``: the repository on ``PYTHONPATH``, stopped after
        ``timeout`` seconds) with its output in ``OUT/<name>.log``; raises ``RuntimeError`` where it exits other
        than 0 (124: stopped)."""
        code = run_logged(cmd, self.out / f"{name}.log", timeout)
        if code != 0:
            raise RuntimeError(f"{name} exited {code}" + (f" (stopped after {timeout:.0f} s)" if code == 124 else ""))

    # -- the steps ------------------------------------------------------------------

    def tests(self) -> None:
        selection = [str(ROOT / "tests" / "test_gpu_readiness.py")] if self.rehearse else ["-m", "cuda", str(ROOT / "tests")]
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(self.out / "tests.xml"),
               *selection]
        if importlib.util.find_spec("pytest_timeout"):
            cmd += ["--timeout", "240"]
        exit_code = run_logged(cmd, self.out / "tests.log", TESTS_TIMEOUT_S)
        tail = ((self.out / "tests.log").read_text().strip().splitlines() or ["?"])[-1]
        self.figures["tests"] = {"exit": exit_code, "summary": tail}
        if exit_code != 0:
            raise RuntimeError(f"cuda tests failed (exit {exit_code}): {tail}")

    def data(self) -> None:
        from gpupipe.demo import photos as demo
        from gpupipe.pack import ConvertSettings, PackSettings, pack

        images = 40 if self.rehearse else 50 * 256
        spec = demo.DemoSpec(classes=10, per_class=images // 10)
        self.folder = demo.ensure_demo(self.cache, spec)
        self.shards = self.cache / f"proof-shards-256-{images}"
        if not (self.shards / "manifest.json").exists():
            pack(self.folder, self.shards, PackSettings(convert=ConvertSettings(max_size=256)), progress=False)
        self.figures["data"] = {"images": images, **demo.folder_stats(self.folder)}

    def loader(self, **kwargs):
        import gpupipe

        kwargs.setdefault("batch_size", 8 if self.rehearse else 256)
        return gpupipe.loader(self.folder, kwargs.pop("pipeline", "train"), backend=kwargs.pop("backend", self.backend),
                              device=self.device, **kwargs)

    def stream_safety(self) -> None:
        """Each batch is read only after a long GPU delay, by a kernel queued without synchronising:
        if a buffer went back to DALI's pool while the kernel was queued, its checksum would change."""
        from peer_compare import environ

        import gpupipe

        pipeline = gpupipe.presets.val(224)
        reference = [x.double().sum().item() for x, _ in self.loader(pipeline=pipeline, shuffle=False)]
        results = {}
        for keep_alive in (True, False):
            late = []
            # the switch is read when the loader builds its backend; put back as it was after the pass, failed or not
            with environ("GPUPIPE_NO_KEEPALIVE", "0" if keep_alive else "1"):
                for images, _ in self.loader(pipeline=pipeline, shuffle=False):
                    if self.device == "cuda":
                        torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time before the read is reached
                    late.append(images.double().sum())  # queued, not synchronised
                    del images
            if self.device == "cuda":
                torch.cuda.synchronize()
            checksums = [v.item() for v in late]
            results["with_keep_alive" if keep_alive else "without_keep_alive"] = {
                "batches": len(checksums), "differing_batches": sum(a != b for a, b in zip(checksums, reference))}
        self.figures["stream_safety"] = results
        self.write("stream_safety.json", results)
        if results["with_keep_alive"]["differing_batches"]:
            raise RuntimeError("batches changed under a late consumer even with the keep-alive")

    def decode_tolerance(self) -> None:
        """Per image, the mean absolute difference (uint8 levels) between this backend's decode and PIL's,
        for hw_decoder_load 0, 0.65 and 1: the measured value for ``DECODE_TOLERANCE`` in tests/helpers.py."""
        import numpy as np
        from PIL import Image

        import gpupipe

        crop = gpupipe.CenterCrop(size=224)
        samples = gpupipe.ImageFolder(self.folder).samples[: 32 if self.rehearse else 512]
        references = []
        for sample in samples:
            with Image.open(sample.path) as img:
                rgb = np.asarray(img.convert("RGB"))
            top, left = crop.anchor(*rgb.shape[:2])
            references.append(rgb[top:top + 224, left:left + 224].astype(np.int16))
        results = {}
        for load in (0.0, 0.65, 1.0):
            loader = self.loader(pipeline=[gpupipe.Decode(), crop, gpupipe.Output(dtype="uint8")], shuffle=False,
                                 batch_size=32, hw_decoder_load=load)
            diffs = []
            for images, _ in loader:  # shuffle=False: the folder's order, as the references
                for image in images.permute(0, 2, 3, 1).cpu().numpy().astype(np.int16):
                    if len(diffs) < len(references):
                        diffs.append(float(np.abs(image - references[len(diffs)]).mean()))
                if len(diffs) == len(references):
                    break
            results[str(load)] = {"images": len(diffs), "mean": round(statistics.mean(diffs), 3),
                                  "p99": round(float(np.percentile(diffs, 99)), 3), "max": round(max(diffs), 3)}
        self.figures["decode_tolerance"] = results
        self.write("decode_tolerance.json", results)

    def epochs(self) -> None:
        from gpupipe.bench.measure import Stream

        loader = self.loader(drop_last=True)
        stream = Stream(loader)
        memory, batch_times = {}, []
        handle = _nvml(self.device)
        for epoch in range(1, 6):
            for _ in range(len(loader)):
                started = time.perf_counter()
                next(stream)
                batch_times.append(time.perf_counter() - started)
            if epoch in (1, 2, 5):
                if self.device == "cuda":
                    torch.cuda.synchronize()
                memory[epoch] = {"torch_reserved_mib": round(torch.cuda.memory_reserved() / 2**20, 1)
                                 if self.device == "cuda" else 0.0,
                                 "nvml_used_mib": round(handle() / 2**20, 1) if handle else None}
        result = {"memory": memory, "boundaries_ms": [round(1000 * b, 2) for b in stream.boundaries],
                  "median_batch_ms": round(1000 * statistics.median(batch_times), 2), "batches_per_epoch": len(loader)}
        self.figures["epochs"] = result
        self.write("epochs.json", result)

    def sweep(self) -> None:
        from gpupipe.bench.measure import Stream, time_loader, warm_up

        rates = {}
        for load in (0.0, 0.3, 0.65, 0.9, 1.0):
            stream = Stream(self.loader(hw_decoder_load=load, drop_last=True))
            warm_up(stream, 5)
            rates[str(load)] = round(time_loader(stream, 10 if self.rehearse else 40, _sync(self.device)), 1)
            stream.close()
        self.figures["hw_decoder_load"] = rates
        self.write("hw_decoder_load.json", rates)

    def bench(self, name: str, *args: str) -> Dict:
        out = self.out / f"bench-{name}"
        small = ["--batch-size", "8", "--steps", "3", "--train-steps", "2", "--repeats", "1", "--warmup", "2",
                 "--train-warmup", "1", "--model", "shufflenet_v2_x0_5", "--image-size", "64"] if self.rehearse else \
            ["--repeats", "3", "--steps", "30", "--train-steps", "20"]
        args = list(args)
        if self.rehearse and "--backends" in args:  # no GPU: dali-cpu stands in for dali
            k = args.index("--backends") + 1
            names = ["dali-cpu" if n == "dali" else n for n in args[k].split(",")]
            args[k] = ",".join(dict.fromkeys(names))
        self.process(f"bench-{name}", [sys.executable, "-m", "gpupipe.bench", "--out", str(out), *small, *args])
        report = json.loads((out / "bench.json").read_text())
        self.figures.setdefault("bench", {})[name] = report
        return report

    def script(self, name: str, script: str, *args: str) -> None:
        """Runs ``benchmarks/<script> ... --out OUT/<name>.json`` (its log: ``<name>.log``)."""
        out = self.out / f"{name}.json"
        self.process(name, [sys.executable, str(ROOT / "benchmarks" / script), *args, "--out", str(out)])
        self.figures[name] = json.loads(out.read_text())

    def run(self, wanted: List[str]) -> None:
        """Runs the ``wanted`` steps in the proof's order; the data step first where another step needs it."""
        steps = {
            "tests": self.tests, "data": self.data, "stream_safety": self.stream_safety,
            "decode_tolerance": self.decode_tolerance, "epochs": self.epochs, "hw_decoder_load": self.sweep,
            "bench-resnet50": lambda: self.bench("resnet50", "--data", str(self.folder), "--model", "resnet50"),
            "bench-resnet18": lambda: self.bench("resnet18", "--data", str(self.folder), "--model", "resnet18",
                                                 "--backends", "baseline,dali,torchvision"),
            "bench-heavy": lambda: self.bench("heavy", "--data", str(self.folder), "--augment", "heavy", "--no-train",
                                              "--backends", "dali,torchvision"),
            "bench-shards": lambda: self.bench("shards", "--data", str(self.shards), "--model", "resnet50",
                                               "--backends", "dali,dali-cpu,torchvision"),
            "peer_compare": lambda: self.script(
                "peer_compare", "peer_compare.py", "--data", str(self.folder),
                *(["--tiny-models", "--size", "64", "--batch-size", "8", "--steps", "3", "--train-steps", "2",
                   "--warmup", "2", "--rounds", "1"] if self.rehearse else ["--models", "resnet18,resnet50"])),
            "op_costs": lambda: self.script(
                "op_costs", "op_costs.py", str(self.folder),
                *(["--backend", "dali-cpu", "--batch", "8", "--batches", "2", "--rounds", "1", "--size", "64"]
                  if self.rehearse else ["--backend", "dali"])),
        }
        for name in STEPS:
            if name == "data" and any(w not in ("tests", "data") for w in wanted):
                wanted = [*wanted, "data"]
            if name not in wanted:
                continue
            if name not in ("tests", "data") and not hasattr(self, "folder"):
                self.figures["failures"][name] = f"{name}: not run, the data step failed"
                continue
            self.step(name, steps[name])


def machine() -> Dict:
    """GPU, usable cores, CPU model and versions of this machine (no psutil: the GPU machine may lack it)."""
    from gpupipe import env
    from gpupipe.amp import cpu_info

    return {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpu_cores_usable": env.cores(), "cpu": cpu_info()["model"], "versions": env.versions()}


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _nvml(device: str):
    if device != "cuda":
        return None
    try:
        import pynvml

        from gpupipe.bench.monitor import _nvml_handle

        handle = _nvml_handle(torch.cuda.current_device())
        return (lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used) if handle is not None else None
    except ImportError:
        return None


def targets(figures: Dict) -> List[List[str]]:
    """``[target, measured, met]`` rows (:data:`TARGETS`, in order) from the peer comparison and the benches."""
    bench, peer = figures.get("bench", {}), figures.get("peer_compare", {})
    dali = "dali-cpu" if figures.get("rehearsal") else "dali"

    def result(run, key):
        return bench.get(run, {}).get("results", {}).get(dali, {}).get(key, {})

    ratios = peer.get("ratios", {})
    loader, heavy = result("resnet50", "loader").get("images_per_s"), result("heavy", "loader").get("images_per_s")
    return judge({
        "resnet18_vs_hand": ratios.get("resnet18", {}).get("gpupipe_over_hand"),
        "resnet18_host_share": ratios.get("resnet18", {}).get("host_share", {}).get(f"gpupipe-{dali}"),
        "loader_vs_hand": ratios.get("loader alone", {}).get("gpupipe_over_hand"),
        "loader_rate": peer.get("results", {}).get(f"gpupipe-{dali} loader alone", {}).get("images_per_s"),
        "resnet50_ceiling": result("resnet50", "train").get("fraction_of_ceiling"),
        "heavy_within_15": heavy / loader if heavy and loader else None,
    })


def machine_of_bench(figures: Dict) -> Dict:
    """The machine a bench step recorded (figures of proofs made before the proof recorded its own)."""
    return next(iter(figures.get("bench", {}).values()), {}).get("machine", {})


def summary(proof: Proof) -> str:
    f = proof.figures
    lines = ["# GPU proof" + (" (CPU rehearsal: not a GPU result)" if f["rehearsal"] else ""), ""]
    machine = f.get("machine") or machine_of_bench(f)
    gpu = machine.get("gpu")
    gpu = gpu.get("name") if isinstance(gpu, dict) else gpu  # the bench's record holds a dict
    lines += [f"Machine: {gpu or 'no GPU'}, {machine.get('cpu_cores_usable')} cores "
              f"({machine.get('cpu')}); versions: {json.dumps(machine.get('versions', {}))}", ""]
    lines += ["## Targets", "", "| target | measured | |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {ok} |" for t, m, ok in targets(f)]
    lines += ["", "## Checks", "", f"- cuda tests: {f.get('tests', {}).get('summary', '-')}",
              f"- stream safety: {json.dumps(f.get('stream_safety', '-'))}",
              f"- decode vs PIL, mean abs difference per image (uint8 levels; tests/helpers.py's DECODE_TOLERANCE), "
              f"by hw_decoder_load: {json.dumps(f.get('decode_tolerance', '-'))}",
              f"- epochs: {json.dumps(f.get('epochs', '-'))}",
              f"- hw_decoder_load sweep (img/s): {json.dumps(f.get('hw_decoder_load', '-'))}",
              f"- peer comparison: {json.dumps(f.get('peer_compare', '-'))}",
              f"- per-op cost, heavy setting (ms per batch): {json.dumps(f.get('op_costs', {}).get('rows', '-'))}",
              f"- seconds per step: {json.dumps(f.get('seconds', {}))}"]
    for name, report in sorted(f.get("bench", {}).items(), key=lambda kv: STEPS.index(f"bench-{kv[0]}")):
        from gpupipe.bench.report import table

        lines += ["", f"## bench {name}", "", table(report)]
    if proof.failures:
        lines += ["", "## Failed steps", ""] + [f"- {x}" for x in proof.failures]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for every result")
    parser.add_argument("--rehearse", action="store_true", help="run every step on the CPU with tiny sizes")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of: {', '.join(STEPS)} "
                        "(default: all); figures of earlier calls into the same OUT are kept")
    args = parser.parse_args(argv)
    wanted = [s for s in args.steps.split(",") if s]
    unknown = [s for s in wanted if s not in STEPS]
    if unknown or not wanted:
        parser.error(f"--steps: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(STEPS)}")
    if not args.rehearse and not torch.cuda.is_available():
        print("no CUDA GPU: the GPU proof needs one; nothing was done", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    proof = Proof(args.out, args.rehearse)
    proof.run(wanted)
    proof.write("figures.json", {k: v for k, v in proof.figures.items() if k != "bench"})
    (args.out / "summary.md").write_text(summary(proof))
    print(summary(proof))
    return 1 if proof.failures else 0


if __name__ == "__main__":
    sys.exit(main())
