"""Finding bad files before they reach a decoder: a fast scan of sizes and headers.

DALI cannot skip a sample inside a batch (one bad file invalidates the
pipeline), and torchvision's PNG decoder crashes the process on some
corrupt files, so the loader checks every file once when it is built:
empty files, files that are not images, truncated JPEGs and PNGs (no end
marker) and images with more pixels than allowed (decompression bombs) are
found from the first and last bytes, without decoding. Results are cached
per folder, keyed by each file's size and modification time, so a later
scan only stats the files.

Files that pass the scan but still fail to decode (corrupt data inside) are
caught while loading (see the backends).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .images import ImageRefused, open_checked

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
#: How far from the end an end-of-image marker may sit (some writers pad files).
_TAIL_BYTES = 4096


@dataclass(frozen=True)
class Skipped:
    """A file left out, and why."""

    path: str
    reason: str


def default_cache_dir() -> Path:
    """``$GPUPIPE_CACHE``, else ``$XDG_CACHE_HOME/gpupipe``, else ``~/.cache/gpupipe``."""
    if os.environ.get("GPUPIPE_CACHE"):
        return Path(os.environ["GPUPIPE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpupipe"


class SkipLog:
    """Every file a loader left out, each logged once.

    Attributes:
        entries: the skipped files, in the order they were found.
    """

    def __init__(self) -> None:
        self.entries: List[Skipped] = []
        self._seen: set = set()

    def add(self, path: str, reason: str) -> None:
        if path in self._seen:
            return
        self._seen.add(path)
        self.entries.append(Skipped(path, reason))
        logger.warning("skipping %s: %s", path, reason)


def check_file(path: str, max_pixels: int) -> Optional[str]:
    """Returns why ``path`` cannot be used, or ``None`` when its header and ends look sound."""
    try:
        size = os.path.getsize(path)
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    if size == 0:
        return "empty file (0 bytes)"
    try:
        with open(path, "rb") as fh:
            with open_checked(fh, max_pixels) as img:
                kind = img.format
            fh.seek(max(0, size - _TAIL_BYTES))
            tail = fh.read()
    except ImageRefused as refused:
        return refused.reason
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    if kind == "JPEG" and b"\xff\xd9" not in tail:
        return "truncated JPEG (no end-of-image marker)"
    if kind == "PNG" and b"IEND" not in tail:
        return "truncated PNG (no IEND chunk)"
    return None


def scan(paths: Sequence[str], *, max_pixels: int, cache_dir: Optional[Path]) -> Dict[int, str]:
    """Checks every file; returns ``{index: reason}`` for the bad ones.

    Args:
        paths: the files.
        max_pixels: images with more pixels are refused.
        cache_dir: where results are kept between runs (``None``: no cache).
    """
    started = time.perf_counter()
    cache_file = _cache_file(paths, max_pixels, cache_dir) if cache_dir is not None else None
    cached = _load(cache_file)
    fresh: Dict[str, List] = {}
    bad: Dict[int, str] = {}
    checked = 0
    for index, path in enumerate(paths):
        try:
            stat = os.stat(path)
            key = [stat.st_size, stat.st_mtime_ns]
        except OSError:
            key = [-1, -1]
        entry = cached.get(path)
        if entry is not None and entry[:2] == key:
            reason = entry[2]
        else:
            reason = check_file(path, max_pixels)
            checked += 1
        fresh[path] = key + [reason]
        if reason is not None:
            bad[index] = reason
    if cache_file is not None and (checked or len(fresh) != len(cached)):
        _save(cache_file, fresh)
    logger.info(
        "scanned %d files (%d read, %d from the cache) in %.2f s: %d bad",
        len(paths), checked, len(paths) - checked, time.perf_counter() - started, len(bad),
    )
    return bad


def _cache_file(paths: Sequence[str], max_pixels: int, cache_dir: Path) -> Path:
    root = os.path.commonpath(paths) if paths else ""
    digest = hashlib.sha1(f"{CACHE_VERSION}|{root}|{max_pixels}".encode()).hexdigest()[:20]
    return Path(cache_dir) / "scan" / f"{digest}.json"


def _load(cache_file: Optional[Path]) -> Dict[str, List]:
    if cache_file is None or not cache_file.is_file():
        return {}
    try:
        return json.loads(cache_file.read_text())["files"]
    except (OSError, ValueError, KeyError) as err:
        logger.warning("ignoring unreadable scan cache %s: %s", cache_file, err)
        return {}


def _save(cache_file: Path, files: Dict[str, List]) -> None:
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "files": files}))
        os.replace(tmp, cache_file)
    except OSError as err:
        logger.warning("could not write the scan cache %s: %s", cache_file, err)
