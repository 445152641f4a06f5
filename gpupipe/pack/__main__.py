"""python -m gpupipe.pack SRC DST: image folders (or file lists) into validated WebDataset shards.

    python -m gpupipe.pack SRC DST [--max-size PX] [--quality Q] [--shard-size 256MB]
                           [--workers N] [--on-error skip|raise] [--staging DIR] [--multi-label]
    torchrun --nnodes=N --nproc_per_node=P -m gpupipe.pack SRC DST ...
    python -m gpupipe.pack --verify DST

DST may be a URL (``s3://bucket/prefix``, ``gs://...``): shards are written into a local staging
folder and uploaded, the manifest last. Under torchrun every rank packs its own part of the inputs
with its own worker processes, and rank 0 writes the manifest once every part is done.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
from pathlib import Path

from .. import env
from ..cli import ArgumentParser, run
from ..errors import SampleError, plural
from ..fileio import byte_size, sha256_hex, shell_word
from ..remote import Retry, is_url
from ..remote.urls import cache_key, filesystem, redact
from ..shards import format as shardfmt
from ..sources import FileList
from . import ConvertSettings, NothingPacked, PackError, PackSettings, pack, parse_size, verify
from .packer import barrier
from .signals import sigterm_stops, terminated
from .upload import upload, upload_manifest, verify_remote

#: The exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: The exit status after SIGTERM (128 + SIGTERM).
EXIT_TERMINATED = 143
#: Skipped inputs printed after a pack (all of them are in the manifest).
LISTED = 10


#: What ``--help`` ends with: the commands a newcomer runs first.
EXAMPLES = """\
examples:
  python -m gpupipe.pack data/train packed/train                  # an image folder (root/<class>/<image>)
  python -m gpupipe.pack data/train packed/train --max-size 256   # shrunk once, not decoded full size per epoch
  python -m gpupipe.pack files.txt packed/train                   # a list file: path and label per line
  python -m gpupipe.pack data/train s3://bucket/packed/train      # packed here, then uploaded
  python -m gpupipe.pack --verify packed/train                    # check every shard against the manifest
then: gpupipe.loader("packed/train", "train", batch_size=256)
"""


def parse_args(argv: list[str] | None):
    parser = ArgumentParser(
        prog="python -m gpupipe.pack",
        description="Pack an image folder (class/file) or a file list into WebDataset tar shards with DALI "
        "indexes and a manifest; every image is checked and written as a clean RGB JPEG. Bad inputs are "
        "skipped and listed (here and in the manifest), or stop the run with --on-error raise.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", nargs="?", metavar="SRC", help="image folder root/<class>/<image>, or a list file")
    parser.add_argument(
        "dst", nargs="?", metavar="DST", help="output folder or URL (a rerun resumes after its last finished shard)"
    )
    parser.add_argument("--verify", action="store_true", help="check DST against its manifest instead of packing")
    parser.add_argument(
        "--max-size", type=int, metavar="PX", help="shrink so the shorter side is at most PX (never enlarges)"
    )
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images (default: 90)")
    parser.add_argument("--shard-size", default="256MB", help="roll over to a new shard at this size (default: 256MB)")
    parser.add_argument(
        "--workers",
        type=int,
        help="converting processes (default: all cores; under torchrun, the cores divided by the ranks on the node)",
    )
    parser.add_argument(
        "--on-error",
        choices=["skip", "raise"],
        default="skip",
        help="skip (and list in the manifest) or stop at a bad input (default: skip)",
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=100_000_000,
        help="refuse images with more pixels, as decompression bombs (default: 100000000)",
    )
    parser.add_argument(
        "--max-file-size", default="1GB", help="refuse larger input files (default: 1GB; K/M/G are powers of 1024)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the order samples are written in (default: 0)")
    parser.add_argument(
        "--staging",
        help="where shards for a URL DST are written before the upload "
        f"(default: under {env.cache_dir('pack-staging')}; a rerun resumes there)",
    )
    parser.add_argument(
        "--multi-label",
        action="store_true",
        help="SRC is a list file: pack it multi-label (multi-hot targets) even if every line has one label, as "
        "FileList(SRC, multi_label=True) reads it; repeated lines of an image merge into its label set",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    for name in ("src", "dst", "staging"):  # a '~' the shell left (--staging=~/s) is the home folder
        value = getattr(args, name)
        if value is not None and not is_url(value):
            setattr(args, name, os.path.expanduser(value))
    if args.verify:
        if args.dst is not None:
            parser.error("--verify takes only DST")
        if args.src is None:
            parser.error("--verify needs DST, the packed folder or URL to check")
        args.src, args.dst = None, args.src
        if not is_url(args.dst) and not Path(args.dst).exists():
            parser.error(f"--verify: {args.dst} does not exist")
    elif args.dst is None:
        parser.error("SRC and DST are required (or --verify DST)")
    if args.multi_label and args.verify:
        parser.error("--multi-label is for packing a list file, not for --verify")
    if args.multi_label and (is_url(args.src) or not Path(args.src).is_file()):
        parser.error(f"--multi-label reads a list file as SRC, and {args.src} is not a file")
    if args.max_size is not None and args.max_size < 1:
        parser.error(f"--max-size must be >= 1, got {args.max_size}")
    if not 1 <= args.quality <= 100:
        parser.error(f"--quality must be in 1..100, got {args.quality}")
    if args.max_pixels < 1:
        parser.error(f"--max-pixels must be >= 1, got {args.max_pixels}")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    try:
        args.shard_bytes = parse_size(args.shard_size)
    except ValueError as err:
        parser.error(f"--shard-size: {err}")
    try:
        args.max_file_bytes = byte_size(args.max_file_size, "--max-file-size")
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    """Packs or verifies; returns the exit status (1: --verify found problems). An error (a bad input
    with --on-error raise, a missing SRC, a full disk, a server that cannot be reached) raises: run by
    ``python -m gpupipe.pack`` it ends the command with one line, ``error: ...``, and status 2. Ctrl-C
    ends it with one line saying how to resume, and status 130."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    retry = Retry()
    if args.verify:
        problems = verify_remote(args.dst, retry) if is_url(args.dst) else verify(args.dst)
        for problem in problems:
            print(f"FAIL {problem}")
        print(f"{redact(args.dst)}: {'OK' if not problems else plural(len(problems), 'problem')}")
        return 1 if problems else 0
    settings = PackSettings(
        convert=ConvertSettings(
            max_size=args.max_size, quality=args.quality, max_pixels=args.max_pixels, max_file_size=args.max_file_bytes
        ),
        shard_size=args.shard_bytes,
        seed=args.seed,
    )
    if is_url(args.dst):  # a missing file system (gpupipe[s3]) is named now, not after hours of packing
        filesystem(args.dst)
    rank, world_size = _distributed()
    local_dst = Path(args.staging or staging_dir(args.dst)) if is_url(args.dst) else Path(args.dst)
    workers = args.workers or env.default_threads()
    src = FileList(args.src, multi_label=True) if args.multi_label else args.src
    try:
        with sigterm_stops() if world_size == 1 else contextlib.nullcontext():  # torchrun's SIGTERM: its own
            summary = pack(
                src,
                local_dst,
                settings,
                workers=workers,
                on_error=args.on_error,
                progress=not args.quiet and rank == 0,
                rank=rank,
                world_size=world_size,
                shared_dst=not is_url(args.dst),
            )
            if is_url(args.dst):
                upload(local_dst, args.dst, summary.files, retry)
                if world_size > 1:
                    barrier()
                if rank == 0:
                    upload_manifest(local_dst, args.dst, retry)
    except KeyboardInterrupt:
        by_sigterm = terminated()
        print(interrupted(local_dst, "terminated" if by_sigterm else "interrupted"), file=sys.stderr)
        return EXIT_TERMINATED if by_sigterm else EXIT_INTERRUPTED
    except SampleError as err:
        if args.on_error == "raise" and not err.summary and len(err.args) == 1:  # one input and its reason
            err.args = (f"{err.args[0]}; {RAISED}",)
        raise
    except NothingPacked:
        if rank == 0:
            list_skipped(local_dst, args.dst)
        raise
    except PackError as err:
        if OTHER_PACK not in str(err):
            raise
        raise PackError(f"{err}: {settings_differ(local_dst, settings)}") from None
    except ValueError as err:
        if "pass multi_label=True" not in str(err):
            raise
        raise ValueError(str(err).replace("pass multi_label=True", "pass --multi-label")) from None
    finally:
        if world_size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
    listed = rank == 0 and summary.skipped > 0 and list_skipped(local_dst, args.dst)
    mib = 2**20
    part = f"rank {rank} of {world_size}: " if world_size > 1 else ""
    where = "listed above, and" if listed else "reasons"
    skipped = (
        f"skipped {summary.skipped} ({where} in {redact(args.dst)}/manifest.json)"
        if summary.skipped
        else "nothing skipped"
    )
    print(
        f"{part}packed {plural(summary.packed, 'image')} into {plural(summary.shards, 'shard')} "
        f"({summary.bytes_out / mib:.1f} MiB), {skipped}"
        + (f"; resumed after {plural(summary.resumed_shards, 'finished shard')}" if summary.resumed_shards else "")
    )
    print(
        f"{part}this run: {summary.processed} inputs ({summary.bytes_in / mib:.1f} MiB read, {summary.copied} JPEGs "
        f"copied as they were) in {summary.seconds:.1f} s: {summary.images_per_s:.0f} images/s"
    )
    if rank == 0:
        print(next_step(redact(args.dst), summary.packed))  # a password or a signature is never printed
    return 0


def next_step(dst: str, packed: int) -> str:
    """The line saying how the pack at ``dst`` is read: the bench, and a script's line; a batch no larger than
    the ``packed`` images (the bench's default on a GPU is 256: a smaller pack gets a ``--batch-size``)."""
    flag = f" --batch-size {max(1, min(32, packed))}" if packed < 256 else ""
    return (
        f"next: python -m gpupipe.bench --data {shell_word(dst)}{flag}; in a script: "
        f'gpupipe.loader({dst!r}, "train", batch_size={max(1, min(256, packed))})'
    )


#: What to do after ``--on-error raise`` stopped at a bad input (appended to its error).
RAISED = "remove or replace it, or pack without --on-error raise to leave such inputs out and list them"
#: The journal's refusal of a DST packed from other inputs or settings (``settings_differ`` completes it).
OTHER_PACK = "was packed from other inputs or with other settings"
#: The flags that decide a pack's bytes, and where its manifest's ``settings`` hold each.
SETTING_FLAGS = (
    ("--max-size", "convert", "max_size"),
    ("--quality", "convert", "quality"),
    ("--max-pixels", "convert", "max_pixels"),
    ("--max-file-size", "convert", "max_file_size"),
    ("--shard-size", None, "shard_size"),
    ("--seed", None, "seed"),
)


def settings_differ(local_dst: Path, settings: PackSettings) -> str:
    """Which flags of this command differ from those DST was packed with (its manifest's), for the refusal to
    pack into it; where none do, its inputs differ; where it has no manifest (a pack stopped before its
    end), what to do."""
    try:
        before = shardfmt.read_manifest(local_dst).get("settings")
    except ValueError as err:
        if (local_dst / shardfmt.MANIFEST).exists():  # there, but damaged: what is wrong with it
            return str(err)
        return "it holds a pack stopped before its end (no manifest.json to compare this command with)"
    groups = {group for _, group, _ in SETTING_FLAGS if group}
    if not (isinstance(before, dict) and all(isinstance(before.get(group), dict) for group in groups)):  # by hand
        return f"its {shardfmt.MANIFEST} records no settings to compare this command with (edited by hand?)"
    now = dataclasses.asdict(settings)
    was, asked = [], []
    for flag, group, key in SETTING_FLAGS:
        old = before[group].get(key) if group else before.get(key)
        new = now[group][key] if group else now[key]
        if old != new:
            was.append(f"{flag} {'none' if old is None else old}")
            asked.append(f"{flag} {'none' if new is None else new}")
    if not was:
        return "its settings are this command's, so its inputs differ (files added, removed or changed)"
    return f"it was packed with {', '.join(was)}, and this command asks for {', '.join(asked)}"


def list_skipped(local_dst: Path, dst: str, limit: int = LISTED) -> bool:
    """Prints the inputs the pack left out, each with its reason, from its manifest (stderr): ``limit`` of
    them, then how many more the manifest lists. Returns whether there was a manifest to list them from."""
    if not (local_dst / shardfmt.MANIFEST).exists():
        return False
    entries = shardfmt.read_manifest(local_dst).get("skipped", [])
    for entry in entries[:limit]:
        print(f"skipped {entry['path']}: {entry['reason']}", file=sys.stderr)
    if len(entries) > limit:
        more = len(entries) - limit
        print(f"... and {more} more: every one with its reason in {dst}/{shardfmt.MANIFEST}", file=sys.stderr)
    return True


def interrupted(dst: Path, how: str = "interrupted") -> str:
    """What Ctrl-C (or SIGTERM: ``how="terminated"``) left: nothing before the pack's journal is written
    (while the inputs are listed), else the finished shards, which a rerun keeps."""
    if not any(dst.glob(".pack-journal*.json")):
        return f"{how} before packing began: nothing was written to {dst}; run the same command again"
    return f"{how}: the finished shards are kept in {dst}; run the same command again to resume"


def staging_dir(url: str) -> Path:
    """The default local folder where shards for ``url`` are written before they are uploaded."""
    return env.cache_dir("pack-staging") / sha256_hex(cache_key(url), 16)  # no secret decides a name


def _distributed():
    """``(rank, world size)``: under torchrun, with the gloo process group started (for the barriers)."""
    if env.rank_and_world()[1] == 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


if __name__ == "__main__":
    run(main)
