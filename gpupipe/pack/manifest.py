"""The packed folder's manifest and ``sources.tsv`` (which input became which sample)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from .._version import __version__
from ..errors import Skipped
from ..shards import format as shardfmt
from ..sources import Source
from .journal import Journal, PackError, write_whole

SOURCES = "sources.tsv"


def build(source: Source, settings, journals: list[Journal], inputs: int, problems: Sequence[Skipped] = ()) -> dict:
    """The manifest of the finished shards of every part, in part order; ``problems`` (the
    source's records that are no sample) are listed with the skipped inputs."""
    fields = ("name", "index", "samples", "bytes", "sha256", "index_sha256", "sizes") + source.target.manifest_fields
    shards = [{k: s[k] for k in fields} for journal in journals for s in journal.shards]
    skipped = sorted((s for journal in journals for s in journal.skipped), key=lambda s: s["position"])
    skipped += [{"path": p.path, "reason": p.reason} for p in problems]
    manifest = {
        "format": shardfmt.FORMAT,
        "version": shardfmt.VERSION,
        "written_by": f"gpupipe {__version__}",
        "kind": source.kind.value,
        "settings": asdict(settings),
        "classes": source.classes,
        "class_to_idx": source.class_to_idx,
        "shards": shards,
        "totals": {
            "inputs": inputs,
            "samples": sum(s["samples"] for s in shards),
            "skipped": len(skipped),
            "shards": len(shards),
            "bytes": sum(s["bytes"] for s in shards),
        },
        "skipped": [{"path": s["path"], "reason": s["reason"]} for s in skipped],
    }
    manifest.update(source.target.manifest_extra(source))
    manifest["checksum"] = shardfmt.checksum(manifest)
    return manifest


def write(dst: Path, manifest: dict, here: Sequence[str] | None = None) -> None:
    """Writes the manifest atomically, after checking that every shard it lists (or those named in
    ``here``: the ones on this machine's disk) is on disk as recorded.

    Raises:
        PackError: a listed shard is missing or of another size (never report success for those).
    """
    for shard in manifest["shards"]:
        if here is not None and shard["name"] not in here:
            continue
        path = dst / shard["name"]
        if not path.is_file() or path.stat().st_size != shard["bytes"]:
            raise PackError(
                f"{path} does not match what was written ({shard['bytes']} bytes); "
                "was another process writing into the folder?"
            )
    write_whole(dst / shardfmt.MANIFEST, json.dumps(manifest, indent=1))


#: Characters that end a line for ``str.splitlines`` besides ``\n`` and ``\r`` (a name holding one, written
#: raw, would split its row for a reader that splits lines so): written as the ``\xNN`` of their UTF-8 bytes.
_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def escape(text: str) -> str:
    """A file name as one TSV field: backslash, tab, newline and carriage return escaped, as are the other
    characters ``str.splitlines`` ends a line at (as ``\\xNN``: their UTF-8 bytes); bytes that are not
    UTF-8 (names from other systems) as ``\\xNN``."""
    out = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    for char in _LINE_BREAKS:
        out = out.replace(char, "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8")))
    return (
        out.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        if any("\udc80" <= c <= "\udcff" for c in out)
        else out
    )


def unescape(field: str) -> str:
    """The name ``escape`` wrote."""
    raw = (
        field.encode("utf-8").decode("unicode_escape").encode("latin-1")
        if "\\" in field
        else field.encode("utf-8", "surrogateescape")
    )
    return raw.decode("utf-8", "surrogateescape")


def write_sources(dst: Path, rows: Iterable[tuple[str, str, str]]) -> None:
    """``sources.tsv``: each key, its input file and its target, one line each (fields escaped)."""
    lines = ["key\tpath\ttarget"] + [f"{key}\t{escape(path)}\t{escape(target)}" for key, path, target in rows]
    write_whole(dst / SOURCES, "\n".join(lines) + "\n")


def read_sources(dst: Path) -> dict[str, tuple[str, str]]:
    """``{key: (path, target)}`` from ``sources.tsv``."""
    lines = (Path(dst) / SOURCES).read_text(encoding="utf-8").split("\n")  # not splitlines: \x0c is no line end
    rows = (line.split("\t") for line in lines[1:] if line)
    return {key: (unescape(path), unescape(target)) for key, path, target in rows}
