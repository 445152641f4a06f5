"""``python -m gpupipe.pack``: image folders into validated, DALI-friendly shards.

The flow: list the inputs (an image folder or a file list), put them in a
fixed shuffled order (so every shard mixes the classes), check and
normalise each one in worker processes (:mod:`.convert`), and append them
in that order to shards that roll over by size (:mod:`.writer`). A journal
records every finished shard, so a rerun on the same folder continues
after the last one and gives the same bytes as an uninterrupted run. The
manifest is written last. :func:`verify` checks a packed folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import __version__, shardfmt
from ..sources import Shards, Source, as_source
from .convert import ConvertSettings, Converted, convert
from .verify import verify
from .writer import ShardWriter

logger = logging.getLogger(__name__)

JOURNAL = ".pack-journal.json"
SOURCES = "sources.tsv"


class PackError(RuntimeError):
    """Packing stopped: a bad input with ``on_error="raise"``, or a folder packed with other settings."""


@dataclass(frozen=True)
class PackSettings:
    """Everything that decides the packed bytes (a rerun must use the same).

    Attributes:
        convert: how each image is normalised.
        shard_size: a shard is closed before it would exceed this many bytes.
        seed: seeds the order samples are written in.
    """

    convert: ConvertSettings = field(default_factory=ConvertSettings)
    shard_size: int = 256 * 2**20
    seed: int = 0


@dataclass(frozen=True)
class PackSummary:
    """What a pack run did.

    Attributes:
        inputs, packed, skipped, shards, bytes_out: the whole packed folder
            (shards of an earlier, resumed run included).
        processed, copied, bytes_in, seconds: this run: inputs handled,
            JPEGs copied byte for byte, bytes read, wall time.
        resumed_shards: finished shards taken over from an earlier run.
    """

    inputs: int
    packed: int
    skipped: int
    shards: int
    bytes_out: int
    processed: int
    copied: int
    bytes_in: int
    seconds: float
    resumed_shards: int

    @property
    def images_per_s(self) -> float:
        """Inputs handled per second in this run."""
        return self.processed / self.seconds if self.seconds > 0 else 0.0


def parse_size(text: str) -> int:
    """``"256MB"`` / ``"1.5G"`` / ``"4096"`` to bytes (K, M, G are powers of 1024).

    Raises:
        ValueError: naming the text.
    """
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in units else ""
    number = value[: len(value) - len(unit)]
    try:
        size = int(float(number) * units[unit])
    except ValueError:
        raise ValueError(f"shard size must look like 256MB, 1G or 4096, got {text!r}") from None
    if size < 64 * 2**10:
        raise ValueError(f"shard size must be at least 64KB, got {text!r}")
    return size


def _convert_task(task: Tuple[int, str, ConvertSettings]) -> Tuple[int, Converted]:
    position, path, settings = task
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        return position, Converted(None, f"cannot read: {err.strerror or err}", 0)
    return position, convert(data, settings)


def input_order(source: Source, seed: int) -> List[int]:
    """The fixed order inputs are written in: a permutation of ``seed``."""
    return np.random.default_rng(seed).permutation(len(source)).tolist()


def _fingerprint(source: Source, settings: PackSettings, order: Sequence[int]) -> str:
    digest = hashlib.sha256(json.dumps(asdict(settings), sort_keys=True).encode())
    for i in order:
        sample = source.samples[i]
        digest.update(f"{sample.path}\t{sample.label}\n".encode())
    return digest.hexdigest()


class _Journal:
    """The finished shards and skipped inputs, saved after every shard."""

    def __init__(self, dst: Path, fingerprint: str) -> None:
        self.path = dst / JOURNAL
        self.fingerprint = fingerprint
        self.shards: List[Dict] = []
        self.skipped: List[Dict] = []
        self.next_input = 0

    def load(self) -> None:
        """Takes up an earlier run's journal, if it packed the same inputs with the same settings."""
        if not self.path.is_file():
            return
        saved = json.loads(self.path.read_text())
        if saved.get("fingerprint") != self.fingerprint:
            raise PackError(
                f"{self.path.parent} was packed from other inputs or with other settings; "
                "pack into a new folder (or delete it first)"
            )
        for shard in saved["shards"]:
            on_disk = self.path.parent / shard["name"]
            if not on_disk.is_file() or on_disk.stat().st_size != shard["bytes"]:
                logger.warning("shard %s of the earlier run is missing or changed: packing from before it", shard["name"])
                break
            self.shards.append(shard)
        if self.shards:
            self.next_input = self.shards[-1]["next_input"]
            self.skipped = [s for s in saved["skipped"] if s["position"] < self.next_input]

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({
            "fingerprint": self.fingerprint, "shards": self.shards, "skipped": self.skipped,
        }))
        os.replace(tmp, self.path)


def pack(
    src,
    dst,
    settings: PackSettings = PackSettings(),
    *,
    workers: Optional[int] = None,
    on_error: str = "skip",
    progress: bool = True,
) -> PackSummary:
    """Packs an image folder or file list into shards in ``dst``.

    Args:
        src: an image folder (``class/file``), a list file, or a source.
        dst: the output folder (created; a rerun resumes after its last finished shard).
        settings: conversion, shard size and order seed.
        workers: processes converting images (default: all cores).
        on_error: ``"skip"`` leaves a bad input out and lists it with its
            reason in the manifest; ``"raise"`` stops with a :class:`PackError`
            naming the file and the reason.
        progress: show a progress bar on stderr.

    Returns:
        The summary of the whole packed folder.
    """
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    source = as_source(src)
    if isinstance(source, Shards):
        raise ValueError(f"{src} is already packed")
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    order = input_order(source, settings.seed)
    journal = _Journal(dst, _fingerprint(source, settings, order))
    journal.load()
    for stale in dst.glob("shard-*.tmp"):
        stale.unlink()  # an interrupted shard; it is written again
    resumed = len(journal.shards)
    if resumed:
        logger.info("resuming: %d shards done, continuing at input %d of %d", resumed, journal.next_input, len(order))

    started = time.perf_counter()
    first_input = journal.next_input
    bytes_in = copied = 0
    writer: Optional[ShardWriter] = None
    packed = sum(s["samples"] for s in journal.shards)
    tasks = ((pos, source.samples[order[pos]].path, settings.convert) for pos in range(journal.next_input, len(order)))
    workers = workers or os.cpu_count() or 1
    bar = _progress(len(order) - journal.next_input, progress)
    try:
        for position, result in _run(tasks, workers):
            sample = source.samples[order[position]]
            bytes_in += result.bytes_in
            bar.update(1)
            if result.jpeg is None:
                if on_error == "raise":
                    raise PackError(f"{sample.path}: {result.reason}")
                logger.info("skipped %s: %s", sample.path, result.reason)
                journal.skipped.append({"position": position, "path": sample.path, "reason": result.reason})
                continue
            copied += result.copied
            if writer is not None and writer.entries and writer.size + len(result.jpeg) + 3 * 512 > settings.shard_size:
                journal.shards.append({**writer.close(), "next_input": position})
                journal.save()
                writer = None
            if writer is None:
                writer = ShardWriter(dst, len(journal.shards))
            writer.add(f"{packed:08d}", result.jpeg, sample.label)
            packed += 1
        if writer is not None:
            journal.shards.append({**writer.close(), "next_input": len(order)})
            writer = None
            journal.save()
    finally:
        bar.close()
        if writer is not None:
            writer.abort()

    _write_sources(dst, source, order, journal)
    manifest = _manifest(source, settings, journal, len(order))
    tmp = dst / (shardfmt.MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, dst / shardfmt.MANIFEST)
    return PackSummary(
        inputs=len(order),
        packed=packed,
        skipped=len(journal.skipped),
        shards=len(journal.shards),
        bytes_out=manifest["totals"]["bytes"],
        processed=len(order) - first_input,
        copied=copied,
        bytes_in=bytes_in,
        seconds=time.perf_counter() - started,
        resumed_shards=resumed,
    )


def _run(tasks: Iterator, workers: int) -> Iterator[Tuple[int, Converted]]:
    """Converts in ``workers`` processes, results in input order."""
    if workers == 1:
        yield from map(_convert_task, tasks)
        return
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(_convert_task, tasks, chunksize=4)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="img", desc="packing", disable=not enabled, smoothing=0.1)


def _write_sources(dst: Path, source: Source, order: Sequence[int], journal: _Journal) -> None:
    """``sources.tsv``: each key, its input file and label (which input became which sample)."""
    skipped = {s["position"] for s in journal.skipped}
    lines, key = [], 0
    for position, i in enumerate(order):
        if position not in skipped:
            lines.append(f"{key:08d}\t{source.samples[i].path}\t{source.samples[i].label}")
            key += 1
    (dst / SOURCES).write_text("key\tpath\tlabel\n" + "\n".join(lines) + "\n")


def _manifest(source: Source, settings: PackSettings, journal: _Journal, inputs: int) -> Dict:
    shards = [{k: v for k, v in s.items() if k != "next_input"} for s in journal.shards]
    return {
        "format": shardfmt.FORMAT,
        "version": shardfmt.VERSION,
        "written_by": f"gpupipe {__version__}",
        "settings": asdict(settings),
        "classes": source.classes,
        "class_to_idx": source.class_to_idx,
        "shards": shards,
        "totals": {
            "inputs": inputs,
            "samples": sum(s["samples"] for s in shards),
            "skipped": len(journal.skipped),
            "shards": len(shards),
            "bytes": sum(s["bytes"] for s in shards),
        },
        "skipped": [{"path": s["path"], "reason": s["reason"]} for s in journal.skipped],
    }


__all__ = ["pack", "verify", "PackSettings", "ConvertSettings", "PackSummary", "PackError", "parse_size"]
