"""Reading a remote file piece by piece under a byte cap and one overall time limit, whatever the
file system (HTTP, S3, GCS through fsspec; a local one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..errors import Error
from .urls import filesystem

#: Bytes read from the server at a time.
CHUNK = 1 << 20


class TooLarge(Error):
    """The file holds more than its cap (``args[0]``); the callers in ``fetch`` turn it into a
    ``RemoteError`` naming the URL."""


class PartialAnswer(Error):
    """The server answered a request for the whole file with a part of it (``206 Partial Content``: no request
    of gpupipe asks for a range); ``fetch.with_retries`` retries it, then names it with the URL."""


class Overdue(Error):
    """The time limit passed during a read; ``fetch.with_retries`` turns it into a ``RemoteError``."""


def stream(url: str, timeout: float, storage_options, sink: Callable[[bytes], None], cap: int, seconds: float) -> int:
    """Reads ``url`` into ``sink`` piece by piece (``timeout``: seconds one read may stall); returns
    the bytes read.

    Raises:
        TooLarge: more than ``cap`` bytes (nothing past ``cap`` reaches ``sink``).
        Overdue: ``seconds`` passed.
    """
    fs, path = filesystem(url, storage_options, timeout)
    stop = time.monotonic() + seconds
    got = [0]

    def take(chunk: bytes) -> None:
        if got[0] + len(chunk) > cap:
            raise TooLarge(cap)
        sink(chunk)
        got[0] += len(chunk)

    if getattr(fs, "async_impl", False):
        from fsspec.asyn import sync

        try:
            sync(fs.loop, _copy_async, fs, path, take, stop)
        except (asyncio.TimeoutError, TimeoutError):
            if time.monotonic() >= stop:
                raise Overdue() from None
            raise
        return got[0]
    with fs.open(path, "rb", block_size=CHUNK) as fh:  # local-like file systems: reads return promptly
        while chunk := fh.read(CHUNK):
            take(chunk)
            if time.monotonic() >= stop:
                raise Overdue()
    return got[0]


async def _copy_async(fs, path: str, take: Callable[[bytes], None], stop: float) -> None:
    """The async read under one overall time limit (the streamed file where the file system has one,
    else ranged reads)."""

    async def copy() -> None:
        try:
            http = "http" in fs.protocol
            fh = await fs.open_async(path, "rb", **({"size": -1} if http else {}))  # no HEAD first
            if http:  # fsspec's streamed HTTP file forgets the request options (headers, auth): give them back
                fh.kwargs = {**getattr(fs, "kwargs", {}), **fh.kwargs}
        except NotImplementedError:
            start = 0
            while chunk := await fs._cat_file(path, start=start, end=start + 8 * CHUNK):
                take(chunk)
                start += len(chunk)
            return
        try:
            chunk = await fh.read(CHUNK)
            _whole(getattr(fh, "r", None))
            while chunk:
                take(chunk)
                chunk = await fh.read(CHUNK)
        finally:
            await fh.close()

    await asyncio.wait_for(copy(), timeout=max(0.001, stop - time.monotonic()))


def _whole(response) -> None:
    """Refuses an HTTP answer (aiohttp's response; ``None`` for other file systems) that is a part of the file.

    Raises:
        PartialAnswer: a ``206``, naming its ``Content-Range``.
    """
    if getattr(response, "status", None) == 206:
        where = response.headers.get("Content-Range", "no Content-Range")
        raise PartialAnswer(
            f"the server answered 206 Partial Content ({where}) to a request for the whole file "
            "(a proxy or a server that mishandles ranges); the part was not used"
        )


__all__ = ["stream", "TooLarge", "Overdue", "PartialAnswer", "CHUNK"]
