"""A local cache of remote files shared by every process of a node, with a size limit and
least-recently-used eviction.

Layout of the cache folder: ``<key>`` (the file), ``<key>.lock`` (its lock, whose modification time is its
last use) and ``<key>.ok`` (size, mtime, sha256 and the server's version recorded when it was checked); other
files in the folder are not the cache's and are never counted, evicted or removed (``folder.kind``). A
cached file is used only for the same sha256 (where the manifest gives one) or, without one, the same version
as the server reports now (ETag, Last-Modified, generation): a file changed on the server is fetched again,
whatever its size; where the server states no version, only a copy fetched since the cache was made (or one
in use by another process) is used. A download is written to ``<key>.part-<random>``, which its downloader
holds locked (``flock``) until it is renamed into place: a partial file nobody holds is left over by a
process that died and is removed; one that is held is never touched, whatever process or container holds
it. One process downloads a file while the others wait on its lock and then use it: DDP ranks on one node
fetch each shard once. A reader holds a shared lock (a ``Pin``) while it uses a file; eviction takes the
oldest unpinned files until the new one fits, so a file in use is never removed. When pinned files alone
exceed the limit the cache grows past it, with a warning, rather than stall the readers.

Locking: a process takes a file's lock shared to look at it; to download it, it tries the exclusive lock
without waiting and, when readers hold the lock, lets go and retries after a short randomised pause. It never
waits for an exclusive lock while readers hold it, because a reader may itself be waiting (on a collective,
a queue) for the process that would wait on it.
A process that must fetch again a file others still read (another version of it) warns after ``IN_USE_WAIT``
seconds and gives up after ``Retry.deadline`` with a ``CacheError``. A read-only cache serves the copies it
holds, checked, without locks.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Literal, overload
from urllib.parse import urlsplit

from .. import fileio
from ..fileio import read_json_object, sha256_hex
from .fetch import UNSIZED_CAP, CacheError, Retry, download, remote_info
from .folder import RESERVED, Pin, default_cache_dir, kind, make_folder, wait_lock, without_dead_parts
from .urls import cache_key, redact

logger = logging.getLogger("gpupipe.remote")
#: Seconds a process waits to fetch again a file the server states no version of while others hold it; then
#: it takes their copy (they may be readers waiting for this process: waiting longer could wait for ever).
IN_USE_WAIT = 10.0


class ShardCache:
    """Remote files cached in ``folder``, at most ``limit`` bytes of them (files in use excepted).

    Args:
        folder: the cache folder (created); processes sharing it share downloads.
        limit: bytes of cached files to keep.
        retry: how downloads retry.
        storage_options: passed to the fsspec file system.
    """

    def __init__(self, folder, limit: int, retry: Retry | None = None, storage_options: dict | None = None) -> None:
        self.folder = make_folder(folder)
        self.limit, self.retry, self.storage_options = int(limit), retry or Retry(), storage_options
        self.downloads = 0  # made by this process (tests and the bench read it)
        self.created = time.time()  # a file the server states no version of: used if fetched since
        self._over_limit_warned = self._unversioned_warned = self._read_only_warned = False
        self._lock = threading.Lock()

    def path(self, url: str) -> str:
        """Where ``url`` is (or will be) cached: an ASCII name, within 255 bytes whatever the URL's script,
        the same for the URL signed again or with other credentials (``urls.cache_key``)."""
        key = cache_key(url)
        digest = sha256_hex(key, 24)
        name = urlsplit(key).path.rsplit("/", 1)[-1]  # no query (it may hold a token)
        tail = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name)[-80:]
        if RESERVED.search(tail):  # never taken for a lock, a record or a partial download (folder.kind)
            tail += "_"
        return str(self.folder / f"{digest}-{tail}")

    @overload
    def get(
        self,
        url: str,
        *,
        size: int | None = None,
        sha256: str | None = None,
        version: str | None = None,
        max_bytes: int = UNSIZED_CAP,
        pin: Literal[True] = True,
    ) -> Pin: ...
    @overload
    def get(
        self,
        url: str,
        *,
        size: int | None = None,
        sha256: str | None = None,
        version: str | None = None,
        max_bytes: int = UNSIZED_CAP,
        pin: bool,
    ) -> Pin | None: ...

    def get(
        self,
        url: str,
        *,
        size: int | None = None,
        sha256: str | None = None,
        version: str | None = None,
        max_bytes: int = UNSIZED_CAP,
        pin: bool = True,
    ) -> Pin | None:
        """Makes sure ``url`` is cached and checked (downloading it once per node); returns a
        ``Pin`` holding it, or ``None`` with ``pin=False`` (a prefetch).

        Args:
            size: the expected size (the download's cap); ``None``: at most ``max_bytes``.
            sha256: the expected checksum: a cached copy with another is fetched again.
            version: what the server says of the file now (``remote_info``);
                without ``sha256`` or ``version``, the server is asked.

        Raises:
            RemoteError: the download failed after its retries (``CacheError``: this machine's disk).
        """
        path = self.path(url)
        if not sha256 and version is None:
            version = remote_info(url, self.retry, self.storage_options, need_size=False)["version"]
        if not sha256 and version == "" and not self._unversioned_warned:
            self._unversioned_warned = True
            logger.warning(
                "%s: the server states no version that tells a replaced file apart (no ETag; no Last-Modified, or "
                "one of the last seconds: a file written in the same second keeps it) and no checksum is known: a "
                "cached copy is used only if fetched since this source was made",
                redact(url),
            )
        wait, since, held = 0.01, time.monotonic(), [0.0, 0.0]  # held: since when others hold a copy, warned
        while True:
            fd = self._open_lock(path + ".lock", (path, size, sha256, version))
            if fd < 0:  # a read-only cache holding the file checked
                return Pin(-1, path) if pin else None
            try:
                self._wait(fd, f"{redact(url)} in the cache {self.folder}")  # while another downloads it
                if not self._valid(path, size, sha256, version):
                    # a download needs the lock alone; never wait for readers (they may be waiting too)
                    if not fileio.try_lock(fd):
                        unversioned = not sha256 and version == "" and time.monotonic() - since > IN_USE_WAIT
                        if unversioned and self._in_use(fd, path, size, url):
                            return self._pinned(fd, path, pin)
                        os.close(fd)
                        self._held_elsewhere(url, held)
                        time.sleep(wait * random.uniform(0.5, 1.5))  # out of step with the other waiters
                        wait = min(1.0, wait * 2)
                        continue
                    if not self._valid(path, size, sha256, version):
                        self._fetch(url, path, size, sha256, version, max_bytes)
                    fileio.lock(fd, shared=True)  # not atomic: an eviction may slip in between
                if os.path.exists(path):
                    return self._pinned(fd, path, pin)
                os.close(fd)
            except BaseException:
                fileio.close_lock(fd)
                raise

    def _held_elsewhere(self, url: str, held: list[float]) -> None:
        """Counts the time other processes hold a copy of ``url`` that this one must fetch again (another
        version: an older tar still read by a job left running): a warning after ``IN_USE_WAIT`` s.

        Raises:
            CacheError: still held after ``Retry.deadline`` s (it cannot be replaced under its reader).
        """
        now = time.monotonic()
        held[0] = held[0] or now
        if now - held[0] > self.retry.deadline:
            raise CacheError(
                f"{redact(url)}: another process still reads another version of it (an older copy?) in the cache "
                f"{self.folder} after {self.retry.deadline:g} s (Retry.deadline); it cannot be replaced under that "
                "reader: stop that process, or give this one another cache_dir"
            )
        if now - held[0] > IN_USE_WAIT and not held[1]:
            held[1] = 1.0
            logger.warning(
                "%s: the cache %s holds another version of it (changed on the server?) that another process "
                "still reads: waiting for it to let go (at most Retry.deadline, %g s)",
                redact(url),
                self.folder,
                self.retry.deadline,
            )

    def _wait(self, fd: int, what: str) -> None:
        """A shared lock on ``fd``, waiting at most ``Retry.deadline`` (``folder.wait_lock``)."""
        wait_lock(fd, shared=True, seconds=self.retry.deadline, what=what)

    @staticmethod
    def _pinned(fd: int, path: str, pin: bool) -> Pin | None:
        """The cached file held by ``fd`` (its shared lock): a ``Pin``, or ``None`` (released) without ``pin``."""
        os.utime(path + ".lock")  # last use, for eviction
        if not pin:
            os.close(fd)
            return None
        return Pin(fd, path)

    def _in_use(self, fd: int, path: str, size: int | None, url: str) -> bool:
        """Whether an unversioned file is there, held by others (``IN_USE_WAIT``): then it is taken as it is."""
        self._wait(fd, f"{redact(url)} in the cache {self.folder}")  # a failed upgrade may have dropped the lock
        return self._valid(path, size, None, None)

    def _open_lock(self, path: str, wanted: tuple | None = None) -> int:
        """``fileio.open_lock``, a file that cannot be made (a read-only or full disk) a ``CacheError``; -1
        where the cache is read-only (``EROFS``, ``EACCES``) and holds the file ``wanted`` (``(path, size,
        sha256, version)``) checked: nothing of this process can then evict or change it.

        Raises:
            CacheError: naming the cache folder (and saying it is read-only where it is).
        """
        try:
            return fileio.open_lock(path)
        except OSError as err:
            read_only = err.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            if read_only and wanted is not None and self._valid(*wanted):
                if not self._read_only_warned:
                    self._read_only_warned = True
                    logger.warning(
                        "the cache %s is read-only (%s): its checked copies are read as they are, and a file "
                        "it lacks cannot be fetched",
                        self.folder,
                        err.strerror or err,
                    )
                return -1
            hint = "; it is read-only: give a writable cache_dir" if read_only else ""
            raise CacheError(f"cannot write in the cache {self.folder}: {err.strerror or err} ({path}){hint}") from None

    def _fetch(self, url: str, path: str, size: int | None, sha256: str | None, version: str | None, cap: int) -> None:
        part, part_fd = self._make_room(size or 0, path)
        try:
            started = time.time()
            digest = download(
                url, part, self.retry, size=size, sha256=sha256, storage_options=self.storage_options, max_bytes=cap
            )
            try:  # the part file made and locked, not one made again by the download after a removal
                if not os.path.samestat(os.stat(part), os.fstat(part_fd)):
                    raise FileNotFoundError(part)
                os.replace(part, path)
            except FileNotFoundError:
                raise CacheError(f"{part} was removed from the cache while {url} was downloaded into it") from None
            self._record(path, digest, version, fetched_s=time.time() - started)
        except BaseException:
            Path(part).unlink(missing_ok=True)
            raise
        finally:
            fileio.close_lock(part_fd)  # drops the partial file's lock
        with self._lock:
            self.downloads += 1

    def is_cached(self, url: str, size: int | None = None) -> bool:
        """Whether ``url`` is cached and unchanged since it was checked (no lock taken: a hint)."""
        return self._valid(self.path(url), size, None, None)

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def sha256(self, url: str) -> str | None:
        """The checksum recorded when ``url`` was downloaded (``None`` if it is not cached)."""
        return (self.record(url) or {}).get("sha256")

    def record(self, url: str) -> dict | None:
        """What was recorded when ``url`` was downloaded: ``size``, ``sha256``, ``version``, ``fetched_at``
        (wall time) and ``fetched_s`` (seconds it took); ``None`` if it is not cached."""
        return self._read_record(self.path(url))

    def cached_bytes(self) -> int:
        """Bytes of cached files now (partial downloads included)."""
        return sum(size for _, size, _ in self._entries(with_parts=True))

    # -- checks -------------------------------------------------------------------

    def _valid(self, path: str, size: int | None, sha256: str | None, version: str | None) -> bool:
        """Whether the cached file is there, unchanged since it was checked, and the one expected (by
        size, and by sha256 or else by the server's version; ``""``, a server that states none: fetched
        since this cache was made)."""
        record = self._read_record(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if record is None or record.get("size") != st.st_size or record.get("mtime_ns") != st.st_mtime_ns:
            return False  # changed on disk since it was checked: fetch it again
        if sha256:
            return record.get("sha256") == sha256 and (size is None or st.st_size == size)
        if version == "":  # nothing tells a replaced file apart: only a copy fetched since this cache was made
            return (size is None or st.st_size == size) and record.get("fetched_at", -1.0) >= self.created
        return (size is None or st.st_size == size) and (version is None or record.get("version") == version)

    def _record(self, path: str, digest: str, version: str | None, fetched_s: float = 0.0) -> None:
        st = os.stat(path)
        tmp = f"{path}.ok.{uuid.uuid4().hex[:12]}"
        record = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sha256": digest,
            "version": version,
            "fetched_at": time.time(),
            "fetched_s": round(fetched_s, 6),
        }
        try:
            Path(tmp).write_text(json.dumps(record))
            os.replace(tmp, path + ".ok")
        except OSError as err:
            Path(tmp).unlink(missing_ok=True)
            raise CacheError(f"cannot write {path}.ok: {err.strerror or err} (this machine's disk)") from None

    @staticmethod
    def _read_record(path: str) -> dict | None:
        return read_json_object(path + ".ok")

    # -- eviction -----------------------------------------------------------------

    def _entries(self, with_parts: bool = False):
        """``(last use, size, path)`` of every cached file (and partial downloads); the folder's other files
        are not the cache's (``folder.kind``)."""
        out = []
        with os.scandir(self.folder) as it:
            for entry in it:
                what = kind(entry.name)
                if what not in ("file", "part") or (what == "part" and not with_parts):
                    continue
                try:
                    size = entry.stat().st_size
                    used = os.stat(entry.path + ".lock").st_mtime if what == "file" else 0.0
                except FileNotFoundError:
                    continue
                out.append((used, size, entry.path))
        return out

    def _make_room(self, incoming: int, path: str):
        """Evicts the least recently used unpinned files until ``incoming`` more bytes fit; returns the
        partial file for ``path``'s download and its descriptor, which holds its lock (made while no
        other process cleans up, so no one ever sees it unlocked).

        Raises:
            CacheError: the partial file cannot be made.
        """
        fd = self._open_lock(str(self.folder / ".evict.lock"))
        try:
            wait_lock(fd, shared=False, seconds=self.retry.deadline, what=f"the cache {self.folder}")
            present = without_dead_parts(self._entries(with_parts=True))
            total = sum(size for _, size, _ in present) + incoming
            for _, size, path in sorted(e for e in present if kind(os.path.basename(e[2])) == "file"):
                if total <= self.limit:
                    break
                if self._evict(path):
                    total -= size
            if total > self.limit and not self._over_limit_warned:
                self._over_limit_warned = True
                logger.warning(
                    "the cache in %s holds %.1f MB of files in use, over its %.1f MB limit; raise cache_limit",
                    self.folder,
                    total / 1e6,
                    self.limit / 1e6,
                )
            part = f"{path}.part-{uuid.uuid4().hex[:16]}"
            try:
                part_fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as err:
                raise CacheError(f"cannot write in the cache {self.folder}: {err.strerror or err}") from None
            fileio.lock(part_fd)
            return part, part_fd
        finally:
            os.close(fd)

    @staticmethod
    def _evict(path: str) -> bool:
        """Removes a cached file unless a reader holds it (or is downloading it)."""
        fd = fileio.open_lock(path + ".lock")
        if not fileio.try_lock(fd):
            os.close(fd)
            return False
        try:
            for name in (path, path + ".ok"):
                Path(name).unlink(missing_ok=True)
            logger.debug("evicted %s", path)
            return True
        finally:
            os.close(fd)


__all__ = ["ShardCache", "Pin", "default_cache_dir", "make_folder"]
