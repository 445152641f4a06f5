"""Writing one shard: a deterministic uncompressed tar plus its DALI index.

A shard is written to ``<name>.tmp`` and renamed when complete, so a
``shard-*.tar`` on disk is always whole. Headers carry no times or owners,
so the same samples give the same bytes in every run. This module is the
one place that knows the tar layout (header blocks, padding, the closing
record).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from ..fileio import sha256_of
from ..shards import format as shardfmt

BLOCK = 512
#: ``tarfile`` ends an archive with two zero blocks, padded to a multiple of its record size.
_END = 2 * BLOCK
_RECORD = tarfile.RECORDSIZE


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


class ShardWriter:
    """Appends samples to one shard.

    Args:
        folder: where the shard is written.
        name: the shard's file name (``shard-NNNNNN.tar``).
    """

    def __init__(self, folder: Path, name: str) -> None:
        self.name = name
        self.path = folder / name
        self.tmp = folder / (name + ".tmp")
        self.index_tmp = folder / (shardfmt.index_name(name) + ".tmp")
        try:
            self._file = open(self.tmp, "wb")
            self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)
        except BaseException:  # Ctrl-C or SIGTERM as the shard starts: no .tmp left for the packer to abort
            self.tmp.unlink(missing_ok=True)
            raise
        self.entries: list[shardfmt.IndexEntry] = []

    def size_with(self, members: dict[str, bytes]) -> int:
        """The shard's size once closed, if ``members`` were added now."""
        size = self._tar.offset + sum(BLOCK + _padded(len(payload)) for payload in members.values()) + _END
        return -(-size // _RECORD) * _RECORD

    def add(self, key: str, members: dict[str, bytes]) -> None:
        """Adds ``<key>.<ext>`` for each member."""
        entry = {}
        for ext, payload in members.items():
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size, info.mtime, info.mode = len(payload), 0, 0o644
            header_at = self._tar.offset
            self._tar.addfile(info, io.BytesIO(payload))
            entry[ext] = shardfmt.Member(info.name, header_at + BLOCK, len(payload))
        self.entries.append(entry)

    def close(self) -> dict:
        """Finishes the tar, writes the index, renames both into place; returns the shard's record."""
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        index = self.path.with_name(shardfmt.index_name(self.name))
        shardfmt.write_index(self.index_tmp, self.entries)
        os.replace(self.index_tmp, index)
        os.replace(self.tmp, self.path)
        return {
            "name": self.name,
            "index": index.name,
            "samples": len(self.entries),
            "bytes": self.path.stat().st_size,
            "sha256": sha256_of(self.path),
            "index_sha256": sha256_of(index),
        }

    def abort(self) -> None:
        """Drops the unfinished shard (and its index, when closing it failed)."""
        try:
            self._file.close()
        except OSError:
            pass
        for tmp in (self.tmp, self.index_tmp):
            tmp.unlink(missing_ok=True)
