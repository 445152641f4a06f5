"""``python -m gpupipe.pack --verify DST``: every shard checked against the manifest."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import BinaryIO

from ..fileio import UnreadableFile, regular_stat, sha256_of
from ..progress import Progress
from ..shards import format as shardfmt
from ..sources import refuse_empty
from ..sources.shards import Shards
from ..targets import TargetKind, handler
from .writer import BLOCK

logger = logging.getLogger("gpupipe.pack")

#: Problems listed per shard before the rest are summarised.
MAX_PROBLEMS = 20
#: The scan's limits in ``verify``: none (the loader's ``max_pixels`` and ``max_file_size`` are its own).
NO_LIMIT = 2**62


def verify(dst) -> list[str]:
    """Checks a packed folder; returns the problems found (empty when it is sound).

    The manifest must have the expected shape and name nothing outside
    ``dst``. Per shard: the file exists, its size and sha256 match the
    manifest, its index parses and lists as many samples as the manifest,
    and every indexed member lies in the file under a tar header with the
    same name and size; the target members (``.cls``, ``.json``) say what
    the manifest says. Totals must add up (``read_manifest`` checks
    them); no tar or index lies in ``dst`` unlisted, and the loader
    opens the pack (labels in range, every sample with its image).
    Shards the manifest gives no sha256 (or index sha256) are checked all
    the same, without that comparison, and a warning says that checksums
    were not available.

    Raises:
        ValueError: ``dst`` is an empty or blank string (not read as the current folder).
    """
    dst = Path(refuse_empty(dst, "verify: dst")).expanduser()  # as the loader reads "~/packed"
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
    problems.extend(_unlisted(dst, manifest["shards"]) + _totals(manifest, dst / shardfmt.MANIFEST))
    return problems or _refused(dst)  # the totals were checked with the manifest (``read_manifest``)


def _totals(manifest: dict, path: Path) -> list[str]:
    """The totals the readers do not check (``read_manifest`` checks ``samples`` and ``shards``) that
    disagree with what the manifest lists: ``bytes``, and ``skipped`` (the entries of its ``skipped``)."""
    totals = manifest.get("totals", {})
    skipped = manifest.get("skipped", [])
    listed = {"bytes": sum(shard["bytes"] for shard in manifest["shards"])}
    if not isinstance(skipped, list):
        return [f"{path}: skipped must be a list of inputs left out, got {type(skipped).__name__}"]
    listed["skipped"] = len(skipped)
    return [
        f"{path}: totals.{field} is {totals[field]!r}, the manifest lists {count}"
        for field, count in listed.items()
        if field in totals and totals[field] != count
    ]


def _unlisted(dst: Path, shards: list[dict]) -> list[str]:
    """Shard tars and indexes (named as the packer names them: other files are the user's) in ``dst`` that
    the manifest does not list: a shard dropped from the manifest would otherwise leave a pack that checks
    out, smaller than the one packed."""
    listed = {name for shard in shards for name in (shard["name"], shard["index"])}
    found = sorted(path.name for pattern in ("shard-*.tar", "shard-*.idx") for path in dst.glob(pattern))
    return [
        f"{name}: in the folder, but the manifest does not list it (a shard dropped from the manifest, or one "
        "left from another pack?)"
        for name in found
        if name not in listed
    ]


def _refused(dst: Path) -> list[str]:
    """What the loader refuses in a pack whose every shard checked out (a label past the classes) or
    skips as damaged (a sample whose image the index does not list): ``--verify`` passes no pack that
    ``gpupipe.loader`` cannot read whole. (No size limit applies here: those are the loader's settings.)"""
    try:
        source = Shards(dst, checksums=False)
    except (ValueError, OSError) as err:  # OSError: a file removed or made unreadable since it was checked
        return [f"the loader refuses it: {err}"]
    bad = sorted(source.scan(max_pixels=NO_LIMIT, max_file_size=NO_LIMIT).bad.items())
    return [f"{source.names[i]} (sample {i}): {reason}" for i, reason in bad[:MAX_PROBLEMS]]


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
