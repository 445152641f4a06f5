"""gpupipe against the loaders a user would write instead, on the same folder in one run.

    python benchmarks/peer_compare.py [--data DIR] [--models resnet18,resnet50 | --tiny-models]
                                      [--loaders gpupipe,hand,torchvision-io] [--no-loader-alone]
                                      [--batch-size N] [--rounds 3] [--out FILE]

With a GPU: gpupipe ``dali``, a hand-written DALI pipeline of the same graph
(``readers.file``, ``decoders.image_random_crop`` on ``mixed``, ``resize``,
``crop_mirror_normalize``, ``DALIGenericIterator``) and a
``torchvision.io.decode_jpeg(device="cuda")`` loader (a DataLoader reads the
bytes; decoding, random-resized crop, flip and normalisation on the GPU).
Without one, the same comparison on the CPU: gpupipe ``dali-cpu``, the same
hand-written graph on DALI's CPU operators, and a ``torchvision.io`` loader
decoding in DataLoader workers. Every loader gives the train preset's
batches (random-resized crop to 224 px, flip, normalised float32).

Measured, in rounds that shuffle the loaders' order: the loader alone, and
each model's training loop end to end (with the model-only ceiling), with
the host CPU time the consumer thread spends inside each ``next()``
(``time.thread_time``), per batch and as a share of the loop's wall time.
Autocast by ``gpupipe.amp`` (bf16 on a GPU). Results as JSON under
``benchmarks/results/<machine>/peer_compare.json``, rewritten after every round
(a run cut short keeps the rounds it finished). ``--tiny-models`` trains
ShuffleNetV2 x0.5 instead of ResNets, for a CPU; ``--loaders`` keeps some of
the loaders only (the ratios need ``gpupipe`` and the one compared).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import profile
import pstats
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gpupipe  # noqa: E402
from gpupipe.amp import choose_amp  # noqa: E402
from gpupipe.bench import report, runner  # noqa: E402
from gpupipe.demo import photos as demo  # noqa: E402
from gpupipe.bench.measure import Stream, repeat_batch  # noqa: E402
from gpupipe.env import cache_dir, default_threads  # noqa: E402

MEAN, STD = gpupipe.ops.IMAGENET_MEAN, gpupipe.ops.IMAGENET_STD
SIZE = 224


class HandDali:
    """The train preset written by hand in DALI, as its documentation shows (DALI shuffles on its own).

    ``extra``: the heavy setting's per-image ops after the flip, in DALI's own form (``"randaugment"``: DALI's
    ``auto_aug.rand_augment`` with n=2, m=9; ``"erase"``: ``fn.erase`` of one random rectangle with p=0.5, area
    0.02-0.33, aspect 0.3-3.3), so ``op_costs.py --peer`` can tell gpupipe's cost of an op from DALI's.
    """

    def __init__(self, data: Path, batch: int, threads: int, device: torch.device, size: int = SIZE,
                 extra: Tuple[str, ...] = ()) -> None:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        gpu = device.type == "cuda"

        @pipeline_def(batch_size=batch, num_threads=threads, device_id=(device.index or 0) if gpu else None,
                      exec_dynamic=True, prefetch_queue_depth=2, enable_conditionals="randaugment" in extra)
        def graph():
            encoded, labels = fn.readers.file(file_root=str(data), random_shuffle=True, name="r")
            images = fn.decoders.image_random_crop(encoded, device="mixed" if gpu else "cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=size, resize_y=size, antialias=True)
            mirror = fn.random.coin_flip()
            if extra:
                images, mirror = fn.flip(images, horizontal=mirror), 0
            if "randaugment" in extra:
                from nvidia.dali.auto_aug import rand_augment

                images = rand_augment.rand_augment(images, n=2, m=9, shape=(size, size))
            if "erase" in extra:
                images = _erase_one(images, size)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                              mirror=mirror)
            return images, labels.gpu() if gpu else labels

        self.iterator = DALIGenericIterator(graph(), ["images", "labels"], reader_name="r",
                                            last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    def __len__(self) -> int:
        return len(self.iterator)

    def __iter__(self):
        for out in self.iterator:
            yield out[0]["images"], out[0]["labels"].view(-1).long()


def _erase_one(images, size: int):
    """One random rectangle erased (to 0) with probability 0.5, area 2-33 % of the image, aspect 0.3-3.3."""
    from nvidia.dali import fn, math, types

    area = fn.random.uniform(range=[0.02, 0.33]) * size * size
    aspect = math.exp(fn.random.uniform(range=[float(np.log(0.3)), float(np.log(3.3))]))
    height = math.min(math.sqrt(area * aspect), size)
    width = math.min(math.sqrt(area / aspect), size)
    on = fn.cast(fn.random.coin_flip(probability=0.5), dtype=types.FLOAT)
    anchor = fn.stack(fn.random.uniform(range=[0.0, 1.0]) * (size - height),
                      fn.random.uniform(range=[0.0, 1.0]) * (size - width))
    return fn.erase(images, anchor=anchor, shape=fn.stack(height * on, width * on), axis_names="HW", fill_value=0)


class _Bytes(torch.utils.data.Dataset):
    def __init__(self, data: Path) -> None:
        from torchvision import datasets

        self.samples = datasets.ImageFolder(str(data)).samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        import torchvision

        path, label = self.samples[i]
        return torchvision.io.read_file(path), label


class TorchvisionCuda:
    """A DataLoader reads the files; ``torchvision.io.decode_jpeg(device="cuda")`` decodes the batch on the GPU,
    where each image is cropped, flipped, resized and the batch normalised."""

    def __init__(self, data: Path, batch: int, threads: int, device: torch.device, size: int = SIZE) -> None:
        from torchvision.transforms import v2

        self.device = device
        self.loader = torch.utils.data.DataLoader(_Bytes(data), batch_size=batch, shuffle=True, num_workers=threads,
                                                  drop_last=True, collate_fn=lambda items: list(zip(*items)))
        self.crop = v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()])
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        import torchvision

        for encoded, labels in self.loader:
            images = torchvision.io.decode_jpeg(list(encoded), mode=torchvision.io.ImageReadMode.RGB,
                                                device=self.device)
            batch = torch.stack([self.crop(image) for image in images]).float()
            yield (batch - self.mean) / self.std, torch.tensor(labels).to(self.device, non_blocking=True)


@contextlib.contextmanager
def environ(name: str, value: Optional[str]):
    """``os.environ[name]`` set to ``value`` (removed for ``None``) inside the block, as it was after it: for
    gpupipe's diagnostic switches, read when a loader builds its backend."""
    was = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if was is not None:
            os.environ[name] = was


def loaders(device: torch.device, deeper: Optional[int] = None, size: int = SIZE,
            host_outputs: bool = False) -> Dict[str, Callable]:
    """name -> ``make(data, batch, threads)``, each giving ``size`` px images; ``deeper``: gpupipe once more, with
    that many batches prefetched (``gpupipe-<backend>-prefetch<N>``), to tell a loader that falls behind from one
    that shares the GPU; ``host_outputs``: gpupipe once more taking DALI's outputs synchronised with the host, as
    DALI's own iterator does (``gpupipe-<backend>-host-outputs``), not bound to the training loop's stream."""
    backend = "dali" if device.type == "cuda" else "dali-cpu"

    def ours(data, batch, threads, prefetch=2, outputs=None):
        with environ("GPUPIPE_DALI_OUTPUTS", outputs):
            return gpupipe.loader(data, gpupipe.presets.train(size), batch_size=batch, backend=backend, device=device,
                                  num_threads=threads, drop_last=True, prefetch=prefetch)

    def theirs(data, batch, threads):
        return HandDali(data, batch, threads, device, size)

    if device.type == "cuda":
        def tv(data, batch, threads):
            return TorchvisionCuda(data, batch, threads, device, size)
    else:
        from cpu_compare import torchvision_io as tv
    out = {f"gpupipe-{backend}": ours}
    if deeper is not None:
        out[f"gpupipe-{backend}-prefetch{deeper}"] = functools.partial(ours, prefetch=deeper)
    if host_outputs:
        out[f"gpupipe-{backend}-host-outputs"] = functools.partial(ours, outputs="host")
    return {**out, f"hand-{backend}": theirs, "torchvision-io": tv}


class _ForgivingProfile(profile.Profile):
    """``profile.Profile`` that mends its stack when a call or return reaches it out of order, instead of asserting.

    On the H200 (2026-11-27) a call inside DALI's ``share_outputs(stream)`` reached the hook whose caller it had
    never seen called (``Bad call``), which ended the profiled ``next()``. Here the frames between the last one seen
    and the new call's caller are counted as called then; frames left without a return seen are closed; a return
    of a frame never seen called is ignored.
    """

    def _frames(self) -> list:
        frames, entry = [], self.cur
        while entry:
            frames.append(entry[-2])
            entry = entry[-1]
        return frames

    def _close_down_to(self, frame) -> None:
        while self.cur[-2] is not frame:
            super().trace_dispatch_return(self.cur[-2], 0)

    def trace_dispatch_call(self, frame, t):
        parent = frame.f_back
        if self.cur and parent is not self.cur[-2] and not isinstance(self.cur[-2], profile.Profile.fake_frame):
            seen, missed = self._frames(), []
            while parent is not None and not any(parent is f for f in seen):
                missed.append(parent)
                parent = parent.f_back
            if parent is None:  # nothing in common: back to the profiler's own (fake) frame
                while not isinstance(self.cur[-2], profile.Profile.fake_frame):
                    super().trace_dispatch_return(self.cur[-2], 0)
            else:
                self._close_down_to(parent)
                for caller in reversed(missed):
                    super().trace_dispatch_call(caller, 0)
        return super().trace_dispatch_call(frame, t)

    def trace_dispatch_return(self, frame, t):
        if self.cur and frame is not self.cur[-2]:
            if not any(frame is f for f in self._frames()):
                return 1  # a return whose call was never seen
            self._close_down_to(frame)
        return super().trace_dispatch_return(frame, t)

    dispatch = {**profile.Profile.dispatch, "call": trace_dispatch_call, "return": trace_dispatch_return,
                "c_return": trace_dispatch_return, "c_exception": trace_dispatch_return}


class ThreadProfile:
    """Profiles calls made on the calling thread only, with ``timer``.

    The pure-Python ``profile`` module (``sys.setprofile``: this thread), not ``cProfile``, which from Python 3.12
    hooks ``sys.monitoring`` and sees every thread's calls (the first H200 run's profile came out with negative
    times). Each call gets a profiler of its own, so what the thread does between calls (a training step) is
    never counted; :meth:`write` merges them.
    """

    def __init__(self, timer: Callable[[], float]) -> None:
        self.timer = timer
        self.runs: List[pstats.Stats] = []

    def call(self, fn: Callable, *args):
        profiler = _ForgivingProfile(self.timer)
        try:
            return profiler.runcall(fn, *args)
        finally:  # closed at once: frames still open are closed at the time their stats are made
            stats = pstats.Stats(profiler)
            stats.stats.pop(("", 0, "setprofile"), None)  # runcall's own switching off: never the call's work
            self.runs.append(stats)

    def write(self, path: Path, header: str, top: int = 25) -> None:
        """The top ``top`` functions by cumulative time over every call, under ``header``, into ``path``."""
        stats = self.runs[0]
        stats.add(*self.runs[1:])
        stats.stream = text = io.StringIO()
        stats.sort_stats("cumulative").print_stats(top)
        path.write_text(header.rstrip("\n") + "\n" + text.getvalue())


def timed(stream: Stream, steps: int, step: Callable = None, sync=lambda: None,
          profiler: Optional[ThreadProfile] = None) -> Dict:
    """``steps`` batches (through ``step`` when given): images/s and the consumer thread's host time in next();
    with ``profiler``, each ``next()`` runs under it."""
    images, host, inside = 0, 0.0, 0.0
    started = time.perf_counter()
    for _ in range(steps):
        cpu, wall = time.thread_time(), time.perf_counter()
        batch = next(stream) if profiler is None else profiler.call(next, stream)
        host += time.thread_time() - cpu
        inside += time.perf_counter() - wall
        if step is not None:
            step(*batch)
        images += int(batch[0].shape[0])
    sync()
    elapsed = time.perf_counter() - started
    return {"images_per_s": images / elapsed, "host_ms_per_batch": 1000 * host / steps,
            "host_share": host / elapsed, "wait_share": inside / elapsed}


def one(make: Callable, args, steps: int, step=None, sync=lambda: None, profiler=None) -> Dict:
    loader = make(args.data, args.batch_size, args.threads)
    stream = Stream(loader)
    for _ in range(args.warmup):
        batch = next(stream)
        if step is not None:
            step(*batch)
    sync()
    result = timed(stream, steps, step, sync, profiler)
    stream.close()
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    del stream, loader
    runner.release_memory(args.device)
    return result


def summary(runs: List[Dict]) -> Dict:
    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = round(statistics.median(values), 4)
        out[key + "_range"] = [round(min(values), 4), round(max(values), 4)]
    return out


def main() -> None:
    on_gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="image folder (default: the bench's demo set)")
    parser.add_argument("--models", default="resnet18,resnet50")
    parser.add_argument("--tiny-models", action="store_true", help="ShuffleNetV2 x0.5 instead (for a CPU)")
    parser.add_argument("--size", type=int, default=SIZE, help="the images' side (the train preset's crop)")
    parser.add_argument("--batch-size", type=int, default=256 if on_gpu else 32)
    parser.add_argument("--steps", type=int, default=40 if on_gpu else 20, help="timed batches per loader run")
    parser.add_argument("--train-steps", type=int, default=30 if on_gpu else 6)
    parser.add_argument("--warmup", type=int, default=10 if on_gpu else 5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--loaders", default="gpupipe,hand,torchvision-io", help="which of the three to run")
    parser.add_argument("--no-loader-alone", action="store_true", help="the training loops only")
    parser.add_argument("--profile-wall", type=Path, metavar="FILE",
                        help="then gpupipe in the first model's loop once more, next() profiled by the wall clock")
    parser.add_argument("--deeper-prefetch", type=int, metavar="N",
                        help="also gpupipe with N batches prefetched (the default is 2)")
    parser.add_argument("--host-outputs", action="store_true",
                        help="also gpupipe taking DALI's outputs synchronised with the host (as DALI's own iterator)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    images = 50 * args.batch_size if on_gpu else 1000
    args.data = args.data or demo.ensure_demo(cache_dir(), demo.DemoSpec(per_class=images // 10))
    models = ["shufflenet_v2_x0_5"] if args.tiny_models else [m for m in args.models.split(",") if m]
    wanted = [w for w in args.loaders.split(",") if w]
    makers = {k: v for k, v in loaders(args.device, args.deeper_prefetch, args.size, args.host_outputs).items() if any(k.startswith(w) for w in wanted)}
    sync = (lambda: torch.cuda.synchronize(args.device)) if on_gpu else (lambda: None)
    classes = len(gpupipe.ImageFolder(args.data).classes)
    steps = {}
    for model in models:
        config = runner.BenchConfig(data=args.data, backends=(), model=model, batch_size=args.batch_size,
                                    image_size=args.size, steps=args.steps, train_steps=args.train_steps,
                                    warmup=args.warmup, train_warmup=args.warmup, repeats=1, amp="off",
                                    threads=args.threads, device=args.device)
        step, kept = runner.TrainStep(config, classes), runner.kept_batch(config, classes)
        step.use(choose_amp(args.device, step=lambda dtype, step=step, kept=kept: (step.run(*kept, dtype), sync())))
        steps[model] = (step, kept)
    runs: Dict[str, List[Dict]] = {}
    order = random.Random(0)
    machine = report.machine_info(args.device)
    path = args.out or ROOT / "benchmarks" / "results" / report.hardware_label(machine) / "peer_compare.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in range(args.rounds):
        cells = [] if args.no_loader_alone else [(name, None) for name in makers]
        cells += [(name, m) for m in models for name in [*makers, "ceiling"]]
        order.shuffle(cells)
        for name, model in cells:
            key = f"{name} loader alone" if model is None else f"{name} {model}"
            if name == "ceiling":
                step, kept = steps[model]
                result = one(lambda *_, kept=kept: repeat_batch(kept), args, args.train_steps, step, sync)
            else:
                result = one(makers[name], args, args.steps if model is None else args.train_steps,
                             None if model is None else steps[model][0], sync)
            runs.setdefault(key, []).append(result)
            print(f"round {r + 1}: {key:42s} {result['images_per_s']:8.1f} img/s, host "
                  f"{result['host_ms_per_batch']:.1f} ms/batch in next()", file=sys.stderr, flush=True)
        results = {key: summary(values) for key, values in runs.items()}
        ratios = _ratios(results, list(makers), models)
        out = {"machine": machine, "data": str(args.data), "rounds_done": r + 1,
               "amp": {m: s.amp.as_dict() for m, (s, _) in steps.items()},
               "settings": {k: v for k, v in vars(args).items() if k not in ("device", "data")} | {"models": models},
               "results": results, "ratios": ratios}
        path.write_text(json.dumps(out, indent=2, default=str) + "\n")  # after every round: a cut run keeps them
    if args.profile_wall is not None:
        out["profile_wall"] = profile_wall(makers, steps, models[0], args, sync)
    out["data_stats"] = demo.folder_stats(args.data)
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(json.dumps(out["ratios"], indent=2))
    print(f"wrote {path}", file=sys.stderr)


def profile_wall(makers: Dict, steps: Dict, model: str, args, sync, top: int = 25) -> Dict:
    """gpupipe in ``model``'s training loop once more, each ``next()`` under the ``profile`` module timed by the
    wall clock: where the loop's thread waits inside ``next()`` (the CPU-time profile of ``host_proxy.py`` does
    not see waiting). ``profile`` hooks the calling thread only; the top ``top`` by cumulative time go to
    ``args.profile_wall``."""
    name = next(n for n in makers if n.startswith("gpupipe"))
    profiler = ThreadProfile(time.perf_counter)
    result = one(makers[name], args, args.train_steps, steps[model][0], sync, profiler)
    profiler.write(args.profile_wall, f"# profile of {name}'s next() in the {model} loop, {args.train_steps} batches of "
                   f"{args.batch_size} after {args.warmup} warm-up, timed by the wall clock (waiting included), this "
                   f"thread only; under the profiler: {result['images_per_s']:,.0f} img/s, "
                   f"{result['wait_share']:.1%} of the loop inside next()", top)
    return {"loader": name, "model": model, "file": args.profile_wall.name,
            **{k: round(v, 4) for k, v in result.items()}}


def _ratios(results: Dict, names: List[str], models: List[str]) -> Dict:
    """gpupipe over the hand-written pipeline and over torchvision.io; each loop's fraction of its ceiling
    (of what was measured: a loader left out, or a round cut short, leaves its ratios out)."""
    ours = next((n for n in names if n.startswith("gpupipe")), None)
    others = {"gpupipe_over_hand": "hand-", "gpupipe_over_torchvision_io": "torchvision-io"}
    out: Dict = {}
    for what in ["loader alone", *models]:
        rate = {n: results[f"{n} {what}"]["images_per_s"] for n in names if f"{n} {what}" in results}
        if not rate:
            continue
        entry: Dict = {}
        for key, prefix in others.items():
            other = next((n for n in rate if n.startswith(prefix)), None)
            if ours in rate and other is not None:
                entry[key] = round(rate[ours] / rate[other], 3)
        entry["host_ms_per_batch"] = {n: results[f"{n} {what}"]["host_ms_per_batch"] for n in rate}
        entry["host_share"] = {n: results[f"{n} {what}"]["host_share"] for n in rate}
        if what != "loader alone" and f"ceiling {what}" in results:
            ceiling = results[f"ceiling {what}"]["images_per_s"]
            entry["of_ceiling"] = {n: round(rate[n] / ceiling, 3) for n in rate}
            entry["ceiling_images_per_s"] = ceiling
        out[what] = entry
    return out


if __name__ == "__main__":
    main()
