"""Where images and labels come from; sources know nothing of decoding.

A source is a list of samples (a name, for messages, and a label) plus the
class names, and knows how to read one sample's encoded bytes and how a
shuffled epoch is ordered. The loader decides the order; backends read the
samples in that order.
"""

from __future__ import annotations

import copy
import csv
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import shardfmt
from .sampling import epoch_order, epoch_seed
from .scan import default_cache_dir, scan

logger = logging.getLogger(__name__)

#: File name endings (lower case) an ``ImageFolder`` treats as images.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class Sample:
    """One image and its class index; ``path`` names it (a file, or ``shard.tar#key.jpg``)."""

    path: str
    label: int


class Source:
    """A fixed list of samples with class names.

    Attributes:
        samples: every sample, in a stable order.
        classes: class names; ``classes[label]`` names a sample's class.
    """

    samples: List[Sample]
    classes: List[str]

    @property
    def class_to_idx(self) -> Dict[str, int]:
        """Class name to label, as in ``torchvision.datasets.ImageFolder``."""
        return {name: i for i, name in enumerate(self.classes)}

    @property
    def paths(self) -> List[str]:
        return [s.path for s in self.samples]

    @property
    def labels(self) -> List[int]:
        return [s.label for s in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def subset(self, keep: Sequence[int]) -> "Source":
        """The same source with only the samples at ``keep`` (classes unchanged)."""
        part = copy.copy(self)
        part.samples = [self.samples[i] for i in keep]
        part.__dict__.pop("_bad_files", None)  # indices of the whole source
        return part

    def bad_files(self, max_pixels: int) -> Dict[int, str]:
        """``{index: reason}`` of the files the scan refuses (:func:`gpupipe.scan.scan`).

        Scanned once per source object and pixel limit, so loaders built
        again on the same source (a bench, an evaluation each epoch) do not
        stat every file again.
        """
        memo = self.__dict__.setdefault("_bad_files", {})
        if max_pixels not in memo:
            memo[max_pixels] = scan(self.paths, max_pixels=max_pixels, cache_dir=default_cache_dir())
        return memo[max_pixels]

    def read_bytes(self, index: int) -> np.ndarray:
        """The encoded image of sample ``index`` as a writable 1-D uint8 array."""
        return np.fromfile(self.samples[index].path, dtype=np.uint8)

    def epoch_order(self, *, seed: int, epoch: int, shuffle: bool) -> List[int]:
        """The order of one epoch (all ranks): a permutation of ``(seed, epoch)``, or the stored order."""
        return epoch_order(len(self.samples), seed=seed, epoch=epoch, shuffle=shuffle)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.samples)} samples, {len(self.classes)} classes)"


class ImageFolder(Source):
    """Images in ``root/<class>/**/<file>``, labelled by class folder.

    Classes are the sorted names of the non-hidden folders in ``root``, so
    labels match ``torchvision.datasets.ImageFolder``. Files are matched by
    extension case-insensitively (``.jpg .jpeg .png .bmp .webp``); hidden
    files and folders and other files are ignored.

    Args:
        root: the folder holding one folder per class.
        extensions: file endings to accept (lower case, with the dot).

    Raises:
        ValueError: ``root`` is missing, not a folder, has no class folders,
            or no images.
    """

    def __init__(self, root: PathLike, *, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> None:
        self.root = Path(root).expanduser().absolute()
        if not self.root.exists():
            raise ValueError(f"ImageFolder: root {str(self.root)!r} does not exist")
        if not self.root.is_dir():
            raise ValueError(f"ImageFolder: root {str(self.root)!r} is not a folder")
        extensions = tuple(e.lower() for e in extensions)
        self.classes = sorted(
            e.name for e in os.scandir(self.root) if e.is_dir() and not e.name.startswith(".")
        )
        if not self.classes:
            raise ValueError(f"ImageFolder: {str(self.root)!r} has no class folders (expected root/<class>/<image>)")
        self.samples = []
        for label, name in enumerate(self.classes):
            found = sorted(_walk_images(self.root / name, extensions))
            if not found:
                logger.warning("ImageFolder: class folder %r holds no images", str(self.root / name))
            self.samples.extend(Sample(path, label) for path in found)
        if not self.samples:
            raise ValueError(
                f"ImageFolder: no images under {str(self.root)!r} (extensions {', '.join(extensions)})"
            )


def _walk_images(folder: Path, extensions: Tuple[str, ...]) -> Iterable[str]:
    """Yields image paths under ``folder``, skipping hidden files and folders."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith(".") and name.lower().endswith(extensions):
                yield os.path.join(dirpath, name)


class FileList(Source):
    """Images named by ``(path, label)`` pairs or by a list file.

    A list file is either text, one ``path label`` per line (the path may
    contain spaces; the label is the last field), or CSV (``.csv``) with
    ``path,label`` rows and an optional header. Labels are class indices,
    or class names that are then numbered in sorted order. Relative paths
    are taken from ``root``, by default the list file's folder.

    Args:
        entries: ``(path, label)`` pairs, or the path of a list file.
        root: folder that relative paths start from.
        classes: class names; by default the sorted label names, or
            ``"0" .. str(max label)`` for integer labels.

    Raises:
        ValueError: a missing list file or image, a malformed line, or a
            label outside ``classes``; the message names the file and line.
    """

    def __init__(
        self,
        entries: Union[PathLike, Iterable[Tuple[PathLike, Union[int, str]]]],
        *,
        root: Optional[PathLike] = None,
        classes: Optional[Sequence[str]] = None,
    ) -> None:
        if isinstance(entries, (str, os.PathLike)):
            list_file = Path(entries).expanduser().absolute()
            if not list_file.is_file():
                raise ValueError(f"FileList: list file {str(list_file)!r} does not exist")
            pairs = _read_list_file(list_file)
            root = list_file.parent if root is None else root
        else:
            pairs = [(str(p), lbl) for p, lbl in entries]
        base = Path(root).expanduser().absolute() if root is not None else Path.cwd()
        if not pairs:
            raise ValueError("FileList: no entries")

        names = [lbl for _, lbl in pairs]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in names):
            labels = list(names)
            if classes is None:
                classes = [str(i) for i in range(max(labels) + 1)]
        elif all(isinstance(v, str) for v in names):
            if classes is None:
                classes = sorted(set(names))
            index = {c: i for i, c in enumerate(classes)}
            unknown = sorted(set(names) - set(index))
            if unknown:
                raise ValueError(f"FileList: labels {unknown[:5]} are not among classes {list(classes)[:10]}")
            labels = [index[v] for v in names]
        else:
            raise ValueError("FileList: labels must be all ints or all class names")
        self.classes = list(classes)

        self.samples = []
        missing = []
        for (path, _), label in zip(pairs, labels):
            if not 0 <= label < len(self.classes):
                raise ValueError(
                    f"FileList: label {label} of {path!r} is outside the class range 0..{len(self.classes) - 1}"
                )
            full = str(base / path)
            if not os.path.isfile(full):
                missing.append(full)
            self.samples.append(Sample(full, label))
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ValueError(f"FileList: {len(missing)} listed files do not exist: {missing[:3]}{more}")


def _read_list_file(list_file: Path) -> List[Tuple[str, Union[int, str]]]:
    """Parses a text (``path label``) or CSV (``path,label``) list file."""
    with open(list_file, newline="") as fh:
        if list_file.suffix.lower() == ".csv":
            rows = [(i, row) for i, row in enumerate(csv.reader(fh), 1) if any(c.strip() for c in row)]
            if rows and len(rows[0][1]) == 2 and rows[0][1][1].strip().lower() in _CSV_HEADER_LABELS:
                rows = rows[1:]
            parsed = []
            for lineno, row in rows:
                if len(row) != 2 or not row[0].strip():
                    raise ValueError(f"FileList: {list_file}:{lineno}: expected 'path,label', got {row!r}")
                parsed.append((row[0].strip(), _label(row[1].strip())))
            return parsed
        parsed = []
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(None, 1)
            if len(parts) != 2:
                raise ValueError(f"FileList: {list_file}:{lineno}: expected 'path label', got {line!r}")
            parsed.append((parts[0], _label(parts[1])))
        return parsed


_CSV_HEADER_LABELS = ("label", "class", "target")


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _label(text: str) -> Union[int, str]:
    return int(text) if _is_int(text) else text


class Shards(Source):
    """Samples packed by ``python -m gpupipe.pack`` (WebDataset tars with DALI indexes).

    Reads ``root/manifest.json`` and each shard's index; nothing is scanned.
    Samples are read by offset (random access). A shuffled epoch permutes
    the shards, then the samples inside each shard, both from ``(seed,
    epoch)``: every sample once, and reads stay within one shard at a time.
    The packer writes samples in a shuffled order, so each shard mixes the
    classes.

    Args:
        root: the packed folder.

    Raises:
        ValueError: no manifest, a missing shard or index, or an index that
            does not match the manifest (``python -m gpupipe.pack --verify``
            checks everything).
    """

    def __init__(self, root: PathLike) -> None:
        self.root = Path(root).expanduser().absolute()
        manifest = shardfmt.read_manifest(self.root)
        self.classes = list(manifest["classes"])
        self.tar_paths: List[str] = []
        self.entries: List[shardfmt.IndexEntry] = []
        self.shard_of: List[int] = []
        self.samples = []
        for number, shard in enumerate(manifest["shards"]):
            tar = self.root / shard["name"]
            if not tar.is_file():
                raise ValueError(f"Shards: {tar} is listed in the manifest but missing")
            entries = shardfmt.read_index(self.root / shard["index"])
            labels = shard["labels"]
            if len(entries) != shard["samples"] or len(labels) != len(entries):
                raise ValueError(
                    f"Shards: {shard['index']} lists {len(entries)} samples, the manifest {shard['samples']}"
                )
            self.tar_paths.append(str(tar))
            for entry, label in zip(entries, labels):
                self.entries.append(entry)
                self.shard_of.append(number)
                self.samples.append(Sample(f"{tar}#{entry['jpg'].name}", int(label)))
        if not self.samples:
            raise ValueError(f"Shards: {self.root} holds no samples")
        self._starts = np.searchsorted(self.shard_of, np.arange(len(self.tar_paths) + 1)).tolist()
        self._files: Dict[int, int] = {}

    def read_bytes(self, index: int) -> np.ndarray:
        member = self.entries[index]["jpg"]
        shard = self.shard_of[index]
        fd = self._files.get(shard)
        if fd is None:
            fd = self._files[shard] = os.open(self.tar_paths[shard], os.O_RDONLY)
        data = np.empty(member.size, dtype=np.uint8)
        if os.preadv(fd, [memoryview(data)], member.offset) != member.size:
            raise ValueError(f"Shards: {self.samples[index].path} is cut short (shard truncated?)")
        return data

    def epoch_order(self, *, seed: int, epoch: int, shuffle: bool) -> List[int]:
        if not shuffle:
            return list(range(len(self.samples)))
        import torch

        generator = torch.Generator().manual_seed(epoch_seed(seed, epoch))
        order: List[int] = []
        for shard in torch.randperm(len(self.tar_paths), generator=generator).tolist():
            start, end = self._starts[shard], self._starts[shard + 1]
            order.extend((start + torch.randperm(end - start, generator=generator)).tolist())
        return order

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_files"] = {}  # descriptors do not travel to other processes
        return state

    def __del__(self) -> None:
        for fd in getattr(self, "_files", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass


def as_source(source: Union[Source, PathLike]) -> Source:
    """Turns a path into a source: a packed folder is ``Shards``, another folder an
    ``ImageFolder``, a file a ``FileList``.

    Raises:
        ValueError: the path does not exist or is none of these.
    """
    if isinstance(source, Source):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source must be a path or a gpupipe Source, got {type(source).__name__}: {source!r}")
    path = Path(source).expanduser()
    if path.is_dir():
        return Shards(path) if shardfmt.is_packed(path) else ImageFolder(path)
    if path.is_file():
        return FileList(path)
    raise ValueError(f"source path {str(path)!r} does not exist")
