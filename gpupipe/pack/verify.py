"""``python -m gpupipe.pack --verify DST``: every shard checked against the manifest."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import List

from .. import shardfmt
from .writer import sha256_of


def verify(dst) -> List[str]:
    """Checks a packed folder; returns the problems found (empty when it is sound).

    Per shard: the file exists, its size and sha256 match the manifest, its
    index parses and lists as many samples as the manifest, and every
    indexed member lies in the file under a tar header with the same name
    and size, with a ``.cls`` equal to the manifest's label. Totals must add up.
    """
    dst = Path(dst)
    try:
        manifest = shardfmt.read_manifest(dst)
    except ValueError as err:
        return [str(err)]
    problems: List[str] = []
    for shard in manifest["shards"]:
        problems.extend(_check_shard(dst, shard))
    totals = manifest["totals"]
    listed = sum(s["samples"] for s in manifest["shards"])
    if totals["samples"] != listed:
        problems.append(f"manifest totals say {totals['samples']} samples, the shards list {listed}")
    return problems


def _check_shard(dst: Path, shard: dict) -> List[str]:
    tar = dst / shard["name"]
    if not tar.is_file():
        return [f"{shard['name']}: missing"]
    size = tar.stat().st_size
    problems = []
    if size != shard["bytes"]:
        problems.append(f"{shard['name']}: {size} bytes, the manifest says {shard['bytes']}")
    if sha256_of(tar) != shard["sha256"]:
        problems.append(f"{shard['name']}: sha256 differs from the manifest (the file changed)")
    try:
        entries = shardfmt.read_index(dst / shard["index"])
    except ValueError as err:
        return problems + [f"{shard['name']}: {err}"]
    if len(entries) != shard["samples"] or len(shard["labels"]) != shard["samples"]:
        problems.append(f"{shard['name']}: index lists {len(entries)} samples, the manifest {shard['samples']}")
        return problems
    with open(tar, "rb") as fh:
        for number, (entry, label) in enumerate(zip(entries, shard["labels"])):
            for ext, member in entry.items():
                where = f"{shard['name']} sample {number} ({member.name})"
                if member.offset < 512 or member.offset + member.size > size:
                    problems.append(f"{where}: index points outside the file")
                    continue
                fh.seek(member.offset - 512)
                try:
                    header = tarfile.TarInfo.frombuf(fh.read(512), "utf-8", "surrogateescape")
                except tarfile.HeaderError as err:
                    problems.append(f"{where}: no tar header before the indexed data ({err})")
                    continue
                if header.name != member.name or header.size != member.size:
                    problems.append(f"{where}: tar header says {header.name!r} ({header.size} bytes)")
                elif ext == "cls" and fh.read(member.size) != shardfmt.encode_class(label):
                    problems.append(f"{where}: class differs from the manifest's label {label}")
            if len(problems) > 20:
                return problems + [f"{shard['name']}: more problems not listed"]
    return problems
