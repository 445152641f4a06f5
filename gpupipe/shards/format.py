"""The packed-shards format: WebDataset tars, DALI index files and the manifest.

A packed folder holds ``shard-NNNNNN.tar`` (uncompressed tar; each sample is
``<key>.jpg`` plus its target: ``<key>.cls``, the class index as 8
zero-padded ASCII digits, which WebDataset readers parse with ``int()``;
``<key>.png``, a mask of class ids; or ``<key>.json``, boxes or several
labels), one DALI index ``shard-NNNNNN.idx`` per tar, and ``manifest.json``.
The index is DALI's ``v1.2`` text format: a header ``v1.2 <samples>``,
then per sample ``<ext> <offset> <size> <name>`` for each component,
offsets pointing at the member's data.

Everything here is read as untrusted: names must stay inside the packed
folder, numbers must be in range, and the manifest must have the expected
shape; anything else is a ``ValueError`` naming the file and the field.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import is_int
from ..fileio import UnreadableFile, read_file, sha256_hex, sha256_of
from ..targets import TargetKind, handler

FORMAT = "gpupipe-shards"
#: 2: per-sample image sizes, target kinds other than class labels.
VERSION = 2
MANIFEST = "manifest.json"
#: The journals of a pack being written (``gpupipe.pack.journal``): there until it is finished, and after.
JOURNALS = ".pack-journal*.json"
INDEX_VERSION = "v1.2"
#: The member holding the image (each target kind's handler names its own: ``Target.member``).
IMAGE_EXT = "jpg"
#: Cap on a manifest or index file read (they are small; a larger one is not ours).
MAX_METADATA_BYTES = 1 << 30
#: A tar header's size (the data of a member follows its header).
TAR_BLOCK = 512
#: A local pack of at most this many bytes has its shards' sha256 checked whenever it is opened
#: (well under a second); a larger one only when asked (``Shards(root, checksums=True)``) or by
#: ``python -m gpupipe.pack --verify``. Sizes are checked always.
CHECKSUM_AUTO_BYTES = 64 << 20


def shard_name(number: int, prefix: str = "shard") -> str:
    return f"{prefix}-{number:06d}.tar"


def index_name(tar_name: str) -> str:
    return tar_name[: -len(".tar")] + ".idx"


@dataclass(frozen=True)
class Member:
    """A component's data inside a tar: ``(offset, size)`` and its name."""

    name: str
    offset: int
    size: int


#: One sample's components, keyed by extension.
IndexEntry = dict[str, Member]


def write_index(path: Path, entries: Sequence[IndexEntry]) -> None:
    """Writes a DALI ``v1.2`` index listing ``entries`` in order."""
    lines = [f"{INDEX_VERSION} {len(entries)}"]
    for entry in entries:
        lines.append(" ".join(f"{ext} {m.offset} {m.size} {m.name}" for ext, m in entry.items()))
    Path(path).write_text("\n".join(lines) + "\n")


def read_index(path: Path, sha256: str = "") -> list[IndexEntry]:
    """Parses a DALI ``v1.2`` index.

    Args:
        path: the index file.
        sha256: its checksum as the manifest records it ('' to skip the check).

    Raises:
        ValueError: naming the file and line when it is malformed, or when it
            does not match ``sha256``.
    """
    try:
        data = read_file(str(path), MAX_METADATA_BYTES)
    except UnreadableFile as err:
        raise ValueError(f"cannot read index {path}: {err.reason}") from None
    if sha256 and sha256_hex(data) != sha256:
        raise ValueError(f"index {path} differs from the one packed (its sha256 does not match the manifest)")
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines:
        raise ValueError(f"index {path} is empty")
    header = lines[0].split()
    if len(header) != 2 or header[0] != INDEX_VERSION or not header[1].isdigit():
        raise ValueError(f"index {path}:1: expected '{INDEX_VERSION} <samples>', got {lines[0]!r}")
    entries = []
    for lineno, line in enumerate(lines[1:], 2):
        fields = line.split()
        if not fields or len(fields) % 4:
            raise ValueError(f"index {path}:{lineno}: expected groups of 'ext offset size name', got {line!r}")
        entry = {}
        for i in range(0, len(fields), 4):
            ext, offset, size, name = fields[i : i + 4]
            if not (offset.isdigit() and size.isdigit()):
                raise ValueError(f"index {path}:{lineno}: offset and size must be integers, got {line!r}")
            entry[ext] = Member(name, int(offset), int(size))
        entries.append(entry)
    if len(entries) != int(header[1]):
        raise ValueError(f"index {path}: header says {header[1]} samples, found {len(entries)}")
    return entries


def member_problem(member: Member, tar_size: int, max_size: int) -> str:
    """Why an indexed member cannot be read from a tar of ``tar_size`` bytes ('' when it can)."""
    if member.offset < 512:
        return f"{member.name}: index offset {member.offset} lies inside the first tar header"
    if member.offset + member.size > tar_size:
        return (
            f"{member.name}: indexed bytes {member.offset}..{member.offset + member.size} lie past the end of "
            f"the tar ({tar_size} bytes; cut short?)"
        )
    if member.size > max_size:
        return f"{member.name}: {member.size:,} bytes exceeds the {max_size:,}-byte limit"
    return ""


def confined(root: Path, name: Any, what: str) -> Path:
    """``root / name`` for a name read from a manifest, refusing anything that leaves ``root``.

    Raises:
        ValueError: the name is not a string, is absolute, contains ``..``, or
            resolves (through links) outside ``root``.
    """
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"{root / MANIFEST}: {what} must be a file name, got {name!r}")
    if os.path.isabs(name) or ".." in Path(name).parts:
        raise ValueError(f"{root / MANIFEST}: {what} {name!r} leaves the packed folder")
    path = root / name
    base = root.resolve()
    if path.resolve() != base and base not in path.resolve().parents:
        raise ValueError(f"{root / MANIFEST}: {what} {name!r} leads outside the packed folder (a link?)")
    return path


def check_shard_file(path, shard: dict, size: int, root, checksum: bool) -> bool:
    """Checks a shard file against its manifest entry: its size, and its sha256 when ``checksum``
    (and the manifest has one).

    Returns:
        whether its sha256 was checked (it is then the very file packed).

    Raises:
        ValueError: one line naming the shard and the command that checks the whole pack.
    """
    verify = f"check the pack with: python -m gpupipe.pack --verify {root}"
    if size != shard["bytes"]:
        raise ValueError(
            f"Shards: {path} is {size:,} bytes, the manifest says {shard['bytes']:,} (cut short or "
            f"changed since it was packed); {verify}"
        )
    if not (checksum and shard.get("sha256")):
        return False
    if sha256_of(path) != shard["sha256"]:
        raise ValueError(
            f"Shards: {path} differs from the shard packed (its sha256 does not match the manifest); {verify}"
        )
    return True


def header_problem(fd: int, member: Member) -> str:
    """Why the tar header before ``member``'s data (the open tar ``fd``) does not name it: another name or
    size, or no header at all ('' when it names it)."""
    try:
        header = tarfile.TarInfo.frombuf(os.pread(fd, TAR_BLOCK, member.offset - TAR_BLOCK), "utf-8", "surrogateescape")
    except tarfile.HeaderError as err:
        return f"no tar header before the indexed data ({err})"
    if header.name != member.name or header.size != member.size:
        return f"tar header says {header.name!r} ({header.size} bytes)"
    return ""


def check_shard_members(path, entries: Sequence[IndexEntry], size: int, root) -> None:
    """Checks that the tar headers before the first and the last sample's members name them: a shard
    renamed, or swapped with another of the same size (unhashed: a large pack), is refused rather than read
    with the other's targets. (Members outside the tar are left to ``ShardSource.validate_members``.)

    Raises:
        ValueError: naming the shard, the member and what its header says.
    """
    with open(path, "rb") as fh:
        for entry in [*entries[:1], *entries[-1:]]:
            for member in entry.values():
                problem = "" if member_problem(member, size, size) else header_problem(fh.fileno(), member)
                if problem:
                    raise ValueError(
                        f"Shards: {path} is not the shard packed (renamed, or swapped with another of its size?): "
                        f"its index puts {member.name} ({member.size} bytes) where the {problem}; check the pack "
                        f"with: python -m gpupipe.pack --verify {root}"
                    )


def read_shard_index(path, shard: dict, where=None) -> list[IndexEntry]:
    """The index of one manifest shard, checked against the manifest's ``index_sha256`` and
    ``samples`` (``where`` names it in messages; default ``path``).

    Raises:
        ValueError: as ``read_index``, or another number of samples than the manifest's.
    """
    entries = read_index(path, shard.get("index_sha256") or "")
    if len(entries) != shard["samples"]:
        raise ValueError(f"Shards: {where or path} lists {len(entries)} samples, the manifest {shard['samples']}")
    return entries


def read_manifest(root: Path) -> dict:
    """Loads and checks ``root/manifest.json``.

    Raises:
        ValueError: no manifest, not a gpupipe manifest, a newer version, or a
            field of the wrong type or range (named).
    """
    path = Path(root) / MANIFEST
    try:
        data = read_file(str(path), MAX_METADATA_BYTES)
    except UnreadableFile as err:
        if not path.exists() and any(Path(root).glob(JOURNALS)):
            raise ValueError(
                f"{root} is an unfinished pack: its journal is there, not yet its {path.name} (the pack was "
                "stopped before its end); run the same pack command again to finish it"
            ) from None
        raise ValueError(f"{root} is not a packed folder: cannot read {path.name} ({err.reason})") from None
    return parse_manifest(data, path)


def parse_manifest(data: bytes, path) -> dict:
    """Parses and checks a manifest's bytes (``path`` names it in messages: a file or a URL).

    Raises:
        ValueError: not JSON, not a gpupipe manifest, a newer version, or a wrong field (named).
    """
    try:
        manifest = json.loads(data)
    except ValueError as err:  # not JSON, not UTF-8, or an int past Python's digit limit
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError(f"{path} is not valid JSON: nested too deeply to read") from None
    check_manifest(manifest, path)
    return manifest


def _expect(cond: bool, path: Path, field: str, value: Any, want: str) -> None:
    if not cond:
        text = repr(value)
        raise ValueError(f"{path}: {field} must be {want}, got {text[:80] + ('...' if len(text) > 80 else '')}")


def checksum(manifest: dict) -> str:
    """The manifest's own checksum: sha256 of its canonical JSON without the ``checksum`` field."""
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return sha256_hex(json.dumps(body, sort_keys=True, separators=(",", ":")))


def check_manifest(manifest: Any, path: Path) -> None:
    """Checks the manifest's shape (types and ranges of every field the readers use).

    Raises:
        ValueError: naming the file and the first wrong field.
    """
    _expect(isinstance(manifest, dict), path, "the manifest", manifest, "a JSON object")
    _expect(manifest.get("format") == FORMAT, path, "format", manifest.get("format"), repr(FORMAT))
    version = manifest.get("version")
    _expect(is_int(version) and version >= 1, path, "version", version, "an int >= 1")
    if version > VERSION:
        raise ValueError(f"{path} has format version {version}; this gpupipe reads up to {VERSION}")
    if version >= 2 and manifest.get("checksum") != checksum(manifest):
        raise ValueError(
            f"{path} is damaged: its checksum does not match its content (edited or corrupted "
            "since it was written; pack again, or restore it)"
        )
    kind = manifest.get("kind", "label")
    kinds = sorted(k.value for k in TargetKind)
    _expect(kind in kinds, path, "kind", kind, f"one of {kinds}")
    target = handler(TargetKind(kind))
    classes = manifest.get("classes")
    _expect(
        isinstance(classes, list) and all(isinstance(c, str) for c in classes),
        path,
        "classes",
        classes,
        "a list of names",
    )
    ignore = manifest.get("ignore_index", 255)
    _expect(is_int(ignore) and 0 <= ignore <= 255, path, "ignore_index", ignore, "an int in 0..255")
    shards = manifest.get("shards")
    _expect(isinstance(shards, list), path, "shards", shards, "a list")
    for k, shard in enumerate(shards):
        where = f"shards[{k}]"
        _expect(isinstance(shard, dict), path, where, shard, "an object")
        for field in ("name", "index"):
            _expect(isinstance(shard.get(field), str), path, f"{where}.{field}", shard.get(field), "a string")
        for field in ("samples", "bytes"):
            _expect(
                is_int(shard.get(field)) and shard[field] >= 0,
                path,
                f"{where}.{field}",
                shard.get(field),
                "an int >= 0",
            )
        for field in ("sha256", "index_sha256"):  # none ('' or null), or a sha256 (capitals read as such)
            digest = shard.get(field)
            if digest not in (None, ""):
                sound = isinstance(digest, str) and len(digest) == 64 and not digest.strip("0123456789abcdefABCDEF")
                _expect(sound, path, f"{where}.{field}", digest, "a sha256 (64 hex digits), or none")
                shard[field] = digest.lower()
        n = shard["samples"]
        problem = target.rows_problem(shard, n)
        if problem is not None:
            field, value, want = problem
            _expect(False, path, f"{where}.{field}", value, want)
        if version >= 2:
            sizes = shard.get("sizes")
            _expect(
                isinstance(sizes, list)
                and len(sizes) == n
                and all(isinstance(s, list) and len(s) == 2 and all(is_int(v) and v > 0 for v in s) for s in sizes),
                path,
                f"{where}.sizes",
                sizes,
                f"{n} [h, w] pairs of positive ints",
            )
    totals = manifest.get("totals", {})
    _expect(isinstance(totals, dict), path, "totals", totals, "an object")
    _check_listing(manifest, path)


def _check_listing(manifest: dict, path) -> None:
    """Every shard and index named once, and the totals (where given) those of the shards listed: a shard
    dropped from a manifest, or listed twice, is refused rather than read as a smaller or doubled pack."""
    seen: set[str] = set()
    for k, shard in enumerate(manifest["shards"]):
        for field in ("name", "index"):
            if shard[field] in seen:
                raise ValueError(f"{path}: shards[{k}].{field} {shard[field]!r} is listed twice")
            seen.add(shard[field])
    totals = manifest.get("totals", {})
    listed = {"samples": sum(s["samples"] for s in manifest["shards"]), "shards": len(manifest["shards"])}
    for field, count in listed.items():
        if field in totals and totals[field] != count:
            raise ValueError(f"{path}: totals.{field} is {totals[field]!r}, the shards listed give {count}")


def is_packed(root: Path) -> bool:
    """Whether ``root`` is a folder written by ``python -m gpupipe.pack``."""
    return (Path(root) / MANIFEST).is_file()


def runs(shard_of: Sequence[int]) -> list[tuple[int, int, int]]:
    """Splits a sequence of shard numbers into maximal runs ``(shard, start, end)``."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(shard_of) + 1):
        if i == len(shard_of) or shard_of[i] != shard_of[start]:
            out.append((int(shard_of[start]), start, i))
            start = i
    return out
