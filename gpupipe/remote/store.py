"""Where a shard source's tars are: on this disk (``LocalStore``) or behind URLs, read through
the node's cache (``CachedStore``). Both read a member by offset; the cached store also
fetches ahead of need, holds the files a DALI run reads, and sizes those runs to the cache."""

from __future__ import annotations

import functools
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, overload

from ..fileio import read_range
from .cache import Pin, ShardCache
from .urls import redact

logger = logging.getLogger("gpupipe.remote")

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Fetched:
    """Downloads into the cache over a period (``CachedStore.fetched_since``).

    Attributes:
        files: files downloaded.
        bytes: their bytes.
        seconds: time spent downloading them (summed over files; downloads may overlap).
    """

    files: int
    bytes: int
    seconds: float


class Hold:
    """Files held for a reader (a DALI run) until ``release``."""

    def __init__(self, pins: Sequence[Pin] = ()) -> None:
        self.pins = list(pins)

    def release(self) -> None:
        for pin in self.pins:
            pin.release()
        self.pins = []


class LocalStore:
    """Tars on this disk; descriptors opened on first read, one set per process and per copy."""

    remote = False
    #: Shards a DALI run may span (``None``: no limit).
    shards_per_run: int | None = None
    ahead = 0

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self.locations = self.paths  # what messages name
        self._files: dict[int, int] = {}

    def read(self, shard: int, offset: int, size: int, name: str) -> bytes:
        """``size`` bytes at ``offset`` of tar ``shard`` (``name`` is for messages).

        Raises:
            UnreadableFile: the tar is shorter than expected.
        """
        fd = self._files.get(shard)
        if fd is None:
            fd = self._files[shard] = os.open(self.paths[shard], os.O_RDONLY | _CLOEXEC)
        return read_range(fd, offset, size, name)

    def hold(self, shards: Sequence[int]) -> Hold:
        return Hold()

    def prefetch(self, shards: Sequence[int]) -> None:
        """Nothing to fetch."""

    def clone(self) -> LocalStore:
        """The same files, with descriptors of its own."""
        return type(self)(self.paths)

    def close(self) -> None:
        for fd in self._files.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._files = {}

    def __getstate__(self):
        # descriptors do not travel to other processes
        return {"paths": self.paths, "locations": self.paths, "_files": {}}

    def __del__(self) -> None:
        self.close()


class CachedStore:
    """Tars behind URLs, read from the node's ``ShardCache``.

    Args:
        urls: one per shard.
        sizes: each tar's size in bytes.
        sha256s: each tar's checksum (``None`` where unknown: the checksum of the copy first read, from then on).
        cache: the node's cache.
        threads: background downloads at once.
        open_shards: tars a process keeps open (and pinned) for sample reads.
    """

    remote = True

    def __init__(
        self,
        urls: Sequence[str],
        sizes: Sequence[int],
        sha256s: Sequence[str | None],
        cache: ShardCache,
        *,
        threads: int = 4,
        open_shards: int = 2,
    ) -> None:
        self.urls, self.sizes, self.sha256s = list(urls), [int(s) for s in sizes], list(sha256s)
        self.cache, self.threads, self.open_shards = cache, threads, open_shards
        self.paths = [cache.path(u) for u in self.urls]
        self.locations = [redact(u) for u in self.urls]  # what messages name (credentials redacted)
        biggest = max(self.sizes, default=0)
        check_fits(cache, biggest)
        if 2 * biggest > cache.limit:
            logger.warning(
                "cache_limit %s bytes holds fewer than two shards of %s bytes: shards will be read "
                "before the next is fetched (no reading ahead)",
                f"{cache.limit:,}",
                f"{biggest:,}",
            )
        capacity = cache.limit // max(1, biggest)
        #: Shards a DALI run may span: half the cache (the other half for the run built ahead), at most 16.
        self.shards_per_run = max(1, min(16, capacity // 2))
        #: Shards fetched ahead of sample reads: what the cache holds beside those open, at most 2.
        self.ahead = max(0, min(2, capacity - open_shards - 1))
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._open: OrderedDict[int, tuple] = OrderedDict()  # shard -> (pin, fd), least recent first
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future] = {}

    def _mine(self) -> None:
        """After a fork the parent's threads and pins are not this process's."""
        if self._pid != os.getpid():
            self._reset()

    @overload
    def fetch(self, shard: int, pin: Literal[True] = True) -> Pin: ...
    @overload
    def fetch(self, shard: int, pin: bool) -> Pin | None: ...

    def fetch(self, shard: int, pin: bool = True) -> Pin | None:
        """Makes shard ``shard`` local (downloading it if needed); returns its pin. A shard whose checksum the
        manifest does not give takes the one of the copy first read: fetched again later (evicted, then
        replaced on the server), it must be that copy, never another version under the same index."""
        url, sha256 = self.urls[shard], self.sha256s[shard]
        held = self.cache.get(url, size=self.sizes[shard], sha256=sha256, pin=pin)
        if sha256 is None:
            self.sha256s[shard] = self.cache.sha256(url)
        return held

    def read(self, shard: int, offset: int, size: int, name: str) -> bytes:
        self._mine()
        held = self._open.get(shard)
        if held is None:
            pin = self.fetch(shard)
            try:
                fd = os.open(self.paths[shard], os.O_RDONLY | _CLOEXEC)
            except BaseException:
                pin.release()
                raise
            held = self._open[shard] = (pin, fd)
            while len(self._open) > self.open_shards:
                _, (old_pin, old_fd) = self._open.popitem(last=False)
                os.close(old_fd)
                old_pin.release()
        self._open.move_to_end(shard)
        return read_range(held[1], offset, size, name)

    def fetched_since(self, since: float) -> Fetched:
        """What the node downloaded of these tars from wall time ``since`` on (from the cache's records:
        downloads made by any process sharing the cache count)."""
        count = size = 0
        seconds = 0.0
        for url in self.urls:
            record = self.cache.record(url) or {}
            if record.get("fetched_at", -1.0) >= since:
                count, size = count + 1, size + int(record.get("size", 0))
                seconds += float(record.get("fetched_s", 0.0))
        return Fetched(count, size, seconds)

    def hold(self, shards: Sequence[int]) -> Hold:
        """Fetches ``shards`` (in parallel) and pins them until the hold is released.

        Raises:
            RemoteError: a download failed after its retries.
        """
        self._mine()
        futures = [self._executor().submit(self.fetch, s) for s in dict.fromkeys(int(s) for s in shards)]
        pins: list[Pin] = []
        try:
            for future in futures:
                pins.append(future.result())
        except BaseException:
            for future in futures:
                if future.done() and future.exception() is None:
                    future.result().release()
                else:
                    future.add_done_callback(_release_when_fetched)
            raise
        return Hold(pins)

    def prefetch(self, shards: Sequence[int]) -> None:
        """Starts downloading the first ``ahead`` of ``shards`` in the background; failures surface
        when they are read."""
        self._mine()
        for shard in shards[: self.ahead]:
            shard = int(shard)
            if shard in self._pending or self.cache.is_cached(self.urls[shard], self.sizes[shard]):
                continue
            future = self._executor().submit(self.fetch, shard, False)
            self._pending[shard] = future
            future.add_done_callback(functools.partial(self._fetched, shard))

    def _fetched(self, shard: int, future: Future) -> None:
        self._pending.pop(shard, None)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="gpupipe-fetch")
        return self._pool

    def clone(self) -> CachedStore:
        twin = object.__new__(type(self))
        twin.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_")})
        twin._reset()
        return twin

    def close(self) -> None:
        if getattr(self, "_pid", None) != os.getpid():
            return
        for pin, fd in self._open.values():
            os.close(fd)
            pin.release()
        self._open.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._reset()

    def __del__(self) -> None:
        self.close()


def check_fits(cache: ShardCache, size: int) -> None:
    """Refuses a cache that cannot hold a shard of ``size`` bytes.

    Raises:
        ValueError: ``size`` is over the cache's limit (naming both).
    """
    if size > cache.limit:
        raise ValueError(f"cache_limit {cache.limit:,} bytes cannot hold one shard ({size:,} bytes); raise cache_limit")


def _release_when_fetched(future: Future) -> None:
    """A fetch still running when its hold failed: its pin is released when it arrives."""
    if future.exception() is None:
        future.result().release()


__all__ = ["LocalStore", "CachedStore", "Hold", "Fetched", "check_fits"]
