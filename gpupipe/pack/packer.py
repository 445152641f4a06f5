"""The packer's flow ([`pack`][gpupipe.pack.pack]): the inputs in a fixed shuffled order, converted in worker
processes, appended to shards that roll over by size, each finished shard journalled, the manifest
written last; under ``torchrun`` one part per rank (see ``gpupipe.pack``)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import env
from ..checks import positive_int
from ..errors import ErrorPolicy, SkipLog, Skipped
from ..fileio import byte_size
from ..plan.seeding import pack_order
from ..shards import format as shardfmt
from ..sources import IMAGE_EXTENSIONS, FileList, FileSource, Source, as_source, refuse_empty
from ..sources.walk import OTHER_IMAGE_EXTENSIONS
from ..targets import Target
from . import manifest as mf
from .convert import Converted, ConvertSettings, Task
from .journal import DstLock, Journal, NothingPacked, PackError, fingerprint, stamp, write_failed
from .pool import converted
from .writer import ShardWriter

logger = logging.getLogger("gpupipe.pack")


@dataclass(frozen=True)
class PackSettings:
    """Everything that decides the packed bytes (a rerun must use the same).

    Attributes:
        convert: how each input is normalised.
        shard_size: a shard is closed before it would exceed this many bytes.
        seed: seeds the order samples are written in.
    """

    convert: ConvertSettings = field(default_factory=ConvertSettings)
    shard_size: int = 256 * 2**20
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int("PackSettings.shard_size", self.shard_size)


@dataclass(frozen=True)
class PackSummary:
    """What a pack run did.

    Attributes:
        inputs, packed, skipped, shards, bytes_out: the whole packed folder
            (shards of an earlier, resumed run included; this part's under torchrun).
        processed, copied, bytes_in, seconds: this run: inputs handled,
            JPEGs copied byte for byte, bytes read, wall time.
        resumed_shards: finished shards taken over from an earlier run.
        files: the tars and indexes of this part (what a rank uploads).
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
    files: tuple[str, ...] = ()

    @property
    def images_per_s(self) -> float:
        """Inputs handled per second in this run."""
        return self.processed / self.seconds if self.seconds > 0 else 0.0


def parse_size(text: str) -> int:
    """``"256MB"`` / ``"1.5G"`` / ``"4096"`` to bytes (K, M, G are powers of 1024), at least 64KB.

    Raises:
        ValueError: naming the text.
    """
    return byte_size(text, "shard size", minimum=64 * 2**10)


def packable(src, dst: Path) -> FileSource:
    """The source to pack.

    Raises:
        ValueError: ``src`` is already packed, is not made of files, or holds ``dst``.
    """
    source = as_source(src, IMAGE_EXTENSIONS + OTHER_IMAGE_EXTENSIONS)  # converted, so TIFF is an input too
    if not isinstance(source, FileSource):
        raise ValueError(
            f"{src} is already packed"
            if isinstance(source, Source) and not source.needs_scan
            else f"cannot pack a {type(source).__name__}"
        )
    if isinstance(source, FileList):
        source.refuse_none_found()  # not a pack of 0 images, each "cannot read"
    walked = getattr(source, "root", None)  # a list file names its files: a DST beside them is never read
    root, target = Path(walked or "").resolve(), Path(dst).resolve()
    if walked is not None and (target == root or root in target.parents):
        raise ValueError(
            f"the output folder {dst} lies inside the input {root}: the packer would read its own "
            "shards as inputs on a rerun; pack into a folder outside it"
        )
    return source


def _described(source: Source, index: int) -> str:
    """Sample ``index``'s target in one line (``sources.tsv``, the journal's fingerprint)."""
    target = source.target
    return target.describe(target.pack_input(source, index))


def pack(
    src,
    dst,
    settings: PackSettings = PackSettings(),
    *,
    workers: int | None = None,
    on_error="skip",
    progress: bool = True,
    rank: int = 0,
    world_size: int = 1,
    shared_dst: bool = True,
) -> PackSummary:
    """Packs an image folder, file list, segmentation folder or COCO source into shards in ``dst``.

    Args:
        src: the inputs, as a path or a source.
        dst: the output folder (created; a rerun resumes after its last finished shard).
        settings: conversion, shard size and order seed.
        workers: processes converting inputs (default: all cores).
        on_error: ``"skip"`` leaves a bad input out and lists it with its
            reason in the manifest; ``"raise"`` stops with a [`SampleError`][gpupipe.SampleError]
            naming the file and the reason.
        progress: show a progress bar on stderr.
        rank, world_size: this process's part of the inputs (``torchrun``); rank 0 writes the manifest.
        shared_dst: every rank writes into the same folder (one disk, or a shared file system);
            ``False`` when each node stages its own shards for an upload (rank 0 then checks only its own).

    Returns:
        The summary of the packed folder (of this part, under torchrun).

    Raises:
        SampleError: a bad input with ``on_error="raise"``.
        PackError: other settings on an earlier pack of ``dst``, another packer on ``dst``, or a failed write;
            ``NothingPacked`` where every input was skipped.
        ValueError: a bad argument or source.
    """
    errors = ErrorPolicy(on_error, SkipLog(logger, logging.INFO))  # each one is listed in the manifest too
    dst = Path(refuse_empty(dst, "pack: dst")).expanduser()  # "~/packed": the home folder's, as the loader reads it
    source = packable(src, dst)
    problems = list(source.problems)
    errors.apply(problems, source.problem_summary())
    if dst.exists() and not dst.is_dir():
        raise PackError(f"the output folder {dst} is a file; name a folder (it is made if missing)")
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise write_failed(f"cannot make the output folder {dst}", err) from None
    order = pack_order(settings.seed, len(source))
    start, end = rank * len(order) // world_size, (rank + 1) * len(order) // world_size
    with DstLock(dst, part=rank):
        journal = _journal(dst, source, order, settings, rank, world_size, start, end)
        resumed = len(journal.shards)
        started, first = time.perf_counter(), journal.next_input
        counts = _write_part(
            dst,
            source,
            order,
            journal,
            end,
            settings,
            workers,
            errors,
            progress,
            prefix="shard" if world_size == 1 else f"shard-r{rank:04d}",
        )
        journals = _gather(journal, world_size)  # every part, whatever node (and disk) packed it
        if rank == 0:
            skipped = {s["position"] for j in journals for s in j.skipped}
            mf.write_sources(
                dst,
                (
                    (f"{p:08d}", source.names[order[p]], _described(source, order[p]))
                    for p in range(len(order))
                    if p not in skipped
                ),
            )
            here = None if shared_dst else [s["name"] for s in journal.shards]
            mf.write(dst, mf.build(source, settings, journals, len(order), problems), here)
        if world_size > 1:
            barrier()  # no rank returns before the manifest is there
    if len(order) and not any(s["samples"] for j in journals for s in j.shards):
        raise NothingPacked(
            f"none of the {len(order)} inputs of {source_label(src)} could be packed: each was skipped, with its "
            f"reason, in {dst / shardfmt.MANIFEST}; fix or replace them (on_error='raise', --on-error raise, stops "
            "at the first)"
        )
    shards = journal.shards
    return PackSummary(
        inputs=end - start,
        packed=sum(s["samples"] for s in shards),
        skipped=len(journal.skipped),
        shards=len(shards),
        bytes_out=sum(s["bytes"] for s in shards),
        processed=end - first,
        copied=counts[0],
        bytes_in=counts[1],
        seconds=time.perf_counter() - started,
        resumed_shards=resumed,
        files=tuple(name for s in shards for name in (s["name"], s["index"])),
    )


def source_label(src) -> str:
    """How a pack's ``src`` is named in messages: its path, or its source's type."""
    return str(src) if isinstance(src, (str, os.PathLike)) else type(src).__name__


def barrier() -> None:
    """Waits for every rank (``torch.distributed`` must be initialised under torchrun)."""
    import torch.distributed as dist

    dist.barrier()


def _journal(
    dst: Path, source: Source, order, settings: PackSettings, rank: int, world_size: int, start: int, end: int
) -> Journal:
    name = ".pack-journal.json" if world_size == 1 else f".pack-journal-r{rank:04d}.json"
    inputs = [f"{source.names[order[p]]}\t{_described(source, order[p])}" for p in range(start, end)]
    read = "" if source.decode_as == "upright" else f" {source.decode_as}"  # photos as stored: another pack
    key = fingerprint({**asdict(settings), "kind": source.kind.value + read, "part": [rank, world_size]}, inputs)
    journal = Journal(dst / name, key, start)
    prefix = "shard" if world_size == 1 else f"shard-r{rank:04d}"
    if not journal.path.exists():
        _refuse_others(dst, prefix, rank)
        journal.save()  # from now on every file here is this pack's (a rerun resumes)
    journal.load()
    for stale in dst.glob(f"{prefix}-*.tmp"):
        stale.unlink()  # an interrupted shard; it is written again
    if journal.shards:
        logger.info(
            "resuming: %d shards done, continuing at input %d of %d", len(journal.shards), journal.next_input, end
        )
    return journal


def _refuse_others(dst: Path, prefix: str, rank: int) -> None:
    """Refuses to start a pack in ``dst`` where files it would write are there already, not its own.

    Raises:
        PackError: naming a few of them.
    """
    # the manifest and sources on every rank: one rank refusing alone would leave the others waiting for it
    mine = [f"{prefix}-*.tar", f"{prefix}-*.idx", shardfmt.MANIFEST, mf.SOURCES]
    found = sorted({p.name for pattern in mine for p in dst.glob(pattern)})
    if found:
        raise PackError(
            f"{dst} already holds {', '.join(found[:3])}{' ...' if len(found) > 3 else ''}, not written by a "
            "pack of these inputs (no journal): pack into a new folder (or delete them first); nothing was written"
        )


def _gather(journal: Journal, world_size: int) -> list[Journal]:
    """Every part's finished journal, in rank order (torch.distributed's all-gather under torchrun)."""
    if world_size == 1:
        return [journal]
    import torch.distributed as dist

    states: list = [None] * world_size
    dist.all_gather_object(states, {"shards": journal.shards, "skipped": journal.skipped})
    parts = []
    for state in states:
        part = Journal(journal.path, journal.fingerprint)
        part.shards, part.skipped = state["shards"], state["skipped"]
        parts.append(part)
    return parts


class _Shard:
    """The shard being written and the manifest rows of its samples."""

    def __init__(self, dst: Path, name: str, target: Target) -> None:
        self.writer = ShardWriter(dst, name)
        self.target = target
        self.sizes: list[list[int]] = []
        self.values: list[Any] = []

    def add(self, key: str, result: Converted) -> None:
        assert result.members is not None  # skipped inputs are never added
        self.writer.add(key, result.members)
        self.sizes.append(list(result.size))
        self.values.append(result.target)

    def close(self, next_input: int) -> dict:
        return {
            **self.writer.close(),
            "sizes": self.sizes,
            **self.target.manifest_rows(self.values),
            "next_input": next_input,
        }


def _write_part(
    dst: Path,
    source: Source,
    order,
    journal: Journal,
    end: int,
    settings: PackSettings,
    workers: int | None,
    errors: ErrorPolicy,
    progress: bool,
    prefix: str,
) -> tuple[int, int]:
    """Converts and writes this part's inputs from the journal's position on; returns ``(copied, bytes_in)``."""
    from tqdm import tqdm

    annotated = source.annotated_sizes
    tasks = (
        Task(
            p,
            source.names[i],
            source.kind,
            source.target.pack_input(source, i),
            source.annotation_errors.get(i, ""),
            None if annotated is None else (int(annotated[i][0]), int(annotated[i][1])),
            source.decode_as,
        )
        for p in range(journal.next_input, end)
        for i in (int(order[p]),)
    )
    shard: _Shard | None = None
    copied = bytes_in = 0
    bar = tqdm(total=end - journal.next_input, unit="img", desc="packing", disable=not progress, smoothing=0.1)
    try:
        # no more processes than inputs left (--workers 512 for a folder of 30 forked 512)
        for position, result in converted(tasks, settings.convert, min(workers or env.cores(), bar.total or 1)):
            bar.update(1)
            bytes_in += result.bytes_in
            path = source.names[order[position]]
            if result.members is None:
                errors.apply([Skipped(path, result.reason or "")])
                journal.skipped.append({"position": position, "path": path, "reason": result.reason, **stamp(path)})
                continue
            copied += result.copied
            if (
                shard is not None
                and shard.writer.entries
                and shard.writer.size_with(result.members) > settings.shard_size
            ):
                journal.shards.append(shard.close(position))
                journal.next_input = position
                journal.save()
                shard = None
            if shard is None:
                shard = _Shard(dst, shardfmt.shard_name(len(journal.shards), prefix), source.target)
            shard.add(f"{position:08d}", result)
        if shard is not None:
            journal.shards.append(shard.close(end))
            shard = None
        journal.next_input = end
        journal.save()
    except OSError as err:
        raise write_failed(f"cannot write into {dst}", err) from None
    finally:
        bar.close()
        if shard is not None:
            shard.writer.abort()
    return copied, bytes_in


__all__ = ["pack", "PackSettings", "PackSummary", "parse_size", "packable"]
