"""The quick GPU proof's steps that run in-process (``gpu_quick.py --inner NAME``), each in a process of its own.

- ``machine``: ``machine.json``, the GPU, usable cores, CPU, versions, the DALI build and the date;
- ``data``: ``data.json``, the photo folder in gpupipe's cache: demo photos generated on every core for at most
  ``--generate-s`` seconds, the rest of the ``--images`` hard links to them (made once; a rerun reuses it);
- ``sweep``: ``hw_decoder_load.json``, loader-alone images/s with ``hw_decoder_load="auto"`` and 0, 0.35, 0.65
  and 1.0, two rounds (the second in reverse order), rewritten after each measurement.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWEEP = ("auto", 0.0, 0.35, 0.65, 1.0)


def _dump(path: Path, data: Dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def machine(out: Path) -> None:
    import torch

    from gpupipe import env
    from gpupipe.amp import cpu_info

    builds = []
    for dist in ("nvidia-dali-cuda120", "nvidia-dali-cuda130"):
        try:
            builds.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    info = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpu_cores_usable": env.cores(), "cpu": cpu_info()["model"],
            "versions": {**env.versions(), "torch_cuda": torch.version.cuda},
            "dali_build": ", ".join(builds) or None, "date": time.strftime("%Y-%m-%d", time.gmtime())}
    try:
        import pynvml

        pynvml.nvmlInit()
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as err:  # noqa: BLE001 -- no NVML (the CPU rehearsal): the driver is not known
        info["driver"] = f"unknown ({type(err).__name__})"
    _dump(out / "machine.json", info)


def photo_folder(root: Path, images: int, seconds: float, classes: int = 10) -> Dict:
    """``images`` demo photos in ``classes`` folders under ``root``: as many generated as ``seconds`` allow on
    every core (whole chunks, classes in turn), the rest hard links to them. Returns what was made."""
    from gpupipe import env
    from gpupipe.demo import photos as demo

    done = root / "quick.json"
    if done.is_file():
        return json.loads(done.read_text())
    per_class = images // classes
    spec = demo.DemoSpec(classes=classes, per_class=per_class)
    pieces = demo.chunks(per_class, 8)
    jobs = [(root, spec, label, piece) for piece in pieces for label in range(classes)]  # classes in turn
    started, workers = time.monotonic(), env.cores()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: set = set()
        for k, job in enumerate(jobs):  # the first chunk of every class always; then until the time is up
            if k >= classes and time.monotonic() - started >= seconds:
                break
            pending.add(pool.submit(demo._write_images, job))
            if len(pending) >= 2 * workers:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    f.result()
        for f in pending:
            f.result()
    generated = time.monotonic() - started
    unique = 0
    for label in range(classes):
        folder = root / f"class_{label:02d}"
        made = sorted(folder.glob("img_*.jpg"))
        unique += len(made)
        for i in range(per_class):
            path = folder / f"img_{i:05d}.jpg"
            if not path.exists():
                os.link(made[i % len(made)], path)
    stats = demo.folder_stats(root)
    result = {"folder": str(root), "unique": unique, "generate_s": round(generated, 1),
              "images_per_s_per_core": round(unique / generated / workers, 2), "cores": workers, **stats}
    _dump(done, result)
    return result


def data(out: Path, images: int, seconds: float) -> None:
    from gpupipe import env

    result = photo_folder(env.cache_dir() / f"quick-photos-{images}", images, seconds)
    _dump(out / "data.json", result)


def sweep(out: Path, folder: Path, backend: str, batch_size: int, steps: int, warmup: int) -> None:
    import torch

    import gpupipe
    from gpupipe.backends.dali import calibrate
    from gpupipe.bench.measure import Stream, time_loader, warm_up

    device = torch.device("cuda", 0) if backend == "dali" else torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if backend == "dali" else (lambda: None)
    runs: Dict[str, List[float]] = {}
    result: Dict = {"backend": backend, "batch_size": batch_size, "steps": steps}
    for order in (SWEEP, tuple(reversed(SWEEP))):
        for load in order:
            loader = gpupipe.loader(folder, "train", batch_size=batch_size, backend=backend, device=device,
                                    hw_decoder_load=load, drop_last=True)
            stream = Stream(loader)
            warm_up(stream, warmup)
            runs.setdefault(str(load), []).append(time_loader(stream, steps, sync))
            stream.close()
            loader.close()
            if load == "auto" and calibrate._CHOSEN:
                chosen, figures = next(iter(calibrate._CHOSEN.values()))
                result["auto_chose"] = chosen
                result["auto_measured"] = {f"{k:.2f}": round(v, 1) for k, v in sorted(figures.items())}
            result["runs"] = {k: [round(v, 1) for v in vs] for k, vs in runs.items()}
            result["images_per_s"] = {k: round(statistics.median(vs), 1) for k, vs in runs.items()}
            fixed = {k: v for k, v in result["images_per_s"].items() if k != "auto"}
            if fixed and "auto" in result["images_per_s"]:
                best = max(fixed, key=lambda k: fixed[k])
                result["best"] = float(best)
                result["auto_over_best"] = round(result["images_per_s"]["auto"] / fixed[best], 3)
            _dump(out / "hw_decoder_load.json", result)


def main(args) -> int:
    if args.inner == "machine":
        machine(args.out)
    elif args.inner == "data":
        data(args.out, args.images, args.generate_s)
    else:
        sweep(args.out, args.data, args.backend, args.batch_size, args.steps, args.warmup)
    return 0
