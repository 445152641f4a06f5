"""The quick GPU proof (issue #36): every figure that matters, in one run of at most 7 minutes.

    bash benchmarks/gpu_proof.sh OUT --quick [--rehearse] [--pack FILE] [--budget 420] [--only a,b]
    python benchmarks/gpu_quick.py --commit quick.tgz

Steps, in order of value; each runs in its own process, stopped at its cap or when the run's budget
(``--budget``, counted from the start) is spent, whichever comes first; a step that finds less than
:data:`MIN_STEP_S` left is skipped and listed. Each step's JSON lands in OUT as soon as it ends, and
``quick.json`` (every figure), ``summary.md`` and, with ``--pack FILE``, a ``.tgz`` of OUT are rewritten
after every step, so a run cut short still returns what it measured. Time budget on one H100/H200 with
16 cores, seconds (``expected``: estimated from CPU measurements and the 2026-11-24 H100 run):

| step | measures | cap | expected |
|---|---|---|---|
| machine | GPU, cores, versions, DALI build | 30 | 8 |
| data | 12,800 photo-sized JPEGs (~450 px): generated on every core for at most 40 s, the rest hard links | 60 | 50 |
| dali | ``dali_check.py``: one small ``dali`` pipeline feeding torch; a failure stops the run (exit 3) | 60 | 25 |
| peer | gpupipe ``dali`` vs the same graph by hand: loader alone, ResNet-18 bf16 channels_last, batch 256; then gpupipe's ``next()`` in the ResNet-18 loop profiled by the wall clock | 120 | 70 |
| host | one gpupipe epoch's ``next()`` profiled (top 25), warning lines of a gpupipe-only process | 45 | 20 |
| tests | ``pytest -n 4 -m cuda`` (serial without pytest-xdist), those no committed GPU run passed first, each test's outcome and the slowest 30 | 200 | 200 (cut) |
| hw_decoder_load | ``"auto"`` against 0, 0.35, 0.65 and 1.0, loader alone, 2 rounds | 60 | 40 |
| resnet50 | ResNet-50 end to end against its model-only ceiling: gpupipe, gpupipe prefetching 4, gpupipe with host-synchronised outputs, hand-written | 120 | 90 |
| op_costs | heavy against standard preset, ms per batch each op adds, DALI's own form of the ops (``--peer``), RandAugment in the CPU form (``--forms``), the heavy setting in the torch form (``--torch``) | 90 | 75 |
| total | | 420 | ~560 (the last steps cut; the first H200 run: 465 s) |

Data: generating one demo photo takes 0.10 s of one core (measured on the 2-core CPU VM), so 12,800
would take ~80 s on 16 such cores; the step generates what 40 s allow (~6,400) and fills the folder up
with hard links to them (every file is still read and decoded; ``data.json`` says how many are unique).
It lives in gpupipe's cache, so a rerun on the same machine skips it.

``--rehearse`` runs every step on the CPU (``dali-cpu``, 60 images in batches of 8 at 32 px, ShuffleNet instead of
the ResNets, a trivially small test selection; caps and default budget 5 times longer) to check this
script; ``tests/test_gpu_proof_rehearsal.py`` does so in the test suite. ``--commit quick.tgz`` unpacks
a run's results into ``benchmarks/results/<gpu>-<date>/`` (the documentation's tables come from there).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_results  # noqa: E402
import gpu_tests_seen  # noqa: E402

logger = logging.getLogger("gpu_quick")

STEPS = ("machine", "data", "dali", "peer", "host", "tests", "hw_decoder_load", "resnet50", "op_costs")
CAPS = {"machine": 30, "data": 60, "dali": 60, "peer": 120, "host": 45, "tests": 200, "hw_decoder_load": 60,
        "resnet50": 120, "op_costs": 90}
#: Steps that read the photo folder (the others run without it).
NEEDS_DATA = ("peer", "host", "hw_decoder_load", "resnet50", "op_costs")
BUDGET_S = 420
MIN_STEP_S = 15
#: Seconds between the SIGINT that asks a step to stop (pytest writes its summary) and the kill.
INTERRUPT_GRACE_S = 12
#: A rehearsal's caps and default budget are this many times longer: it checks the steps, not the timings,
#: on CPUs that other work may share.
REHEARSAL_SLACK = 5
#: A rehearsal's image side (crops, models): the least that still runs every op and model of the steps.
REHEARSAL_SIZE = 32
#: The photo folder: 50 batches of 256; unique images are generated for at most this many seconds.
IMAGES, GENERATE_S = 50 * 256, 40
#: What the data step needs besides generating (start, hard links, sizes): 7-8 s on an H200 machine, when
#: 12,800 photos were there (the second call of 2026-11-27 was stopped at 48 s of a 60 s cap, by the interrupt
#: that comes ``INTERRUPT_GRACE_S`` before it).
DATA_AFTER_GENERATE_S = 12
#: A stderr line that is a warning (DALI's, nvImageCodec's, or anyone's): what the targets count.
WARNING = re.compile(r"warn|fancy upsampling", re.IGNORECASE)


class Quick:
    """Runs the steps within the budget, collecting every figure into ``quick.json``."""

    def __init__(self, out: Path, *, rehearse: bool, budget: float, pack: Optional[Path], started: float,
                 resnet50_rounds: int = 1) -> None:
        self.out, self.rehearse, self.budget, self.pack, self.started = out, rehearse, budget, pack, started
        self.resnet50_rounds = resnet50_rounds
        self.backend = "dali-cpu" if rehearse else "dali"
        earlier = out / "quick.json"  # a rerun into the same OUT keeps what the first run measured
        kept = json.loads(earlier.read_text()) if earlier.is_file() else {}
        self.figures: Dict = kept if kept.get("rehearsal") == rehearse else {}
        self.figures.update(rehearsal=rehearse, budget_s=budget)
        for key in ("seconds", "failures", "skipped"):
            self.figures.setdefault(key, {})

    @property
    def folder(self) -> Path:
        return Path(self.figures["data"]["folder"])

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def run(self, wanted: List[str]) -> None:
        steps: Dict[str, Callable[[float], None]] = {
            "machine": self.machine, "data": self.data, "dali": self.dali, "peer": self.peer, "host": self.host,
            "tests": self.tests, "hw_decoder_load": self.sweep, "resnet50": self.resnet50, "op_costs": self.op_costs}
        for name in wanted:
            cap = min(CAPS[name] * (REHEARSAL_SLACK if self.rehearse else 1), self.left())
            for key in ("failures", "skipped"):
                self.figures[key].pop(name, None)
            if self.figures.get("dali_failed") and name not in ("machine", "data", "dali"):
                self.figures["skipped"][name] = f"{name}: not run, the DALI build failed its check (the dali step)"
            elif name in NEEDS_DATA and "folder" not in self.figures.get("data", {}):
                self.figures["skipped"][name] = f"{name}: not run, there is no data folder"
            elif cap < MIN_STEP_S:
                self.figures["skipped"][name] = f"{name}: not run, {max(cap, 0):.0f} s of the budget left"
            else:
                self.step(name, steps[name], cap)
            self.save()

    def step(self, name: str, fn: Callable[[float], None], cap: float) -> None:
        logger.info("== %s (at most %.0f s; %.0f s of the budget left)", name, cap, self.left())
        started = time.monotonic()
        try:
            fn(cap)
        except Exception:  # noqa: BLE001 -- a failing step is recorded and the run goes on to the next one
            self.figures["failures"][name] = f"{name}: {traceback.format_exc().strip().splitlines()[-1]}"
            (self.out / f"failed-{name}.log").write_text(traceback.format_exc())
            logger.error("%s failed:\n%s", name, traceback.format_exc())
        self.figures["seconds"][name] = round(time.monotonic() - started, 1)

    def save(self) -> None:
        """``quick.json``, ``summary.md`` and the packed copy of OUT, rewritten (atomically) after every step."""
        _write(self.out / "quick.json", json.dumps(self.figures, indent=2, default=str) + "\n")
        _write(self.out / "summary.md", gpu_results.section(self.out, "#") + "\n")
        if self.pack is not None:
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
                tar.add(self.out, arcname="quick")
                log = Path(f"{self.out}.log")
                if log.is_file():
                    tar.add(log, arcname="quick/run.log")
            _write(self.pack, buffer.getvalue())

    # -- the steps (each in its own process) -------------------------------------------

    def script(self, name: str, cap: float, *argv: str) -> Dict:
        """Runs ``argv`` (a script under benchmarks/ and its arguments, or ``-m ...``) with its output in
        ``OUT/<name>.log``; returns ``OUT/<name>.json`` (what the script wrote, also when it was stopped)."""
        target = argv if argv[0] == "-m" else (str(ROOT / "benchmarks" / argv[0]), *argv[1:])
        code = run_logged([sys.executable, *target], self.out / f"{name}.log", cap)
        path = self.out / f"{name}.json"
        result = json.loads(path.read_text()) if path.is_file() else {}
        if code != 0:
            result["exit"] = code
        self.figures[name] = result
        if code != 0:
            raise RuntimeError(f"{argv[0]} exited {code}" + (" (stopped at its cap)" if code == 124 else ""))
        return result

    def machine(self, cap: float) -> None:
        self.script("machine", cap, "gpu_quick.py", "--inner", "machine", "--out", str(self.out))

    def data(self, cap: float) -> None:
        images = 60 if self.rehearse else IMAGES
        self.script("data", cap, "gpu_quick.py", "--inner", "data", "--out", str(self.out), "--images", str(images),
                    "--generate-s", str(min(GENERATE_S, cap - INTERRUPT_GRACE_S - DATA_AFTER_GENERATE_S)))

    def dali(self, cap: float) -> None:
        """Does this DALI build run beside this torch (``dali_check.py``)? Kept per build, so that a run with the
        fallback build keeps the first build's answer; a failure stops the run."""
        build = str(self.figures.get("machine", {}).get("dali_build"))
        self.figures.pop("dali_failed", None)
        if self.figures.get("dali", {}).get(build, {}).get("ok"):
            return  # a rerun on the same machine: this build passed already
        try:
            self.script("dali_check", cap, "dali_check.py", str(self.out / "dali_check.json"),
                        *(["--cpu"] if self.rehearse else []))
        except RuntimeError:
            self.figures["dali_failed"] = build
            raise
        finally:
            self.figures.setdefault("dali", {})[build] = self.figures.pop("dali_check", {})

    def peer(self, cap: float) -> None:
        small = ["--tiny-models", "--size", str(REHEARSAL_SIZE), "--batch-size", "8", "--steps", "2", "--train-steps",
                 "2", "--warmup", "1", "--rounds", "1"]
        # 3 rounds: the median then drops one slow round (window A's 0.93x was one round of two at 8,698 img/s)
        full = ["--models", "resnet18", "--batch-size", "256", "--steps", "40", "--train-steps", "30", "--warmup",
                "10", "--rounds", "3"]
        # then gpupipe in the ResNet-18 loop once more, next() profiled by the wall clock: where the loop waits
        self.script("peer", cap, "peer_compare.py", "--data", str(self.folder), "--loaders", "gpupipe,hand",
                    "--profile-wall", str(self.out / "profile_next_wall.txt"), "--out", str(self.out / "peer.json"),
                    *(small if self.rehearse else full))

    def host(self, cap: float) -> None:
        """One gpupipe epoch's next() profiled, and its host time, in a process that runs gpupipe alone (so every
        warning line on its stderr is gpupipe's)."""
        small = ["--batch-size", "8", "--size", str(REHEARSAL_SIZE), "--steps", "2", "--warmup", "1"]
        sizes = small if self.rehearse else ["--batch-size", "256", "--size", "224", "--steps", "30", "--warmup", "10"]
        try:
            self.script("host", cap, "host_proxy.py", "--data", str(self.folder), "--backend", self.backend,
                        "--only", "gpupipe", "--rounds", "1", "--profile", str(self.out / "profile_next.txt"),
                        "--out", str(self.out / "host.json"), *sizes)
        finally:
            log = (self.out / "host.log").read_text(errors="replace").splitlines()
            warnings = [line for line in log if WARNING.search(line)]
            self.figures.setdefault("host", {}).update(warning_lines=len(warnings),
                                                       warning_examples=sorted(set(warnings))[:5])

    def tests(self, cap: float) -> None:
        """The ``cuda`` tests no committed GPU run has passed first (``gpu_tests_seen``), then, in what is left of
        the cap, the ones one has (``tests-seen.log``/``.xml``)."""
        # pytest-xdist's -n only where its plugin loads (not under PYTEST_DISABLE_PLUGIN_AUTOLOAD)
        xdist = ["-n", "4"] if importlib.util.find_spec("xdist") and not os.environ.get(
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD") else []
        seen = [] if self.rehearse else sorted(gpu_tests_seen.passed_on_a_gpu())
        listed = self.out / "tests-seen.txt"
        listed.write_text("".join(f"{node}\n" for node in seen))
        # both passes select the same tests; the plugin keeps each pass's share (GPUPIPE_TESTS_PASS, below)
        # the rehearsal's one test starts no process of its own (the ``refuses`` test it ran took 2-3 s)
        rehearsed = [str(ROOT / "tests" / "test_gpu_readiness.py"), "-k", "decoder_settings_reach"]
        selection = rehearsed if self.rehearse else ["-m", "cuda", *(["-p", "gpu_tests_seen"] if seen else []), "tests"]
        started, figures = time.monotonic(), {"exit": 0, "parallel": bool(xdist), "passed_before": len(seen)}
        for name in ("tests", "tests-seen") if seen else ("tests",):
            left = cap - (time.monotonic() - started)
            if name != "tests" and left < MIN_STEP_S:
                figures.setdefault("not_run", []).append(name)
                continue
            # -v: each test's outcome on its own line, so a run stopped at its cap says which ran; stopped, pytest
            # gets SIGINT first (run_logged) and still writes its summary, the slowest 30 and the JUnit XML
            split_env = {"GPUPIPE_TESTS_SEEN": str(listed), "GPUPIPE_TESTS_PASS": "seen" if name == "tests-seen" else
                         "unseen", "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT)])}
            code = run_logged([sys.executable, "-m", "pytest", "-v", "-rfE", "--durations=30", "-p", "no:cacheprovider",
                               *xdist, "--junitxml", str(self.out / f"{name}.xml"), *selection], self.out / f"{name}.log",
                              left, split_env if seen else None)
            outcome = gpu_tests_seen.run_outcome((self.out / f"{name}.log").read_text(errors="replace"))
            if code not in (0, 5):  # 5: nothing collected (every cuda test passed before)
                figures["exit"] = code
            figures["summary"] = "; ".join(filter(None, [figures.get("summary"), outcome["summary"]]))
            for key, count in outcome["outcomes"].items():
                figures.setdefault("outcomes", {})[key] = figures.get("outcomes", {}).get(key, 0) + count
        self.figures["tests"] = figures
        if figures["exit"] != 0:
            raise RuntimeError(f"cuda tests exited {figures['exit']}: {figures['summary']}")

    def sweep(self, cap: float) -> None:
        steps = ["--steps", "2", "--warmup", "1", "--batch-size", "8"] if self.rehearse else []
        self.script("hw_decoder_load", cap, "gpu_quick.py", "--inner", "sweep", "--out", str(self.out),
                    "--data", str(self.folder), "--backend", self.backend, *steps)

    def resnet50(self, cap: float) -> None:
        small = ["--tiny-models", "--size", str(REHEARSAL_SIZE), "--batch-size", "8", "--train-steps", "2", "--warmup",
                 "1"]
        full = ["--models", "resnet50", "--batch-size", "256", "--train-steps", "30", "--warmup", "10"]
        # the hand-written pipeline (is the ceiling reachable by any DALI loader on this GPU?), gpupipe with 4
        # batches prefetched (does a deeper queue hide the GPU time DALI's kernels share with the model?) and gpupipe
        # taking host-synchronised outputs as DALI's iterator does (is the wait a host access to a stream-bound output?)
        self.script("resnet50", cap, "peer_compare.py", "--data", str(self.folder), "--loaders", "gpupipe,hand",
                    "--deeper-prefetch", "4", "--host-outputs", "--no-loader-alone", "--rounds", str(self.resnet50_rounds),
                    "--out", str(self.out / "resnet50.json"), *(small if self.rehearse else full))

    def op_costs(self, cap: float) -> None:
        sweep = self.figures.get("hw_decoder_load", {})
        load = sweep.get("auto_chose") or sweep.get("best") or 0.65
        small = ["--batch", "8", "--batches", "1", "--rounds", "1", "--size", str(REHEARSAL_SIZE)]
        sizes = small if self.rehearse else ["--batch", "256", "--batches", "10", "--rounds", "2"]
        result = self.script("op_costs", cap, "op_costs.py", str(self.folder), "--backend", self.backend,
                             "--hw-decoder-load", str(load), "--peer", "--forms", "--torch", "--out", str(self.out / "op_costs.json"),
                             *sizes)
        prefix = {row["op"]: row["prefix_ms_per_batch"] for row in result["rows"]}
        result["heavy_over_standard"] = round(prefix["HorizontalFlip"] / result["rows"][-1]["prefix_ms_per_batch"], 3)
        result["heavy_over_standard_torch"] = round(prefix["HorizontalFlip"] / result["torch_rows"][-1]["prefix_ms_per_batch"], 3)


def run_logged(cmd: List[str], log: Path, timeout: float, extra_env: Optional[Dict[str, str]] = None) -> int:
    """Runs ``cmd`` in its own process group with its output going straight into ``log``; its exit code, or 124
    after ``timeout`` seconds. At ``timeout - grace`` the process gets SIGINT (pytest then stops its workers and
    writes its summary and JUnit XML; a script stops as on Ctrl-C), at ``timeout`` the whole group is killed
    (DALI's threads, pytest's workers). Stopped itself (Ctrl-C, which the group's own session does not get), it
    kills the group before it goes."""
    grace = min(INTERRUPT_GRACE_S, timeout / 4)
    paths = [*(extra_env or {}).get("PYTHONPATH", str(ROOT)).split(os.pathsep), os.environ.get("PYTHONPATH")]
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": os.pathsep.join(filter(None, paths)), "PYTHONUNBUFFERED": "1"}
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        try:
            return proc.wait(timeout=timeout - grace)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
        except BaseException:
            _kill_group(proc)
            raise
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _kill_group(proc)  # what is left of the group (or the process itself)
        fh.write(f"\n(stopped after {timeout:.0f} s)\n")
        return 124


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _write(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data) if isinstance(data, bytes) else tmp.write_text(data)
    tmp.replace(path)


def commit(packed: Path, results: Path = ROOT / "benchmarks" / "results") -> Path:
    """Unpacks a run's ``quick.tgz`` into ``results/<gpu>-<date>/`` (``-2``, ``-3``... for a later run of the same
    GPU and day); returns that folder."""
    with tarfile.open(packed) as tar:
        figures = json.loads(tar.extractfile("quick/quick.json").read())  # type: ignore[union-attr]
        machine = figures.get("machine", {})
        gpu = re.sub(r"[^a-z0-9]+", "-", (machine.get("gpu") or "no-gpu").lower().replace("nvidia", "")).strip("-")
        label = f"{gpu}-{machine.get('date', time.strftime('%Y-%m-%d'))}"
        target, n = results / label, 1
        while (target / "quick.json").is_file() and json.loads((target / "quick.json").read_text()) != figures:
            n += 1  # another run of the same GPU and day: a folder of its own (the same run again: the same one)
            target = results / f"{label}-{n}"
        target.mkdir(parents=True, exist_ok=True)
        for member in tar.getmembers():
            name = Path(member.name)
            if member.isfile() and name.parts[0] == "quick" and ".." not in name.parts:
                (target / Path(*name.parts[1:])).parent.mkdir(parents=True, exist_ok=True)
                (target / Path(*name.parts[1:])).write_bytes(tar.extractfile(member).read())  # type: ignore
    return target


def main(argv=None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rehearse", action="store_true", help="every step on the CPU, tiny sizes")
    parser.add_argument("--budget", type=float, help=f"seconds for the whole run (default {BUDGET_S})")
    parser.add_argument("--pack", type=Path, help="a .tgz of OUT, rewritten after every step")
    parser.add_argument("--only", help=f"comma-separated, of: {', '.join(STEPS)}, run in the order given (machine, data and dali "
                        "come first)")
    parser.add_argument("--resnet50-rounds", type=int, default=1,
                        help="rounds of the resnet50 step (default 1: four loaders and the ceiling in ~55 s on an H200)")
    parser.add_argument("--commit", type=Path, help="a run's .tgz: unpacked into benchmarks/results/<gpu>-<date>/")
    parser.add_argument("--inner", choices=("machine", "data", "sweep"), help=argparse.SUPPRESS)
    parser.add_argument("--images", type=int, default=IMAGES, help=argparse.SUPPRESS)
    parser.add_argument("--generate-s", type=float, default=GENERATE_S, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="dali", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=30, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=256, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    if args.commit is not None:
        print(commit(args.commit))
        return 0
    if args.out is None:
        parser.error("--out is required")
    if args.inner is not None:
        import _quick_steps as quick_steps

        return quick_steps.main(args)
    asked = [] if args.only is None else [s for s in args.only.split(",") if s not in ("machine", "data", "dali")]
    wanted = list(STEPS) if args.only is None else list(dict.fromkeys(["machine", "data", "dali", *asked]))
    unknown = [s for s in wanted if s not in STEPS]
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    if not args.rehearse:
        import torch

        if not torch.cuda.is_available():  # asked without initialising CUDA here: the steps' processes use it
            print("no CUDA GPU: the GPU proof needs one; nothing was done", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    budget = args.budget if args.budget is not None else BUDGET_S * (REHEARSAL_SLACK if args.rehearse else 1)
    quick = Quick(args.out, rehearse=args.rehearse, budget=budget, pack=args.pack, started=started,
                  resnet50_rounds=args.resnet50_rounds)
    quick.run(wanted)
    print((args.out / "summary.md").read_text())
    if quick.figures.get("dali_failed"):
        return 3
    return 1 if quick.figures["failures"] or quick.figures["skipped"] else 0


if __name__ == "__main__":
    sys.exit(main())
