"""What a failed remote read says about its cause, whatever client raised it (aiohttp through fsspec's HTTP
file system, botocore through s3fs, ...): the HTTP status, a ``Retry-After``, a missing file or missing
credentials, and the words a message gives the failure (a time-out named as one, a status as a status); and whether
what a server says of a file tells it from a file of the same size written in its place (``tells_apart``)."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import time
from collections.abc import Iterator

#: The clients' errors for credentials that are missing or incomplete (botocore's, google-auth's; botocore's
#: ``ProfileNotFound``: an ``AWS_PROFILE`` that no config file holds): no attempt can succeed until the user sets
#: them, so none is retried.
NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError", "ProfileNotFound")


def chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and what caused it (``__cause__``, else ``__context__``), at most 8 links."""
    current: BaseException | None = err
    seen = 0
    while current is not None and seen < 8:
        yield current
        current, seen = (current.__cause__ or current.__context__), seen + 1


def status_of(err: BaseException) -> int | None:
    """The HTTP status behind an error (aiohttp's or botocore's), if any."""
    for e in chain(err):
        status = getattr(e, "status", None)
        if isinstance(status, int):
            return status
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
    return None


def retry_after(err: BaseException, now: float | None = None) -> float | None:
    """The server's ``Retry-After`` in seconds from ``now`` (wall time, default: the clock): a number of
    seconds, or an HTTP date (RFC 9110; one already past is 0); ``None`` when absent or unreadable."""
    for e in chain(err):
        headers = getattr(e, "headers", None)
        response = getattr(e, "response", None)
        if headers is None and isinstance(response, dict):
            headers = response.get("ResponseMetadata", {}).get("HTTPHeaders")
        value = None
        if headers is not None:
            value = headers.get("Retry-After") or headers.get("retry-after")
        if value is not None:
            return _seconds(str(value), time.time() if now is None else now)
    return None


def _seconds(value: str, now: float) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is in GMT
        return None
    return max(0.0, when.timestamp() - now)


def no_credentials(err: BaseException) -> bool:
    """Whether the client found no credentials (or incomplete ones) to send."""
    return any(type(e).__name__ in NO_CREDENTIALS for e in chain(err))


def bad_endpoint(err: BaseException) -> bool:
    """Whether the client refused the endpoint it was given (botocore's ``Invalid endpoint``, an
    ``EndpointResolutionError``): a setting, not the server; no attempt can succeed."""
    return any(
        type(e).__name__ == "EndpointResolutionError"
        or (type(e) is ValueError and str(e).startswith("Invalid endpoint"))
        for e in chain(err)
    )


def missing(err: BaseException, status: int | None) -> bool:
    """Whether the server said the file is not there (fsspec's HTTP file system also reports a refused
    connection, a time-out or a 5xx as ``FileNotFoundError``: its cause tells them apart)."""
    if status in (404, 410):
        return True
    if not isinstance(err, FileNotFoundError):
        return False
    cause = err.__cause__
    if cause is None or isinstance(cause, FileNotFoundError):
        return status is None
    response = getattr(cause, "response", None)  # botocore's client errors
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NoSuchBucket", "NotFound")
    return False


def is_time_out(err: BaseException) -> bool:
    """Whether a connection or a read stalled past its time-out (asyncio's, aiohttp's, fsspec's, botocore's)."""
    return any(isinstance(e, (TimeoutError, asyncio.TimeoutError)) or "Timeout" in type(e).__name__ for e in chain(err))


def describe(err: BaseException, timeout: float) -> str:
    """What went wrong, in a message's words: a time-out named as one (with ``timeout``, the seconds
    allowed), else the most telling link of the chain (fsspec's bare ``FileNotFoundError: <url>`` or an
    empty time-out error says nothing that its cause does not)."""
    links = list(chain(err))
    telling = next((e for e in links if not _hollow(e, links)), links[0])
    words = f"{type(telling).__name__}: {telling}".rstrip(": ")
    if is_time_out(err):
        return f"no answer within the {timeout:g} s time-out (Retry.timeout; {words})"
    return words


def _hollow(e: BaseException, links: list[BaseException]) -> bool:
    """A link that only wraps the next: no words, or fsspec's ``FileNotFoundError`` over another cause."""
    if e is links[-1]:
        return False
    return not str(e).strip() or (isinstance(e, FileNotFoundError) and e.__cause__ is not None)


#: Fields that change with a file's content whatever the time (a content hash, a store's generation or version id).
_CONTENT_FIELDS = ("Content-MD5", "md5Hash", "generation", "VersionId")
#: Seconds within which a modification time (``Last-Modified``: whole seconds) cannot tell a file from another
#: written in the same second: 1 s of resolution, and 1 s of clock difference between server and client.
FRESH_SECONDS = 2.0


def tells_apart(found: dict, size) -> bool:
    """Whether what the server says of a file (``found``: fsspec's ``info``) tells its content from that of a
    file of the same size written later: a content hash, a generation or version id, or an ETag does; a modification
    time only once older than ``FRESH_SECONDS`` (a file replaced in the same second keeps its Last-Modified), and so
    for an ETag that is that time and the size (nginx's, ``"<hex seconds>-<hex size>"``) or a weak one (``W/``)."""
    if any(found.get(k) for k in _CONTENT_FIELDS):
        return True
    stamp = next((found[k] for k in ("Last-Modified", "LastModified", "updated") if found.get(k)), None)
    seconds = _epoch(stamp)
    etag = str(found.get("ETag") or found.get("etag") or "")
    timed = etag.startswith("W/") or (seconds is not None and etag.strip('"') == f"{int(seconds):x}-{int(size or 0):x}")
    if etag and not timed:
        return True
    return seconds is None or time.time() - seconds >= FRESH_SECONDS  # unreadable: as the server states it


def _epoch(stamp) -> float | None:
    """A modification time as fsspec gives it (an HTTP date, an ISO time, a ``datetime``) in seconds, or ``None``."""
    try:
        if isinstance(stamp, str):
            try:
                stamp = email.utils.parsedate_to_datetime(stamp)
            except (TypeError, ValueError):
                stamp = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if isinstance(stamp, datetime.datetime):
            return (stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc)).timestamp()
    except (TypeError, ValueError, OverflowError):
        return None
    return None


__all__ = [
    "tells_apart",
    "chain",
    "status_of",
    "retry_after",
    "no_credentials",
    "bad_endpoint",
    "missing",
    "is_time_out",
    "describe",
]
