"""``python -m gpupipe.pack --verify DST``: every shard checked against the manifest."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import BinaryIO

from ..fileio import UnreadableFile, regular_stat, sha256_of
from ..progress import Progress
from ..shards import format as shardfmt
from ..targets import TargetKind, handler
from .writer import BLOCK

logger = logging.getLogger("gpupipe.pack")

#: Problems listed per shard before the rest are summarised.
MAX_PROBLEMS = 20


def verify(dst) -> list[str]:
    """Checks a packed folder; returns the problems found (empty when it is sound).

    The manifest must have the expected shape and name nothing outside
    ``dst``. Per shard: the file exists, its size and sha256 match the
    manifest, its index parses and lists as many samples as the manifest,
    and every indexed member lies in the file under a tar header with the
    same name and size; the target members (``.cls``, ``.json``) say what
    the manifest says. Totals must add up (``read_manifest`` checks
    them). Shards the manifest gives no sha256 (or index sha256) are
    checked all the same, without that comparison, and a warning says
    that checksums were not available.
    """
    dst = Path(dst)
    try:
        manifest = shardfmt.read_manifest(dst)
    except ValueError as err:  # an unfinished pack is named as one
        return [str(err)]
    problems: list[str] = []
    progress = Progress("verify", total=len(manifest["shards"]), unit="shard", logger=logger)
    for number, shard in enumerate(manifest["shards"]):
        progress.update(1)
        try:
            tar = shardfmt.confined(dst, shard["name"], f"shards[{number}].name")
            index = shardfmt.confined(dst, shard["index"], f"shards[{number}].index")
        except ValueError as err:
            problems.append(str(err))
            continue
        problems.extend(_check_shard(tar, index, shard, manifest.get("kind", "label")))
    progress.close()
    unsummed = [s["name"] for s in manifest["shards"] if not s.get("sha256") or not s.get("index_sha256")]
    if unsummed:
        logger.warning(
            "%s: checksums were not available for %d of %d shards (first: %s): their sizes, indexes and "
            "members were checked, not their sha256",
            dst,
            len(unsummed),
            len(manifest["shards"]),
            unsummed[0],
        )
    return problems  # the totals were checked with the manifest (``read_manifest``)


def _check_shard(tar: Path, index: Path, shard: dict, kind: str) -> list[str]:
    name = shard["name"]
    try:
        size = regular_stat(str(tar), None).st_size
    except UnreadableFile as err:
        return [f"{name}: missing" if "No such file" in err.reason else f"{name}: {err.reason}"]
    problems = []
    if size != shard["bytes"]:
        problems.append(f"{name}: {size} bytes, the manifest says {shard['bytes']}")
    if shard.get("sha256") and sha256_of(tar) != shard["sha256"]:
        problems.append(f"{name}: sha256 differs from the manifest (the file changed)")
    try:
        entries = shardfmt.read_index(index, shard.get("index_sha256", ""))
    except ValueError as err:
        return problems + [f"{name}: {err}"]
    if len(entries) != shard["samples"]:
        return problems + [f"{name}: index lists {len(entries)} samples, the manifest {shard['samples']}"]
    with open(tar, "rb") as fh:
        for number, entry in enumerate(entries):
            for ext, member in entry.items():
                problem = _check_member(fh, member, size, ext, shard, number, kind)
                if problem:
                    problems.append(f"{name} sample {number} ({member.name}): {problem}")
            if len(problems) > MAX_PROBLEMS:
                return problems + [f"{name}: more problems not listed"]
    return problems


def _check_member(
    fh: BinaryIO, member: shardfmt.Member, size: int, ext: str, shard: dict, number: int, kind: str
) -> str:
    if member.offset < BLOCK or member.offset + member.size > size:
        return "index points outside the file"
    problem = shardfmt.header_problem(fh.fileno(), member)
    if problem:
        return problem
    target = handler(TargetKind(kind))
    if ext == target.member:
        fh.seek(member.offset)
        return target.member_problem(lambda: fh.read(member.size), shard, number)
    return ""
