"""The packed-shards format: WebDataset tars, DALI index files and the manifest.

A packed folder holds ``shard-NNNNNN.tar`` (uncompressed tar; each sample is
``<key>.jpg`` plus ``<key>.cls``, the class index as 8 zero-padded ASCII
digits, which WebDataset readers parse with ``int()`` and DALI with a
fixed-width sum), one DALI index ``shard-NNNNNN.idx`` per tar, and
``manifest.json``. The index is DALI's ``v1.2`` text format: a header
``v1.2 <samples>``, then per sample ``<ext> <offset> <size> <name>`` for
each component, offsets pointing at the member's data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

FORMAT = "gpupipe-shards"
VERSION = 1
MANIFEST = "manifest.json"
INDEX_VERSION = "v1.2"
#: Width of the zero-padded ASCII class index in ``<key>.cls``.
CLASS_DIGITS = 8
#: The components every sample has, in index order.
COMPONENTS = ("jpg", "cls")


def shard_name(number: int) -> str:
    return f"shard-{number:06d}.tar"


def index_name(tar_name: str) -> str:
    return tar_name[: -len(".tar")] + ".idx"


def encode_class(label: int) -> bytes:
    """The ``.cls`` payload: fixed-width ASCII digits."""
    return b"%0*d" % (CLASS_DIGITS, label)


@dataclass(frozen=True)
class Member:
    """A component's data inside a tar: ``(offset, size)`` and its name."""

    name: str
    offset: int
    size: int


#: One sample's components, keyed by extension.
IndexEntry = Dict[str, Member]


def write_index(path: Path, entries: Sequence[IndexEntry]) -> None:
    """Writes a DALI ``v1.2`` index listing ``entries`` in order."""
    lines = [f"{INDEX_VERSION} {len(entries)}"]
    for entry in entries:
        lines.append(" ".join(f"{ext} {m.offset} {m.size} {m.name}" for ext, m in entry.items()))
    path.write_text("\n".join(lines) + "\n")


def read_index(path: Path) -> List[IndexEntry]:
    """Parses a DALI ``v1.2`` index.

    Raises:
        ValueError: naming the file and line when it is malformed.
    """
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise ValueError(f"cannot read index {path}: {err}") from err
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
            ext, offset, size, name = fields[i:i + 4]
            if not (offset.isdigit() and size.isdigit()):
                raise ValueError(f"index {path}:{lineno}: offset and size must be integers, got {line!r}")
            entry[ext] = Member(name, int(offset), int(size))
        entries.append(entry)
    if len(entries) != int(header[1]):
        raise ValueError(f"index {path}: header says {header[1]} samples, found {len(entries)}")
    return entries


def read_manifest(root: Path) -> Dict:
    """Loads and checks ``root/manifest.json``.

    Raises:
        ValueError: no manifest, not a gpupipe manifest, or a newer version.
    """
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{root} is not a packed folder: cannot read {path.name} ({err})") from err
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} manifest (format={manifest.get('format')!r})")
    if manifest.get("version", 0) > VERSION:
        raise ValueError(f"{path} has format version {manifest['version']}; this gpupipe reads up to {VERSION}")
    return manifest


def is_packed(root: Path) -> bool:
    """Whether ``root`` is a folder written by ``python -m gpupipe.pack``."""
    return (Path(root) / MANIFEST).is_file()


def runs(shard_of: Sequence[int]) -> List[Tuple[int, int, int]]:
    """Splits a sequence of shard numbers into maximal runs ``(shard, start, end)``."""
    out: List[Tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(shard_of) + 1):
        if i == len(shard_of) or shard_of[i] != shard_of[start]:
            out.append((shard_of[start], start, i))
            start = i
    return out
