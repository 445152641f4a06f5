"""Remote reads with retries, a byte cap and a deadline: whole files streamed, checked against their
expected size and sha256.

Every read is streamed: no more than its cap (the expected size, or a
documented cap for files of unknown size) is ever written or held, and the
attempts for one file share one deadline (``Retry.deadline``), so a server
that never stops sending, or sends a byte now and then, fails with a
[`RemoteError`][gpupipe.RemoteError] in time. A failed attempt (the server unreachable or
stopping, a time-out, a 5xx, a short or corrupted download) is retried after
a random pause of up to ``backoff * 2**attempt`` seconds (full jitter, at
most ``MAX_BACKOFF``), or after the server's ``Retry-After``; a 404, a
403 or missing credentials are not retried. Every message names the URL with its credentials
redacted (``redact``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import Error
from ..progress import Progress
from .causes import bad_endpoint, describe, missing, no_credentials, retry_after, status_of, tells_apart
from .stream import Overdue, TooLarge, stream
from .urls import filesystem, redact

logger = logging.getLogger("gpupipe.remote")

#: Longest pause between two attempts, in seconds.
MAX_BACKOFF = 60.0
#: Cap on a download whose size is not known beforehand (an index, a manifest): 1 GiB.
UNSIZED_CAP = 1 << 30


class RemoteError(Error):
    """Remote data could not be read after every retry (the message names the URL, credentials
    redacted, and the cause).

    Not an ``OSError``: a sample whose shard cannot be fetched is not a bad
    sample to skip, it stops the loader.
    """

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class RemoteMissing(RemoteError):
    """The server says the file is not there (not retried)."""


class RemoteDenied(RemoteError):
    """The server refuses access (401, 403), or the client found no credentials to send: not retried."""


class CacheError(RemoteError):
    """A download could not be written on this machine (disk full, a file size limit, permissions), or
    the cache folder cannot be made: the local disk's fault, not the server's; not retried."""


class CorruptDownload(Error):
    """A download whose size or sha256 differs from the one expected."""


@dataclass(frozen=True)
class Retry:
    """How remote reads retry.

    Attributes:
        attempts: tries per file before giving up.
        backoff: the first pause before a retry is random in ``[0, backoff]`` seconds, the n-th in
            ``[0, backoff * 2**n]`` (full jitter, at most ``MAX_BACKOFF``).
        timeout: seconds a connection or a single read may stall before the attempt fails.
        deadline: seconds one file may take, every attempt and pause included (a slow server
            fails then, however it sends).
    """

    attempts: int = 5
    backoff: float = 0.5
    timeout: float = 60.0
    deadline: float = 3600.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool) or self.attempts < 1:
            raise ValueError(f"Retry: attempts must be an int >= 1, got {self.attempts!r}")
        if not self.backoff >= 0 or not self.timeout > 0 or not math.isfinite(self.backoff + self.timeout):
            raise ValueError(f"Retry: backoff must be >= 0 and timeout > 0, got {self.backoff!r}, {self.timeout!r}")
        if not (self.deadline > 0 and math.isfinite(self.deadline)):
            raise ValueError(f"Retry: deadline must be a number of seconds > 0, got {self.deadline!r}")


def with_retries(url: str, retry: Retry, what: str, action: Callable[[float], object]):
    """``action(seconds_left)`` retried by ``retry`` within its deadline; ``what`` says what is done.

    Raises:
        RemoteError: every attempt failed, or the deadline passed ([`RemoteMissing`][gpupipe.remote.RemoteMissing],
            ``RemoteDenied`` at once for a 404 or a 403).
    """
    stop = time.monotonic() + retry.deadline
    last, tries = "no attempt made", 0
    while tries < retry.attempts:
        left = stop - time.monotonic()
        if left <= 0:
            break
        tries += 1
        try:
            return action(left)
        except Overdue:
            last = f"attempt {tries} was still under way (a slow server, or one that sends a little now and then)"
            break
        except Exception as err:  # noqa: BLE001 -- fsspec back ends raise their own types (aiohttp, botocore)
            if isinstance(err, (ImportError, RemoteError)):
                raise
            last, refusal, wait = _judge(err, url, what, retry, tries, stop)
        # raised here, outside the handler: the client's own exception (its message names the URL whole, signature
        # and password included) is then neither the error's __cause__ nor its __context__
        if refusal is not None:
            raise refusal
        time.sleep(wait)
    if time.monotonic() >= stop:
        raise RemoteError(
            f"{what} {url} failed: not done within the deadline of {retry.deadline:g} s "
            f"(Retry.deadline) after {tries} attempts; the last problem: {last}"
        )
    raise RemoteError(f"{what} {url} failed after {retry.attempts} attempts: {last}")


def _judge(err: Exception, url: str, what: str, retry: Retry, tries: int, stop: float):
    """``(the problem in words, the error to raise now or None, seconds to wait before the next attempt)``
    for the failed attempt number ``tries``."""
    last = describe(err, retry.timeout)
    status = status_of(err)
    if missing(err, status):
        return last, RemoteMissing(f"{what} {url}: not found ({last})"), 0.0
    if status in (401, 403) or isinstance(err, PermissionError):
        return last, RemoteDenied(f"{what} {url}: access denied ({last})"), 0.0
    if no_credentials(err):
        return last, RemoteDenied(f"{what} {url}: no credentials found ({last}); {CREDENTIALS_HINT}"), 0.0
    if bad_endpoint(err):
        return last, RemoteError(f"{what} {url}: the client cannot use its endpoint ({last}); {ENDPOINT_HINT}"), 0.0
    if tries >= retry.attempts:
        return last, None, 0.0
    delay = _pause(retry.backoff, tries - 1, retry_after(err), stop - time.monotonic())
    logger.warning(
        "%s", redact(f"{what} {url} failed ({last}); retry {tries} of {retry.attempts - 1} in {delay:.1f} s")
    )
    return last, None, delay


def _pause(backoff: float, attempt: int, retry_after: float | None, left: float) -> float:
    """Seconds before the next attempt: the server's ``Retry-After``, else full jitter; capped."""
    delay = retry_after if retry_after is not None else random.uniform(0.0, backoff * 2**attempt)
    return max(0.0, min(delay, MAX_BACKOFF, left))


#: What to set when the object store's client found no credentials.
CREDENTIALS_HINT = (
    "set them as the store's client reads them (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
    "~/.aws/credentials or AWS_PROFILE), pass storage_options={'key': ..., 'secret': ...}, or, for a public "
    "bucket, storage_options={'anon': True}"
)

#: What to check when the client refuses its endpoint.
ENDPOINT_HINT = (
    "an endpoint is a URL with its scheme, such as http://minio:9000: check AWS_ENDPOINT_URL (and "
    "AWS_ENDPOINT_URL_S3) or storage_options={'endpoint_url': ...}"
)

#: The start of an HTML page (what a server may send with a 200 in place of a file).
_HTML = re.compile(rb"(?i)\s*(\xef\xbb\xbf)?\s*<(!doctype\s+html|html|head|body|!--)")


def is_html_page(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, starts an HTML page (a server's error or sign-in page sent
    with status 200 in place of the file asked for)."""
    return _HTML.match(head) is not None


def read_small(url: str, retry: Retry, storage_options: dict | None = None, max_bytes: int = UNSIZED_CAP) -> bytes:
    """The whole (small) file at ``url``: a manifest, an index; streamed, never more than ``max_bytes``.

    Raises:
        RemoteError: unreachable after the retries or within the deadline, missing, or larger than ``max_bytes``.
    """

    def read(seconds: float) -> bytes:
        data = bytearray()
        try:
            stream(url, retry.timeout, storage_options, data.extend, max_bytes, seconds)
        except TooLarge:
            raise RemoteError(f"{url} is larger than {max_bytes:,} bytes; not a gpupipe metadata file") from None
        return bytes(data)

    return with_retries(url, retry, "reading", read)


#: What file systems report that changes when a file does (HTTP headers, S3, GCS, local), in order.
_VERSION_FIELDS = (
    "ETag",
    "etag",
    "Content-MD5",
    "md5Hash",
    "generation",
    "VersionId",
    "Last-Modified",
    "LastModified",
    "updated",
    "mtime",
)


def remote_info(url: str, retry: Retry, storage_options: dict | None = None, *, need_size: bool = True) -> dict:
    """What the server says of the file at ``url``: its ``size`` (bytes; ``None`` if not said and not
    ``need_size``; an HTTP ``Content-Length: 0`` is not a size: some servers answer every HEAD so) and
    ``version``, the fields that change when the file does (ETag, checksum, generation, modification time;
    '' if none).

    Raises:
        RemoteError: unreachable after the retries, missing, a folder (an object store's prefix), or no
            size reported (with ``need_size``).
    """

    def info(seconds: float) -> dict:
        fs, path = filesystem(url, storage_options, retry.timeout)
        if getattr(fs, "async_impl", False):
            from fsspec.asyn import sync

            found = sync(fs.loop, asyncio.wait_for, fs._info(path), seconds)  # bounded, as every read
        else:
            found = fs.info(path)
        if found.get("type") == "directory":  # an object store's prefix: no file of that name
            raise RemoteError(f"{url} is a folder on the server, not a file: name its files")
        size = found.get("size")
        if size == 0 and "http" in fs.protocol:  # a HEAD handler that sends no body may say so: not a size
            size = None
        if size is None and need_size:
            raise RemoteError(f"{url}: the server reports no size")
        version = "|".join(f"{k}={found[k]}" for k in _VERSION_FIELDS if found.get(k))
        if not tells_apart(found, size):
            version = ""
        return {"size": None if size is None else int(size), "version": version}

    return with_retries(url, retry, "asking about", info)


def download(
    url: str,
    dst: str,
    retry: Retry,
    *,
    size: int | None = None,
    sha256: str | None = None,
    storage_options: dict | None = None,
    max_bytes: int = UNSIZED_CAP,
) -> str:
    """Streams ``url`` into the file ``dst`` and checks it; returns its sha256 (hex). No more than
    ``size`` bytes (``max_bytes`` when the size is not known) are ever written; ``dst`` is removed
    when the download fails.

    Raises:
        RemoteError: every attempt failed, the deadline passed, or the server sent more than expected.
        CacheError: ``dst`` cannot be written (disk full, ...).
    """
    cap = size if size is not None else max_bytes

    def fetch(seconds: float) -> str:
        digest = hashlib.sha256()
        try:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as err:
            raise CacheError(f"downloading {url}: cannot write {dst}: {err.strerror or err}") from None
        progress = Progress(f"download {redact(url).rsplit('/', 1)[-1]}", total=size, unit="B", logger=logger)
        try:

            def sink(chunk: bytes) -> None:
                digest.update(chunk)
                _write_all(fd, chunk, url, dst)
                progress.update(len(chunk))

            got = stream(url, retry.timeout, storage_options, sink, cap, seconds)
        except TooLarge:
            if size is None:  # nothing stated a size: say which limit cut it
                raise RemoteError(
                    f"{url}: the server sends more than the {cap:,} bytes expected; it states no size, and that is "
                    "the most read of such a file (for a WebDataset tar: cache_limit); the rest was not read"
                ) from None
            raise RemoteError(
                f"{url}: the server sends more than the {cap:,} bytes expected; the rest was not read"
            ) from None
        finally:
            os.close(fd)
            progress.close()
        if size is not None and got != size:
            raise CorruptDownload(f"got {got:,} bytes, expected {size:,}")
        if sha256 and digest.hexdigest() != sha256:
            raise CorruptDownload(
                "its sha256 differs from the manifest's (for a WebDataset tar: the one it was indexed from; for a "
                "shard the manifest gives none: the copy this source first read); corrupted in transfer or changed "
                "on the server"
            )
        return digest.hexdigest()

    try:
        return with_retries(url, retry, "downloading", fetch)
    except BaseException:
        Path(dst).unlink(missing_ok=True)
        raise


def _write_all(fd: int, chunk: bytes, url: str, dst: str) -> None:
    view = memoryview(chunk)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError as err:
            raise CacheError(
                f"downloading {url}: cannot write {dst}: {err.strerror or err} (this machine's disk, not the server)"
            ) from None


__all__ = [
    "Retry",
    "RemoteError",
    "RemoteMissing",
    "RemoteDenied",
    "CacheError",
    "CorruptDownload",
    "read_small",
    "remote_info",
    "download",
    "with_retries",
    "is_html_page",
    "MAX_BACKOFF",
    "UNSIZED_CAP",
]
