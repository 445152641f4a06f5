"""DALI reader nodes for each kind of source, chosen from a table keyed by source type.

A reader reads a given list of samples in that order (never shuffling on
its own) and also says which sample each output is, so that the run can
check that DALI's order is the one planned: ``readers.file`` gets each
sample's slot as its label, ``readers.webdataset`` reports each member's
``source_info``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from nvidia.dali import fn

from ... import shardfmt
from ...sources import FileSource, ShardSource, Source

READER = "reader"


@dataclass
class ReaderNodes:
    """The reader's outputs.

    Attributes:
        encoded: the encoded images.
        identity: per sample, what tells it apart (the slot number, or ``source_info``).
        mask: encoded masks when the reader reads them (packed shards), else ``None``.
        expected: per slot, what ``identity`` must say (checked on every batch).
    """

    encoded: object
    identity: object
    mask: Optional[object]
    expected: Callable[[int, int], object]


class ReaderFiles:
    """Files a reader needs for one run: index files (parsed when the pipeline is built, then
    removed) and links to files whose names DALI cannot take (removed with the run). A
    process that dies leaves the folder behind; :func:`remove_stale_folders` clears it later."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix=f"gpupipe-{os.getpid()}-")

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def built(self) -> None:
        """The pipeline has parsed its index files: they go now."""
        for name in os.listdir(self.folder):
            if name.endswith(".idx"):
                os.unlink(os.path.join(self.folder, name))

    def close(self) -> None:
        if not os.path.isdir(self.folder):
            return
        for name in os.listdir(self.folder):
            os.unlink(os.path.join(self.folder, name))
        os.rmdir(self.folder)


def _dali_safe(path: str, slot: int, files: ReaderFiles) -> str:
    """DALI takes paths as UTF-8; a name that is not (a non-UTF-8 file name) is read through a link."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        link = files.path(f"name-{slot}{os.path.splitext(path.encode('utf-8', 'surrogateescape'))[1].decode('ascii', 'replace')}")
        if not os.path.islink(link):
            os.symlink(os.fsencode(path), link)
        return link


def file_reader(source: FileSource, indices: Sequence[int], files: ReaderFiles) -> ReaderNodes:
    """``readers.file`` over the samples' files, with each slot number as the label."""
    names = [_dali_safe(source.names[i], k, files) for k, i in enumerate(indices)]
    encoded, slots = fn.readers.file(files=names, labels=list(range(len(names))), random_shuffle=False,
                                     name=READER)
    return ReaderNodes(encoded, slots, None, lambda start, count: np.arange(start, start + count))


def shard_reader(source: ShardSource, indices: Sequence[int], files: ReaderFiles) -> ReaderNodes:
    """``readers.webdataset`` over index files written for the run: one per run of consecutive
    samples from one tar (a shuffled epoch visits the tars one by one, so there are few)."""
    paths, index_paths, identities = [], [], []
    for k, (tar, entries) in enumerate(source.members(indices)):
        index = files.path(f"run{k}.idx")
        picked = [{ext: e[ext] for ext in _exts(source)} for e in entries]
        shardfmt.write_index(Path(index), picked)
        paths.append(tar)
        index_paths.append(index)
        identities.extend(f"{tar}:{e[source.image_ext].offset}:{e[source.image_ext].name}" for e in entries)
    outputs = fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=_exts(source), random_shuffle=False,
                                    missing_component_behavior="error", name=READER)
    encoded, mask = (outputs[0], outputs[1]) if source.mask_ext else (outputs, None)
    info = fn.get_property(encoded, key="source_info")
    return ReaderNodes(encoded, info, mask, lambda start, count: identities[start:start + count])


def _exts(source: ShardSource) -> List[str]:
    return [source.image_ext] + ([source.mask_ext] if source.mask_ext else [])


#: source type -> reader; the most specific base class of a source picks its reader.
READERS: Dict[type, Callable[[Source, Sequence[int], ReaderFiles], ReaderNodes]] = {
    FileSource: file_reader,
    ShardSource: shard_reader,
}


def reader_for(source: Source) -> Callable[[Source, Sequence[int], ReaderFiles], ReaderNodes]:
    """The reader of ``source``'s type.

    Raises:
        ValueError: no reader for this kind of source.
    """
    for cls in type(source).__mro__:
        if cls in READERS:
            return READERS[cls]
    raise ValueError(f"the DALI backends cannot read a {type(source).__name__} source")


def remove_stale_folders() -> None:
    """Removes reader folders left behind by processes that died (``gpupipe-<pid>-*`` of dead pids)."""
    base = Path(tempfile.gettempdir())
    for folder in base.glob("gpupipe-*-*"):
        try:
            pid = int(folder.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        try:
            for item in folder.iterdir():
                item.unlink(missing_ok=True)
            folder.rmdir()
        except OSError:  # another process is clearing it too
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
