"""The bench's command line: its flags, checked, with the machine's and the mode's defaults."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import NoReturn

import torch

from .. import backends as gp_backends
from .. import env
from ..amp import AMP_CHOICES, cpu_info
from ..checks import did_you_mean
from ..cli import ArgumentParser, explained
from ..errors import Error as GpupipeError
from ..remote.urls import is_url
from .advice import BASELINE

logger = logging.getLogger("gpupipe.bench")

DESCRIPTION = "one AMP training loop fed by every backend, measured side by side."


#: Per mode and device: timed repeats, loader-alone batches per repeat, training steps per repeat.
MODES = {
    "quick": {"cpu": dict(repeats=3, steps=20, train_steps=6), "cuda": dict(repeats=3, steps=40, train_steps=30)},
    "thorough": {"cpu": dict(repeats=5, steps=20, train_steps=12), "cuda": dict(repeats=5, steps=40, train_steps=60)},
}


class BenchError(GpupipeError):
    """A bad argument or input: printed as one line, ``error: ...``, exit status 2."""


#: What ``--help`` ends with: the commands a newcomer runs first.
EXAMPLES = """\
examples:
  python -m gpupipe.bench                                     # the demo data, every backend this machine has
  python -m gpupipe.bench --data data/train                   # your image folder (root/<class>/<image>)
  python -m gpupipe.bench --data packed/train --no-train      # a pack, the loaders alone
  python -m gpupipe.bench --backends dali-cpu,torchvision --thorough --out results/
"""


class _Parser(ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BenchError(explained(self, message))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags, with the machine's and the mode's defaults filled in.

    Raises:
        BenchError: a bad flag or value.
    """
    on_gpu = torch.cuda.is_available()
    parser = _Parser(
        prog="python -m gpupipe.bench",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Defaults depend on the machine and the mode. --quick (the default): 3 repeats; with a GPU,\n"
            "resnet50, batch 256, 40 loader / 30 train steps and a demo set of 50 batches; without,\n"
            "shufflenet_v2_x0_5, batch 32, 20 loader / 6 train steps, 1000 images. --thorough: 5 repeats and\n"
            "twice the training steps.\n\n" + EXAMPLES
        ),
    )
    parser.add_argument(
        "--data",
        type=_data_path,
        help="image folder root/<class>/<image>, or a folder packed by "
        "python -m gpupipe.pack or its URL (https://, s3://, gs://; no baseline then) (default: the demo data)",
    )
    parser.add_argument(
        "--backends",
        default="all",
        help=f"comma-separated from {BASELINE},{','.join(gp_backends.BACKENDS)}; 'all' = every one this machine has",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="3 repeats: medians good to ~10-20 %% on a quiet machine, a few minutes (the default)",
    )
    mode.add_argument(
        "--thorough",
        dest="mode",
        action="store_const",
        const="thorough",
        help="5 repeats and twice the training steps: tighter ranges, about twice as long",
    )
    parser.add_argument(
        "--model", help="torchvision model name (default: resnet50 on a GPU, shufflenet_v2_x0_5 on a CPU)"
    )
    parser.add_argument("--batch-size", type=int, help="images per batch (default: 256 on a GPU, 32 on a CPU)")
    parser.add_argument(
        "--image-size",
        type=int,
        default=224,
        help="train-preset crop size in px, at least 32 and one the model takes (default: 224)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="batches per loader-alone repeat, fewer where warm-up and timing would not fit in one "
        "epoch (default: 40 GPU / 20 CPU)",
    )
    parser.add_argument("--train-steps", type=int, help="steps per training repeat (default: by mode, see below)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=10,
        help="loader-alone batches before each timed repeat; more than the loader's prefetch "
        "queue, so that no repeat starts on free, already-prepared batches (default: 10)",
    )
    parser.add_argument(
        "--train-warmup", type=int, default=3, help="training steps before each timed repeat (default: 3)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help="timed repeats, interleaved across backends; medians and min-max are reported "
        "(default: 3 quick, 5 thorough)",
    )
    parser.add_argument(
        "--amp",
        choices=AMP_CHOICES,
        default="auto",
        help="autocast dtype; auto: bf16 on a GPU that has it, and on a CPU only where a short "
        "probe finds it faster than float32 (CPUs without avx512_bf16/amx_bf16: float32); "
        "fp16 uses a GradScaler; off: float32 (default: auto)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="gpupipe's DALI threads / DataLoader workers (default: the usable CPU cores; "
        "the baseline always uses one worker per core)",
    )
    parser.add_argument(
        "--dtype",
        choices=["float32", "float16", "bfloat16"],
        default="float32",
        help="dtype gpupipe loaders deliver (default: float32, like the baseline)",
    )
    parser.add_argument(
        "--augment",
        choices=["standard", "heavy"],
        default="standard",
        help="train preset as it is, or heavy: + RandAugment m9 n2, random erasing 0.25, "
        "MixUp 0.8 / CutMix 1.0 (default: standard)",
    )
    parser.add_argument("--no-train", action="store_true", help="measure the loaders alone (no model)")
    parser.add_argument(
        "--demo-images",
        type=int,
        help="images in the generated demo set, exactly: 10 classes, sizes equal to within one (default: 1000; "
        "on a GPU 50 batches)",
    )
    parser.add_argument(
        "--cache-dir",
        type=_local_path,
        default=env.cache_dir(),
        help=f"where the demo data is built once, unused with --data (default: {env.cache_dir()}, gpupipe's "
        "cache folder, set by $GPUPIPE_CACHE or $XDG_CACHE_HOME, which also holds scans and a URL's shards)",
    )
    parser.add_argument(
        "--out",
        type=_local_path,
        default=Path("bench-out"),
        help="folder for bench.json and bench.png (default: ./bench-out)",
    )
    args = parser.parse_args(argv)
    args.mode = args.mode or "quick"
    if args.data is not None:
        note_unused(args)
    if args.no_train:
        note_untrained(args)
    defaults = {
        "model": "resnet50" if on_gpu else "shufflenet_v2_x0_5",
        "batch_size": 256 if on_gpu else 32,
        "threads": env.default_threads(),
        **MODES[args.mode]["cuda" if on_gpu else "cpu"],
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.demo_images is None:
        args.demo_images = max(1000, 50 * args.batch_size) if on_gpu else 1000
    check_image_size(args.image_size, None if args.no_train else args.model)
    if args.amp == "fp16" and not on_gpu and not args.no_train:
        check_cpu_fp16()
    for name in ("batch_size", "steps", "train_steps", "repeats", "threads", "demo_images"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("warmup", "train_warmup"):
        if getattr(args, name) < 0:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    check_threads(args.threads)
    return args


def note_unused(args: argparse.Namespace) -> None:
    """Warns of a flag that sizes or places the demo set (``--demo-images``, ``--cache-dir``) given with
    ``--data``, which replaces it: nothing would say that it did nothing (a URL's shards and the scan's cache
    go to gpupipe's cache folder, ``$GPUPIPE_CACHE``, not to ``--cache-dir``)."""
    if args.demo_images is not None:
        logger.warning("--demo-images %d is not used: --data replaces the demo set it sizes", args.demo_images)
    if args.cache_dir != env.cache_dir():
        logger.warning(
            "--cache-dir %s is not used: it is where the demo set is built, which --data replaces; gpupipe's "
            "caches (scans, a URL's shards) go to %s (set $GPUPIPE_CACHE to move them)",
            args.cache_dir,
            env.cache_dir(),
        )


def note_untrained(args: argparse.Namespace) -> None:
    """Warns of the training flags given with ``--no-train``, which then do nothing: nothing else would say so."""
    unused = {"--model": args.model, "--train-steps": args.train_steps, "--train-warmup": args.train_warmup != 3}
    given = [flag for flag, value in {**unused, "--amp": args.amp != "auto"}.items() if value not in (None, False)]
    if given:
        verb = "is" if len(given) == 1 else "are"
        logger.warning("%s %s not used: --no-train measures the loaders alone (no model)", ", ".join(given), verb)


def check_threads(threads: int) -> None:
    """Refuses a ``--threads`` the machine cannot run: each is a DALI thread or a DataLoader worker process,
    and tens of thousands (a typo, a job's ``$(nproc)`` times the ranks) would hang it before any figure.

    Raises:
        BenchError: naming ``--threads``, its ceiling (4 per CPU, at least 64) and the default.
    """
    cpus = os.cpu_count() or 1
    most = max(64, 4 * cpus)
    if threads > most:
        raise BenchError(
            f"--threads {threads} is more than this machine can run (at most {most}: 4 per CPU of its {cpus}, "
            f"64 at least); each is a loader thread or worker process: pass --threads {env.default_threads()} "
            "(the default) or a few more"
        )


#: The smallest ``--image-size``: below it, a model's five stride-2 stages leave less than a pixel and the
#: figures mean nothing. (A size too large for the memory is refused by ``preflight.check_memory``.)
MIN_IMAGE_SIZE = 32


def check_image_size(size: int, model: str | None) -> None:
    """Refuses a crop size under ``MIN_IMAGE_SIZE``, or one torchvision's ``model`` cannot take (a ViT's fixed
    size, Inception's minimum), found by one forward pass on the meta device (no memory, no weights); and a
    ``model`` of torchvision's that is no image classifier.

    Raises:
        BenchError: naming ``--image-size`` (and the model), or ``--model``.
    """
    if size < MIN_IMAGE_SIZE:
        raise BenchError(
            f"--image-size must be at least {MIN_IMAGE_SIZE} px, got {size} (the train preset's crop side; "
            "ImageNet's is 224)"
        )
    if model is None:
        return
    import torchvision

    if model not in torchvision.models.list_models(module=torchvision.models):
        if model in torchvision.models.list_models():  # a video, detection, segmentation or optical-flow model
            raise BenchError(
                f"--model {model} is not an image classifier: the bench trains one on class labels; choose one of "
                "torchvision.models.list_models(module=torchvision.models) (resnet50, shufflenet_v2_x0_5, ...)"
            )
        return  # an unknown name: check_model names it with the one meant, before any work
    why = _meta_forward(model, size)
    if why and size != 224 and not _meta_forward(model, 224):  # else: the meta device, not the size, failed
        raise BenchError(
            f"--image-size {size}: model {model} cannot take {size}x{size} images ({why}); pass a size it takes "
            "(224 for most), or another --model"
        )


def check_cpu_fp16() -> None:
    """Refuses ``--amp fp16`` on a CPU without float16 instructions (``avx512_fp16``), where float16 autocast
    runs emulated: the ceiling and every training figure would time the emulation, not the model.

    Raises:
        BenchError: naming ``--amp fp16`` and the choices that work here.
    """
    flags = cpu_info()["flags"]
    if flags.get("avx512_fp16"):
        return
    bf16 = [name for name in ("avx512_bf16", "amx_bf16") if flags.get(name)]
    has = f"this CPU has {'/'.join(bf16)}" if bf16 else "emulated without avx512_bf16, slower than float32"
    raise BenchError(
        "--amp fp16 is for a GPU without bf16 (float16 autocast with a GradScaler); this CPU has no float16 "
        f"instructions (avx512_fp16), so it would time an emulation: pass --amp bf16 ({has}), --amp off "
        "(float32) or --amp auto"
    )


def _meta_forward(model: str, size: int) -> str:
    """Why torchvision's ``model`` fails on a ``(1, 3, size, size)`` batch on the meta device (no memory, no
    weights), ``""`` if it does not, or if the model cannot be built there (RegNet: a probe cannot tell)."""
    import warnings

    import torchvision

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        try:
            net = torchvision.models.get_model(model).eval()
        except Exception:  # any failure to build on the meta device: no probe
            return ""
        try:
            net(torch.empty(1, 3, size, size))
        except (AssertionError, RuntimeError, ValueError, NotImplementedError) as err:
            return (str(err).strip().splitlines() or [type(err).__name__])[0]
    return ""


def _data_path(value: str) -> Path | str:
    """``--data``: a path, or the URL of a pack kept as it was typed (``Path`` would fold its ``//``)."""
    return value if is_url(value) else _local_path(value)


def _local_path(value: str) -> Path:
    """A folder's path, with a ``~`` the shell left (``--out=~/results``) read as the home folder.

    Raises:
        argparse.ArgumentTypeError: an empty value (``--data "$DATA"``, the variable unset), which ``Path``
            would read as the current folder: the parser names the flag.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError(
            f"empty ({value!r}: an unset shell variable?), which would mean the current folder; pass a folder "
            "(. for the current one)"
        )
    return Path(value).expanduser()


def choose_backends(spec: str, on_gpu: bool) -> list[str]:
    """The backends to compare: ``all`` means the baseline plus every backend available here; a backend
    named twice is measured once.

    Raises:
        BenchError: an unknown backend, ``all`` beside others, or ``dali`` without a GPU.
    """
    if spec.strip().lower() == "all":
        lacking = unavailable(on_gpu)
        for missing, why in sorted(lacking.items()):
            logger.info("skipping backend %r: %s", missing, why)
        return [BASELINE] + [b for b in gp_backends.BACKENDS if b not in lacking]
    names = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    known = (BASELINE,) + gp_backends.BACKENDS
    if not names:
        raise BenchError(f"--backends: none given; choose from {', '.join(known)}")
    if "all" in (n.lower() for n in names):
        raise BenchError(f"--backends: 'all' stands alone (every backend this machine has); got {spec!r}")
    for name in names:
        if name not in known and len(name.split()) > 1 and all(n in known for n in name.split()):
            raise BenchError(f"--backends: separate the backends with commas: --backends {','.join(name.split())}")
        if name not in known:
            raise BenchError(
                f"--backends: unknown backend {name!r}{did_you_mean(name, known)}; choose from {', '.join(known)}"
            )
        if name == "dali" and not on_gpu:
            raise BenchError("--backends: 'dali' needs a CUDA GPU; this machine has none (use dali-cpu)")
        if name != BASELINE and not gp_backends.available(name):
            raise BenchError(f"--backends: {name!r} cannot run here: {_why_unavailable(name, on_gpu)}")
    return names


def unavailable(on_gpu: bool) -> dict[str, str]:
    """The gpupipe backends that cannot run here, each with why (no GPU, or the pip command to install it)."""
    return {b: _why_unavailable(b, on_gpu) for b in gp_backends.BACKENDS if not gp_backends.available(b)}


def _why_unavailable(name: str, on_gpu: bool) -> str:
    """Why backend ``name`` cannot run here: no GPU, or its package's import error (naming the pip command)."""
    if gp_backends.REGISTRY[name].needs_cuda and not on_gpu:
        return "it needs a CUDA GPU, which this machine lacks" + (" (use dali-cpu)" if name == "dali" else "")
    try:
        gp_backends.require(name)
    except ImportError as err:
        return str(err)
    return "not available on this machine"
