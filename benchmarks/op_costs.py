"""Per-op cost of a pipeline: milliseconds per batch each op adds, loader alone.

The pipeline is measured prefix by prefix (``Decode, RandomResizedCrop``,
then one more op each time, always ending in ``Normalize``), interleaved
over rounds so that drift hits every prefix alike; an op's cost is the
median time per batch of its prefix minus that of the prefix before it.
Default: the bench's ``heavy`` setting (RandAugment m9 n2, random erasing,
MixUp/CutMix), whose ops on the GPU are the subject of issue #25.

Usage:
    python benchmarks/op_costs.py FOLDER [--backend dali|dali-cpu] [--batch 256] [--rounds 3] [--batches 20]
                                  [--hw-decoder-load auto|0.65] [--peer] [--forms] [--torch] [--threads N]
                                  [--out benchmarks/results/LABEL/op_costs.json]

``--peer``: the same image ops written by hand in DALI (``peer_compare.HandDali``: DALI's own
``auto_aug.rand_augment`` and ``fn.erase``), timed in the same rounds, prefix by prefix: whether an op
costs what DALI's own form of it costs, or more.

``--forms``: the RandAugment prefix again with the DALI form of the auto-augment policies the backend
does not choose (``gpupipe.backends.dali.forms``: ``dali`` uses the ``gpu`` form, ``dali-cpu`` the ``cpu``
one; ``GPUPIPE_DALI_FORM``), timed in the same rounds: the row ``RandAugment [cpu form]`` says what the
op costs in the other form. (Random erasing had two forms until the H200 run of 2026-11-27 measured its
mask form at three times ``fn.erase``'s cost.)

``--torch``: the prefixes from RandAugment on again in the ``"torch"`` form (``GPUPIPE_DALI_FORM=torch``,
``gpupipe.backends.dali.torch_form``: DALI's graph stops after the flip, and the policy and random erasing run
as batched torch ops on its uint8 batch), timed in the same rounds: rows ``RandAugment [torch form]`` and on,
the first one's cost counted from the ``HorizontalFlip`` prefix; the last one is the whole heavy setting.

``--hw-decoder-load``: the loaders' setting (``auto``, the default, measures it once per prefix;
a number skips that).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gpupipe  # noqa: E402
from gpupipe.bench.runner import HEAVY  # noqa: E402
from gpupipe.env import default_threads  # noqa: E402


def prefixes(ops):
    """``(name, ops)`` per prefix: the fused decode + crop first, then each op added in turn."""
    body = [op for op in ops if not isinstance(op, gpupipe.Normalize)]
    normalize = next(op for op in ops if isinstance(op, gpupipe.Normalize))
    out = []
    for k in range(2, len(body) + 1):
        name = "Decode+RandomResizedCrop" if k == 2 else type(body[k - 1]).__name__
        prefix = body[:k]
        batch_ops = [op for op in prefix if isinstance(op, (gpupipe.MixUp, gpupipe.CutMix))]
        image_ops = [op for op in prefix if op not in batch_ops]
        out.append((name, image_ops + [normalize] + batch_ops))
    return out


#: ``op_costs.py --peer``: the hand-written prefixes (name, ``HandDali`` extra ops), named as gpupipe's rows.
PEER_PREFIXES = (("hand: Decode+RandomResizedCrop+HorizontalFlip", ()), ("hand: RandAugment", ("randaugment",)),
                 ("hand: RandomErasing", ("randaugment", "erase")))


def table(names, times) -> list:
    """Per prefix (in order): its median ms per batch, what it adds to the one before, and its spread."""
    rows, before = [], 0.0
    for name in names:
        total = statistics.median(times[name])
        rows.append({"op": name, "prefix_ms_per_batch": round(total, 3), "op_ms_per_batch": round(total - before, 3),
                     "spread_ms": round(max(times[name]) - min(times[name]), 3)})
        before = total
    return rows


#: The prefixes whose last op has a ``"gpu"`` and a ``"cpu"`` DALI form (``gpupipe.backends.dali.forms``).
FORM_OPS = ("RandAugment",)


def form_loaders(args, steps, device, load, form: str, names) -> dict:
    """The prefixes ``names`` of ``steps`` built with ``GPUPIPE_DALI_FORM=form``, as ``"{name} [{form} form]"``."""
    from peer_compare import environ

    from gpupipe.backends.dali.forms import FORM_VARIABLE

    with environ(FORM_VARIABLE, form):
        return {f"{name} [{form} form]": gpupipe.loader(args.folder, prefix, batch_size=args.batch,
                                                        backend=args.backend, device=device, drop_last=True,
                                                        hw_decoder_load=load, num_threads=args.threads)
                for name, prefix in steps if name in names}


def other_form_loaders(args, steps, device, load) -> dict:
    """The prefixes of ``FORM_OPS`` with the DALI forms the backend does not choose by itself."""
    from gpupipe.backends.dali.forms import lowering_form

    other = "cpu" if lowering_form(gpu=args.backend == "dali") == "gpu" else "gpu"
    return form_loaders(args, steps, device, load, other, FORM_OPS)


def torch_form_loaders(args, steps, device, load) -> dict:
    """``--torch``: every prefix from the first auto-augment policy on, in the ``"torch"`` form."""
    names = [name for name, _ in steps]
    return form_loaders(args, steps, device, load, "torch", names[names.index(FORM_OPS[0]):])


def form_table(names, times, steps) -> list:
    """``table`` of prefixes in another form; the first one's cost is against the prefix before it in the
    backend's own form."""
    rows = table(names, times)
    if rows:
        own = [name for name, _ in steps]
        before = statistics.median(times[own[own.index(names[0].split(" [")[0]) - 1]])
        rows[0]["op_ms_per_batch"] = round(rows[0]["prefix_ms_per_batch"] - before, 3)
    return rows


def time_per_batch(loader, batches: int, device: torch.device) -> float:
    """Median milliseconds per batch over ``batches`` batches (the first two are warm-up)."""
    times = []
    it = iter(loader)
    for k in range(batches + 2):
        t0 = time.perf_counter()
        images, _ = next(it)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if k >= 2:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--backend", default="dali" if torch.cuda.is_available() else "dali-cpu")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--hw-decoder-load", default="auto")
    parser.add_argument("--peer", action="store_true", help="also the same ops written by hand in DALI")
    parser.add_argument("--forms", action="store_true", help="also RandAugment in the other DALI form")
    parser.add_argument("--torch", action="store_true",
                        help="also the prefixes from RandAugment on in the torch form (GPUPIPE_DALI_FORM=torch)")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--out")
    args = parser.parse_args()
    load = args.hw_decoder_load if args.hw_decoder_load == "auto" else float(args.hw_decoder_load)
    device = torch.device("cuda" if args.backend == "dali" else "cpu")
    ops = gpupipe.presets.train(args.size, **HEAVY)
    steps = prefixes(ops)
    loaders = {name: gpupipe.loader(args.folder, prefix, batch_size=args.batch, backend=args.backend,
                                    device=device, drop_last=True, hw_decoder_load=load, num_threads=args.threads)
               for name, prefix in steps}
    forms = other_form_loaders(args, steps, device, load) if args.forms else {}
    loaders.update(forms)
    torch_forms = torch_form_loaders(args, steps, device, load) if args.torch else {}
    loaders.update(torch_forms)
    peers = {}
    if args.peer:
        from pathlib import Path

        from peer_compare import HandDali

        for name, extra in PEER_PREFIXES:
            peers[name] = HandDali(Path(args.folder), args.batch, args.threads, device, args.size, extra)
    loaders.update(peers)
    times = {name: [] for name in loaders}
    for r in range(args.rounds):
        order = list(loaders) if r % 2 == 0 else list(reversed(loaders))
        for name in order:
            times[name].append(time_per_batch(loaders[name], args.batches, device))
    rows = table([name for name, _ in steps], times)
    peer_rows = table([name for name, _ in PEER_PREFIXES], times) if args.peer else []
    form_rows = form_table(list(forms), times, steps)
    torch_rows = form_table(list(torch_forms), times, steps)
    print(f"{'op':28s} {'ms/batch':>9s} {'prefix':>9s} {'spread':>8s}")
    for row in rows + form_rows + peer_rows + torch_rows:
        print(f"{row['op']:28s} {row['op_ms_per_batch']:9.2f} {row['prefix_ms_per_batch']:9.2f} {row['spread_ms']:8.2f}")
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        gpu = torch.cuda.get_device_name() if device.type == "cuda" else "no GPU"
        with open(args.out, "w") as f:
            json.dump({"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {gpu}",
                       "backend": args.backend, "batch": args.batch, "batches": args.batches, "rounds": args.rounds,
                       "hw_decoder_load": load,
                       "folder": args.folder, "rows": rows,
                       **({"form_rows": form_rows} if args.forms else {}), **({"peer_rows": peer_rows} if args.peer else {}),
                       **({"torch_rows": torch_rows} if args.torch else {})},
                      f, indent=1)


if __name__ == "__main__":
    main()
