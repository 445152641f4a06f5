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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from nvidia.dali import fn

from ...shards import format as shardfmt
from ...sources import FileSource, ShardSource, Source
from ...targets.maskfiles import is_animated, mask_hw, packed_problem, size_problem

READER = "reader"


@dataclass
class ReaderNodes:
    """The reader's outputs.

    Attributes:
        encoded: the encoded images.
        identity: per sample, what tells it apart (the slot number, or ``source_info``).
        target: the encoded target when the reader reads it (a packed mask), else ``None``.
        expected: per slot, what ``identity`` must say (checked on every batch).
    """

    encoded: object
    identity: object
    target: object | None
    expected: Callable[[int, int], object]


class ReaderFiles:
    """Files a reader needs for one run: index files (parsed when the pipeline is built, then
    removed) and links to files whose names DALI cannot take (removed with the run). A
    process that dies leaves the folder behind; ``remove_stale_folders`` clears it later."""

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


class FileReader:
    """``readers.file`` over the samples' files, with each slot number as the label.

    DALI takes paths as UTF-8: the few names that are not (non-UTF-8 file names) are found once,
    here, and read through links made in each run's folder.
    """

    reads_target = False

    def __init__(self, source: FileSource) -> None:
        self.names = np.array(source.names, dtype=object)
        self.unsafe = {i for i, name in enumerate(source.names) if not name.isascii() and not _utf8(name)}

    def __call__(self, indices: Sequence[int], files: ReaderFiles) -> ReaderNodes:
        names = self.names[np.asarray(indices, np.int64)].tolist()
        if self.unsafe:
            for k, i in enumerate(indices):
                if int(i) in self.unsafe:
                    names[k] = _link(names[k], k, files)
        encoded, slots = fn.readers.file(files=names, labels=list(range(len(names))), random_shuffle=False, name=READER)
        return ReaderNodes(encoded, slots, None, lambda start, count: np.arange(start, start + count))


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _link(path: str, slot: int, files: ReaderFiles) -> str:
    """A link with a UTF-8 name to ``path``."""
    ext = os.path.splitext(path.encode("utf-8", "surrogateescape"))[1].decode("ascii", "replace")
    link = files.path(f"name-{slot}{ext}")
    if not os.path.islink(link):
        os.symlink(os.fsencode(path), link)
    return link


class ShardReader:
    """``readers.webdataset`` over index files written for the run: one per run of consecutive
    samples from one tar (a shuffled epoch visits the tars one by one, so there are few). A target
    packed as pixel data (a mask) is read with its image."""

    def __init__(self, source: ShardSource) -> None:
        self.source = source
        self.exts = [source.image_ext] + ([source.target_ext] if source.target_ext else [])
        self.reads_target = source.target_ext is not None
        self.misfits: dict[int, bool] = {}  # sample -> whether its packed mask cannot serve its image (read once)

    def __call__(self, indices: Sequence[int], files: ReaderFiles) -> ReaderNodes:
        source = self.source
        paths: list[str] = []
        index_paths: list[str] = []
        identities: list[str] = []
        mask_ext, done = source.target_ext, 0
        sizes = source.sizes() if mask_ext is not None else None
        for k, (tar, entries) in enumerate(source.members(indices)):
            index = files.path(f"run{k}.idx")
            picked = [{ext: e[ext] for ext in self.exts} for e in entries]
            if mask_ext is not None and sizes is not None:
                here = [int(i) for i in indices[done : done + len(picked)]]
                _empty_misfit_masks(tar, picked, mask_ext, here, sizes, self.misfits)
            done += len(picked)
            shardfmt.write_index(Path(index), picked)
            paths.append(tar)
            index_paths.append(index)
            identities.extend(f"{tar}:{e[source.image_ext].offset}:{e[source.image_ext].name}" for e in entries)
        outputs = fn.readers.webdataset(
            paths=paths,
            index_paths=index_paths,
            ext=self.exts,
            random_shuffle=False,
            missing_component_behavior="error",
            name=READER,
        )
        encoded, target = (outputs[0], outputs[1]) if self.reads_target else (outputs, None)
        info = fn.get_property(encoded, key="source_info")
        return ReaderNodes(encoded, info, target, lambda start, count: identities[start : start + count])


def _empty_misfit_masks(
    tar: str,
    picked: list[shardfmt.IndexEntry],
    ext: str,
    samples: list[int],
    sizes: np.ndarray,
    misfits: dict[int, bool],
) -> None:
    """Gives each packed mask whose ``IHDR`` size is not its image's (``sizes``: ``(N, 2)`` ``(h, w)`` of every
    sample; ``samples``: ``picked``'s), or that is not an 8-bit gray PNG (``maskfiles.packed_problem``), no
    bytes in ``picked``: its decoding fails, and the probe (``DaliMasks.feed``) names the sample and the sizes
    or the layout, where DALI's graph would stretch it over the image, or read a palette's colours or scaled
    values, without a word. Each mask's header is read from the local tar once: ``misfits`` keeps the verdicts."""
    unseen = [k for k, sample in enumerate(samples) if sample not in misfits]
    if unseen:
        with open(tar, "rb") as fh:
            for k in unseen:
                member = picked[k][ext]

                def read_at(offset: int, count: int, member: shardfmt.Member = member) -> bytes:
                    fh.seek(member.offset + offset)
                    return fh.read(max(0, min(count, member.size - offset)))

                hw = mask_hw(read_at, member.size)
                # DALI would read a palette's colours, scaled values, an animation's first frame
                wrong = bool(packed_problem(read_at(0, 26))) or is_animated(read_at, member.size)
                misfits[samples[k]] = wrong or (hw is not None and bool(size_problem(hw, sizes[samples[k]])))
    for entry, sample in zip(picked, samples):
        if misfits[sample]:
            member = entry[ext]
            entry[ext] = shardfmt.Member(member.name, member.offset, 0)


Reader = FileReader | ShardReader

#: source type -> reader class; the most specific base class of a source picks its reader (each reader takes
#: the sources of its key's type, which a dict's type cannot say: ``Any``).
READERS: dict[type, Callable[[Any], Reader]] = {
    FileSource: FileReader,
    ShardSource: ShardReader,
}


def reader_for(source: Source) -> Reader:
    """The reader of ``source``'s type: ``reader(indices, files)`` gives a run's reader nodes.

    Raises:
        ValueError: no reader for this kind of source.
    """
    for cls in type(source).__mro__:
        if cls in READERS:
            return READERS[cls](source)
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
