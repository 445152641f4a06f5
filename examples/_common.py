"""What the example scripts share: argument checks, one-line errors, the precision, per-epoch lines.

Nothing here is needed to use gpupipe: the examples' training loops are the
ones you already have; this keeps their command lines alike.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Optional

import torch

from gpupipe.amp import AMP_CHOICES, AmpChoice, choose_amp
from gpupipe.cli import ArgumentParser, fail, run
from gpupipe.remote import is_url
from gpupipe.sources.files import split_folders_message

__all__ = ["AMP_CHOICES", "ArgumentParser", "amp", "device", "epoch_line", "existing_file", "existing_folder",
           "existing_path", "fail", "image_folder", "parser", "positive_int", "run", "torchrun_rank"]


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
    return text


def existing_path(text: str) -> str:
    """An argument that must name an existing file or folder, or a URL (a pack behind it)."""
    if not is_url(text) and not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return text


def existing_file(text: str) -> str:
    """An argument that must name an existing file."""
    path = Path(text).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return text


def image_folder(text: str) -> str:
    """An argument that must name an image folder ``root/<class>/<image>``, not a folder of splits."""
    existing_folder(text)
    problem = split_folders_message(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


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


def amp(on: torch.device, requested: str = "auto") -> AmpChoice:
    """The autocast precision for ``on`` (bf16 only where the machine runs it well, else float32)."""
    return choose_amp(on, requested)


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
