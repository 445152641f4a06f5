"""What the example scripts share: argument checks, one-line errors, the precision, progress, per-epoch lines.

Nothing here is needed to use gpupipe: the examples' training loops are the
ones you already have; this keeps their command lines alike.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

import torch

import gpupipe
from gpupipe.cli import ArgumentParser, fail, message, user_errors

__all__ = ["AMP_CHOICES", "BACKEND_CHOICES", "ArgumentParser", "amp", "backend_option", "device", "epoch_line", "existing_file", "existing_folder",
           "existing_path", "fail", "folder", "image_folder", "on_error_option", "parser", "positive_int", "progress", "run",
           "torchrun_rank"]

#: ``--backend``: ``auto`` and the backends gpupipe's loaders take (``backend=``).
BACKEND_CHOICES = ("auto", "dali", "dali-cpu", "torchvision")

#: ``--amp``: what ``gpupipe.choose_amp`` takes as ``requested``.
AMP_CHOICES = ("auto", "bf16", "fp16", "off")

#: Seconds between two progress lines.
PROGRESS_EVERY_S = 10.0


def run(main) -> None:
    """Runs ``main()``; a user error ends it with one ``error:`` line (exit status 2) that names the
    script's flags where gpupipe names its arguments (``--on-error skip`` for ``on_error='skip'``); Ctrl-C
    with one line (exit status 130), also where Ctrl-C reached the script while it forked DataLoader workers
    (Python prints and drops a ``KeyboardInterrupt`` raised in its at-fork hooks) and what follows is a worker
    that Ctrl-C ended (``DataLoader worker ... exited unexpectedly``)."""
    default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if default and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _ctrl_c)
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback from wherever the loop was
        _interrupted()
    except user_errors() as err:
        if _CTRL_C["seen"]:
            _interrupted()
        fail(message(err).replace("pass on_error='skip'", "pass --on-error skip"))
    except Exception:
        if not _CTRL_C["seen"]:
            raise
        _interrupted()
    raise SystemExit(0)


#: Whether Ctrl-C (SIGINT) reached this process.
_CTRL_C = {"seen": False}


def _ctrl_c(signum, frame) -> None:
    _CTRL_C["seen"] = True
    raise KeyboardInterrupt


def _interrupted() -> None:
    resumes = any(a == "--checkpoint" or a.startswith("--checkpoint=") for a in sys.argv)
    again = "it resumes from --checkpoint" if resumes else "it starts over"
    print(f"\ninterrupted: nothing to clean up; run the same command again ({again})", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_INTERRUPTED) from None


#: The exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130


def backend_option(parser: ArgumentParser) -> None:
    """``--backend``: which gpupipe backend reads the data (``backend=``); an unknown name is one line naming
    ``--backend``."""
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto", help="gpupipe backend")


def on_error_option(parser: ArgumentParser) -> None:
    """``--on-error``: what the gpupipe loader does with an image it cannot read (``on_error``)."""
    parser.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                        help="gpupipe loader: stop at an image it cannot read, naming it, or skip (and list) it")


def parser(doc: str) -> ArgumentParser:
    """The example's parser: its docstring's first line as the description, defaults in ``--help``."""
    return ArgumentParser(description=doc.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def existing_folder(text: str) -> str:
    """An argument that must name an existing folder."""
    path = Path(text).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return os.path.expanduser(text)  # a '~' the shell left (quoted): the home folder, for every reader alike


def existing_path(text: str) -> str:
    """An argument that must name an existing file or folder, or a URL (a pack behind it)."""
    if gpupipe.remote.is_url(text):
        return text
    if not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return os.path.expanduser(text)


def existing_file(text: str) -> str:
    """An argument that must name an existing file."""
    path = Path(text).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return os.path.expanduser(text)


def image_folder(text: str) -> str:
    """An argument that must name an image folder ``root/<class>/<image>`` (not a folder of splits) or a
    packed one."""
    text = existing_folder(text)
    if gpupipe.pack.is_packed(text):  # a folder written by python -m gpupipe.pack
        return text
    try:
        gpupipe.ImageFolder(text)  # says so when text holds split folders (train/, val/) rather than classes
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("ImageFolder: ")) from None
    return text


def folder(text: str) -> Path:
    """An argument naming a folder that may not exist yet (``--checkpoint``); a ``~`` the shell left is the home
    folder (else a folder named ``~`` would be made in the current one)."""
    return Path(text).expanduser()


def positive_int(text: str) -> int:
    """An argument that must be an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {value}")
    return value


def device() -> torch.device:
    """The device the example trains on: the current CUDA device, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def amp(on: torch.device, requested: str = "auto"):
    """The autocast precision for ``on`` (bf16 only where the machine runs it well, else float32): the
    machine's one recorded choice, as the bench's and ``gpupipe.choose_amp()``'s."""
    return gpupipe.choose_amp(on, requested)


def epoch_line(epoch: int, loss: float, loader=None, extra: str = "") -> str:
    """``epoch E: loss L[extra]``, then the loader's statistics for this epoch (gpupipe loaders), which
    are reset for the next one."""
    line = f"epoch {epoch}: loss {loss:.3f}{extra}"
    stats = getattr(loader, "stats", None)
    if stats is not None:
        line += f"; input pipeline: {stats(reset=True)}"  # input-bound or compute-bound, measured
    return line


def torchrun_rank() -> Optional[int]:
    """This process's rank under torchrun, ``None`` when not started by torchrun."""
    return int(os.environ["RANK"]) if "RANK" in os.environ and "WORLD_SIZE" in os.environ else None


class progress:  # noqa: N801 -- used as a function: ``for batch in progress(loader, steps)``
    """The loader's batches, with a line ``step S/T: R images/s, about M left`` after the first step and
    every ``PROGRESS_EVERY_S`` seconds (a step is timed from one batch to the next, training included).

    The loader's own attributes (``stats``, ``set_epoch``, ``len()``...) are reachable through it.
    """

    def __init__(self, loader, total_steps: int, show: bool = True) -> None:
        self.loader, self.total, self.show = loader, total_steps, show
        self.done, self.images, self.started, self.last = 0, 0, None, 0.0

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator:
        if self.started is None:
            self.started = time.perf_counter()
            if self.show:
                steps = f"{self.total} step" + ("" if self.total == 1 else "s")
                print(f"training: {steps}; a progress line after the first step and every "
                      f"{PROGRESS_EVERY_S:.0f} s", flush=True)
        for batch in self.loader:
            yield batch
            self.done += 1
            self.images += len(batch[0])
            now = time.perf_counter()
            if self.show and (self.done == 1 or now - self.last >= PROGRESS_EVERY_S or self.done == self.total):
                self.last = now
                print(self.line(now - self.started), flush=True)

    def line(self, elapsed: float) -> str:
        """``step 3/50: 0.41 images/s, about 4 min 30 s left``."""
        left = (self.total - self.done) * elapsed / max(self.done, 1)
        return (f"step {self.done}/{self.total}: {rate_text(self.images / max(elapsed, 1e-9))} images/s, "
                f"about {duration(left)} left")


def rate_text(value: float) -> str:
    """A rate that never reads 0 for a slow loop: ``123``, ``4.5``, ``0.41``."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def duration(seconds: float) -> str:
    """``45 s``, ``2 min 5 s``."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"
