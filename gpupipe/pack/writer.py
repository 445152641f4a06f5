"""Writing one shard: a deterministic uncompressed tar plus its DALI index.

A shard is written to ``<name>.tmp`` and renamed when complete, so a
``shard-*.tar`` on disk is always whole. Headers carry no times or owners,
so the same samples give the same bytes in every run.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Dict, List

from .. import shardfmt

_BLOCK = 512


class ShardWriter:
    """Appends samples to one shard.

    Args:
        folder: the packed folder.
        number: the shard's number (its name is ``shard-NNNNNN.tar``).
    """

    def __init__(self, folder: Path, number: int) -> None:
        self.name = shardfmt.shard_name(number)
        self.path = folder / self.name
        self.tmp = folder / (self.name + ".tmp")
        self._file = open(self.tmp, "wb")
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)
        self.entries: List[shardfmt.IndexEntry] = []
        self.labels: List[int] = []

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._tar.offset

    def add(self, key: str, jpeg: bytes, label: int) -> None:
        """Adds ``<key>.jpg`` and ``<key>.cls``."""
        entry = {}
        for ext, payload in (("jpg", jpeg), ("cls", shardfmt.encode_class(label))):
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size, info.mtime, info.mode = len(payload), 0, 0o644
            header_at = self._tar.offset
            self._tar.addfile(info, io.BytesIO(payload))
            entry[ext] = shardfmt.Member(info.name, header_at + _BLOCK, len(payload))
        self.entries.append(entry)
        self.labels.append(label)

    def close(self) -> Dict:
        """Finishes the tar, writes the index, renames both into place; returns the shard's record."""
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        index = self.path.with_name(shardfmt.index_name(self.name))
        index_tmp = index.with_name(index.name + ".tmp")
        shardfmt.write_index(index_tmp, self.entries)
        os.replace(index_tmp, index)
        os.replace(self.tmp, self.path)
        return {
            "name": self.name,
            "index": index.name,
            "samples": len(self.entries),
            "bytes": self.path.stat().st_size,
            "sha256": sha256_of(self.path),
            "labels": self.labels,
        }

    def abort(self) -> None:
        """Drops the unfinished shard."""
        self._file.close()
        self.tmp.unlink(missing_ok=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
