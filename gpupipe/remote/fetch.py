"""Downloads with retries: whole files checked against their expected size and sha256.

A failed attempt (the server unreachable or stopping, a time-out, a short or
corrupted download) is retried after ``backoff * 2**attempt`` seconds; after
the last attempt a :class:`RemoteError` names the URL and the last cause.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from ..errors import Error
from ..fileio import sha256_of
from .urls import filesystem

logger = logging.getLogger("gpupipe.remote")


class RemoteError(Error):
    """Remote data could not be read after every retry (the message names the URL and the cause).

    Not an ``OSError``: a sample whose shard cannot be fetched is not a bad
    sample to skip, it stops the loader.
    """


class RemoteMissing(RemoteError):
    """The server says the file is not there (not retried)."""


class CorruptDownload(Error):
    """A download whose size or sha256 differs from the one expected."""


@dataclass(frozen=True)
class Retry:
    """How remote reads retry.

    Attributes:
        attempts: tries per file before giving up.
        backoff: seconds before the first retry, doubled after each.
        timeout: seconds a connection or a read may stall before the attempt fails.
    """

    attempts: int = 5
    backoff: float = 0.5
    timeout: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"Retry: attempts must be an int >= 1, got {self.attempts!r}")
        if not self.backoff >= 0 or not self.timeout > 0:
            raise ValueError(f"Retry: backoff must be >= 0 and timeout > 0, got {self.backoff!r}, {self.timeout!r}")


def with_retries(url: str, retry: Retry, what, action):
    """``action()`` retried by ``retry``; ``what`` says what is being done (for messages).

    Raises:
        RemoteError: every attempt failed.
    """
    for attempt in range(retry.attempts):
        try:
            return action()
        except Exception as err:  # noqa: BLE001 -- fsspec back ends raise their own types (aiohttp, botocore)
            if isinstance(err, (ImportError, RemoteError)):
                raise
            last = f"{type(err).__name__}: {err}"
            if _missing(err):
                raise RemoteMissing(f"{what} {url}: not found ({last})") from err
            if attempt + 1 < retry.attempts:
                delay = retry.backoff * 2**attempt
                logger.warning(
                    "%s %s failed (%s); retry %d of %d in %.1f s",
                    what,
                    url,
                    last,
                    attempt + 1,
                    retry.attempts - 1,
                    delay,
                )
                time.sleep(delay)
    raise RemoteError(f"{what} {url} failed after {retry.attempts} attempts: {last}")


def _missing(err: BaseException) -> bool:
    """Whether the server said the file is not there (fsspec's HTTP file system also reports a refused
    connection as ``FileNotFoundError``: its cause tells them apart)."""
    if not isinstance(err, FileNotFoundError):
        return False
    cause = err.__cause__
    if cause is None or isinstance(cause, FileNotFoundError):
        return True
    status = getattr(cause, "status", None)  # aiohttp's response errors
    if status is not None:
        return status in (404, 410)
    response = getattr(cause, "response", None)  # botocore's client errors
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NoSuchBucket", "NotFound")
    return False


def read_small(url: str, retry: Retry, storage_options: Optional[Dict] = None, max_bytes: int = 1 << 30) -> bytes:
    """The whole (small) file at ``url``: a manifest, an index.

    Raises:
        RemoteError: unreachable after the retries, missing, or larger than ``max_bytes``.
    """

    def read() -> bytes:
        fs, path = filesystem(url, storage_options, retry.timeout)
        size = fs.info(path).get("size")
        if size is not None and size > max_bytes:
            raise RemoteError(f"{url} is larger than {max_bytes:,} bytes; not a gpupipe metadata file")
        return fs.cat_file(path)

    return with_retries(url, retry, "reading", read)


#: What file systems report that changes when a file does (HTTP headers, S3, GCS, local), in order.
_VERSION_FIELDS = ("ETag", "etag", "Content-MD5", "md5Hash", "Last-Modified", "LastModified", "updated", "mtime")


def remote_info(url: str, retry: Retry, storage_options: Optional[Dict] = None) -> Dict:
    """What the server says of the file at ``url``: its ``size`` (bytes) and ``version``, the fields
    that change when the file does (ETag, checksum, modification time; '' if the server gives none).

    Raises:
        RemoteError: unreachable after the retries, missing, or no size reported.
    """

    def info() -> Dict:
        fs, path = filesystem(url, storage_options, retry.timeout)
        found = fs.info(path)
        if found.get("size") is None:
            raise RemoteError(f"{url}: the server reports no size")
        version = "|".join(f"{k}={found[k]}" for k in _VERSION_FIELDS if found.get(k))
        return {"size": int(found["size"]), "version": version}

    return with_retries(url, retry, "asking about", info)


def download(
    url: str,
    dst: str,
    retry: Retry,
    *,
    size: Optional[int] = None,
    sha256: Optional[str] = None,
    storage_options: Optional[Dict] = None,
) -> str:
    """Downloads ``url`` to the file ``dst`` and checks it; returns its sha256 (hex).

    Raises:
        RemoteError: every attempt failed or gave a file of another size or checksum.
    """

    def fetch() -> str:
        fs, path = filesystem(url, storage_options, retry.timeout)
        try:
            fs.get_file(path, dst)
            digest = sha256_of(dst)
            got = os.path.getsize(dst)
            if size is not None and got != size:
                raise CorruptDownload(f"got {got:,} bytes, expected {size:,}")
            if sha256 and digest != sha256:
                raise CorruptDownload(
                    "its sha256 differs from the manifest's (corrupted in transfer or changed on the server)"
                )
            return digest
        except BaseException:
            Path(dst).unlink(missing_ok=True)
            raise

    return with_retries(url, retry, "downloading", fetch)


__all__ = [
    "Retry",
    "RemoteError",
    "RemoteMissing",
    "CorruptDownload",
    "read_small",
    "remote_info",
    "download",
    "with_retries",
]
