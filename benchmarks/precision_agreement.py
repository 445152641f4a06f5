"""Do the bench, the examples and ``choose_amp()`` agree on the precision on one machine, run after run?

    python benchmarks/precision_agreement.py [--runs 5] [--work DIR] [--out FILE]

Each run asks the three, each in a fresh process (nothing shared but gpupipe's cache folder), for
its ``auto`` precision on the CPU:

* ``gpupipe.choose_amp("cpu")`` by hand;
* the bench, ``python -m gpupipe.bench`` at its smallest settings (its ``amp`` in bench.json);
* ``examples/train_ddp.py`` under ``torchrun`` (one process, one step; its ``autocast:`` line).

The first run starts with the precision record cleared, the next ones reuse whatever was recorded;
then one more run clears it again with a CPU load generator running (busy processes, two per
core). ``choose_amp`` probes only a quiet machine (``gpupipe.amp.QUIET_LOAD``); on a machine kept
busy by other work nothing is ever recorded, so ``--seed-record`` makes run 1 start with the probe
run and recorded as a quiet moment would (``machine_load`` read as 0 in that one process; the probe
itself is timed under the real load), to test that every tool then reuses the record. Which of
the three asks first turns from run to run (the first one may probe and record). All of it runs
with ``GPUPIPE_CACHE`` set to a folder under ``--work``, so your own cache folder is left as it is.
Writes JSON: per run the three choices and reasons, the load average when each was
asked, whether a record existed before and after, and whether the three agreed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpupipe.amp import QUIET_LOAD, cpu_info  # noqa: E402
from gpupipe.demo import photos  # noqa: E402

TOOLS = ("choose_amp", "bench", "example")
#: The example's line naming its precision: ``autocast: bf16 (reason)``.
EXAMPLE_LINE = re.compile(r"^autocast: (\S+) \((.*)\)$", re.M)


def load_per_core() -> float:
    return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)


def run(cmd: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return proc


def ask_choose_amp(env: dict, data: Path, work: Path, timeout: float) -> dict:
    code = "import json, gpupipe; print(json.dumps(gpupipe.choose_amp('cpu').as_dict()))"
    body = json.loads(run([sys.executable, "-c", code], env, timeout).stdout.strip().splitlines()[-1])
    return {"choice": body["choice"], "reason": body["reason"]}


def ask_bench(env: dict, data: Path, work: Path, timeout: float) -> dict:
    out = work / "bench-out"
    shutil.rmtree(out, ignore_errors=True)
    run([sys.executable, "-m", "gpupipe.bench", "--data", str(data), "--backends", "torchvision", "--batch-size", "4",
         "--image-size", "32", "--steps", "1", "--train-steps", "1", "--repeats", "1", "--warmup", "0",
         "--train-warmup", "0", "--threads", "1", "--out", str(out)], env, timeout)
    amp = json.loads((out / "bench.json").read_text())["amp"]
    return {"choice": amp["choice"], "reason": amp["reason"]}


def ask_example(env: dict, data: Path, work: Path, timeout: float) -> dict:
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = run([str(torchrun), "--standalone", "--nproc_per_node=1", "examples/train_ddp.py", str(data),
                "--epochs", "1", "--max-steps", "1", "--size", "32", "--batch-size", "4", "--backend", "torchvision"],
               env, timeout)
    found = EXAMPLE_LINE.search(proc.stdout)
    if found is None:
        raise RuntimeError(f"train_ddp.py printed no 'autocast:' line: {proc.stdout[-1500:]}")
    return {"choice": found.group(1), "reason": found.group(2)}


def seed_record(env: dict, timeout: float) -> dict:
    """Probes and records the choice as on a quiet machine (the 1-minute load read as 0)."""
    code = ("import json, gpupipe, gpupipe.amp as amp; amp.machine_load = lambda: 0.0; "
            "print(json.dumps(gpupipe.choose_amp('cpu').as_dict()))")
    body = json.loads(run([sys.executable, "-c", code], env, timeout).stdout.strip().splitlines()[-1])
    return {"choice": body["choice"], "reason": body["reason"], "load_per_core": load_per_core()}


ASK = {"choose_amp": ask_choose_amp, "bench": ask_bench, "example": ask_example}


def busy(stop) -> None:
    """A load generator's process: spins until ``stop`` is set."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


class LoadGenerator:
    """``processes`` busy processes while in the ``with`` block; waits (up to ``settle_s``) for the
    1-minute load average per core to pass ``QUIET_LOAD``."""

    def __init__(self, processes: int, settle_s: float) -> None:
        self.processes, self.settle_s = processes, settle_s
        self.stop = multiprocessing.Event()
        self.workers: list = []

    def __enter__(self) -> LoadGenerator:
        self.workers = [multiprocessing.Process(target=busy, args=(self.stop,), daemon=True)
                        for _ in range(self.processes)]
        for worker in self.workers:
            worker.start()
        deadline = time.monotonic() + self.settle_s
        while load_per_core() <= QUIET_LOAD and time.monotonic() < deadline:
            time.sleep(2)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=10)


def one_run(number: int, clear: bool, loaded: bool, env: dict, data: Path, work: Path, timeout: float,
            seed: bool = False) -> dict:
    record_dir = Path(env["GPUPIPE_CACHE"]) / "precision"
    if clear:
        shutil.rmtree(record_dir, ignore_errors=True)
    seeded = seed_record(env, timeout) if seed else None
    if seeded:
        print(f"run {number + 1} seeded     {seeded['choice']:4s} (load {seeded['load_per_core']}/core): "
              f"{seeded['reason']}", flush=True)
    order = TOOLS[number % 3:] + TOOLS[: number % 3]  # who asks first turns from run to run
    row: dict = {"run": number + 1, "cleared": clear, "load_generator": loaded, "seeded": seeded,
                 "order": list(order),
                 "record_before": sorted(p.name for p in record_dir.glob("*.json"))}
    for tool in order:
        load = load_per_core()
        started = time.perf_counter()
        row[tool] = {**ASK[tool](env, data, work, timeout), "load_per_core": load,
                     "seconds": round(time.perf_counter() - started, 1)}
        print(f"run {number + 1} {tool:10s} {row[tool]['choice']:4s} (load {load}/core): {row[tool]['reason']}",
              flush=True)
    row["record_after"] = sorted(p.name for p in record_dir.glob("*.json"))
    row["agree"] = len({row[tool]["choice"] for tool in TOOLS}) == 1
    return row


def summarize(rows: list) -> dict:
    """What the runs add up to (top-level keys, for the docs page)."""
    asked = [row[tool] for row in rows for tool in TOOLS]
    choices = sorted({answer["choice"] for answer in asked})
    return {
        "run_count": len(rows),
        "runs_agreeing": sum(row["agree"] for row in rows),
        "agree_in_every_run": all(row["agree"] for row in rows),
        "choices_seen": choices,
        "same_choice_in_every_run": len(choices) == 1,
        "choice": choices[0] if len(choices) == 1 else "mixed",
        "answers_from_the_record": sum("recorded in" in answer["reason"] for answer in asked),
        "answers": len(asked),
        "load_per_core_min": min(answer["load_per_core"] for answer in asked),
        "load_per_core_max": max(answer["load_per_core"] for answer in asked),
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs before the one under load (the first clears)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/precision-agreement"),
                        help="scratch folder: the cache folder used (GPUPIPE_CACHE), the data, bench output")
    parser.add_argument("--load-processes", type=int, default=2 * (os.cpu_count() or 1),
                        help="busy processes of the load generator in the last run")
    parser.add_argument("--settle", type=float, default=90.0,
                        help="seconds at most to wait for the load generator to raise the load average")
    parser.add_argument("--seed-record", action="store_true",
                        help="run 1: probe and record first as on a quiet machine (see above)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds at most per tool and run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cpu-2core"
                        / f"precision-agreement-{datetime.now(timezone.utc):%Y-%m-%d}.json")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.load_processes < 1:
        parser.error("--runs and --load-processes must be >= 1")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "data"
    if not photos.is_built(data):  # a small demo folder: 2 classes x 8 photos
        photos.generate(data, photos.DemoSpec(classes=2, per_class=8), workers=1)
    env = {**os.environ, "GPUPIPE_CACHE": str(args.work / "cache"), "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    rows = [one_run(k, k == 0, False, env, data, args.work, args.timeout, seed=args.seed_record and k == 0)
            for k in range(args.runs)]
    with LoadGenerator(args.load_processes, args.settle):
        rows.append(one_run(args.runs, True, True, env, data, args.work, args.timeout))
    result = {
        "question": "bench, example (train_ddp.py) and choose_amp() give the same auto precision, run after run",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_info()["model"], "flags": cpu_info()["flags"], "cores": os.cpu_count()},
        "quiet_load_per_core": QUIET_LOAD,
        "seed_record": args.seed_record,
        "runs": rows,
        **summarize(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"agree in every run: {result['agree_in_every_run']}; choices seen: {result['choices_seen']}; "
          f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
