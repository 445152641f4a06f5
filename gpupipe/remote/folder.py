"""The cache folder's ground floor: where it is by default, making it, the ``Pin`` that holds a cached
file, and the removal of partial downloads whose downloader died."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .. import env, fileio
from .fetch import CacheError


def default_cache_dir() -> Path:
    """Where remote tars are cached: ``remote/`` in gpupipe's cache folder (``gpupipe.env.cache_dir``)."""
    return env.cache_dir("remote")


def make_folder(folder) -> Path:
    """The cache folder ``folder`` (``cache_dir``), made if missing, as an absolute path.

    Raises:
        CacheError: it cannot be made (a file is in its place, no permission, ...).
    """
    path = Path(folder).expanduser().absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CacheError(f"cache_dir {path}: cannot make the cache folder: {err.strerror or err}") from None
    return path


def wait_lock(fd: int, *, shared: bool, seconds: float, what: str) -> None:
    """Takes the lock of ``fd``, waiting at most ``seconds`` for the process that holds it (a download, an
    eviction: both end within their own deadline, unless that process was stopped or its container paused).

    Raises:
        CacheError: still held after ``seconds``; ``what`` names the file and the cache.
    """
    stop, pause = time.monotonic() + seconds, 0.005
    while not fileio.try_lock(fd, shared=shared):
        if time.monotonic() > stop:
            raise CacheError(
                f"{what}: another process (or container) has held its lock for over {seconds:g} s (Retry.deadline) "
                "and never let go: a stopped or paused process? Stop it, or give this one another cache_dir"
            )
        time.sleep(pause)
        pause = min(0.25, pause * 2)


class Pin:
    """A shared lock on a cached file: while it is held the file is not evicted."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor drops the lock
            self.fd = -1

    def __del__(self) -> None:
        self.release()


#: The names the cache gives its files (``ShardCache.path``: 24 hex digits of a digest, ``-``, the URL's last
#: part), partial downloads (``<name>.part-<16 hex digits>``; ``.part-<pid>-<thread>`` in older caches) and their
#: companions: a name that fits none is not the cache's, and is never counted, evicted or removed (a
#: ``cache_dir`` may be a folder that holds other files).
CACHED = re.compile(r"[0-9a-f]{24}-.*")
_PART_END = r"\.part-(?:[0-9a-f]{16}|\d+-\d+)"
PART = re.compile(r"[0-9a-f]{24}-.*" + _PART_END)
#: What a cached name may not end with (the companions' endings): ``ShardCache.path`` adds ``_`` to it.
RESERVED = re.compile(r"(?:\.lock|\.ok|\.ok\.[0-9a-f]+|" + _PART_END + ")$")


def kind(name: str) -> str | None:
    """What the file ``name`` in a cache folder is: ``"part"`` (a partial download), ``"file"`` (a cached
    file), ``"other"`` (a lock or a record of one) or ``None`` (not the cache's)."""
    if PART.fullmatch(name):
        return "part"
    if not CACHED.fullmatch(name):
        return None
    return "other" if RESERVED.search(name) else "file"


def without_dead_parts(entries):
    """Removes partial downloads that no process holds (left by one that died); returns the other
    entries. A held lock, not a process id, says a download is alive: process ids mean nothing
    across containers sharing the folder."""
    alive = []
    for entry in entries:
        path = entry[2]
        if kind(os.path.basename(path)) == "part" and not fileio.is_held(path):
            Path(path).unlink(missing_ok=True)
            continue
        alive.append(entry)
    return alive


__all__ = [
    "default_cache_dir",
    "make_folder",
    "wait_lock",
    "Pin",
    "without_dead_parts",
    "kind",
    "CACHED",
    "PART",
    "RESERVED",
]
