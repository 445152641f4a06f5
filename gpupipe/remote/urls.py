"""URLs of remote data: recognising them, joining names safely, brace patterns, and the file system
(``fsspec``) that reads each scheme, with time-outs so that a silent server cannot hang a reader."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

#: Schemes read through fsspec, and the extra that installs their file system.
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_BRACES = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
#: Most names one brace pattern may expand to (a typo such as {0..99999999} fails fast).
MAX_EXPANSION = 1_000_000


def is_url(value: Any) -> bool:
    """Whether ``value`` is a URL read through fsspec (``s3://``, ``gs://``, ``https://``, ...; not ``file://``)."""
    match = _URL.match(value) if isinstance(value, str) else None
    return match is not None and match.group(1).lower() != "file"


def scheme(url: str) -> str:
    match = _URL.match(url)
    assert match is not None, url  # callers pass URLs (is_url)
    return match.group(1).lower()


def join(base: str, name: str) -> str:
    """``base/name`` for a name read from a manifest, refusing names that would leave ``base``.

    Raises:
        ValueError: the name is empty, absolute, a URL, or contains ``..``, ``\\`` or a query.
    """
    if (
        not isinstance(name, str)
        or not name
        or name.startswith("/")
        or is_url(name)
        or "\\" in name
        or any(part in ("..", ".") for part in name.split("/"))
        or "?" in name
        or "#" in name
        or "\0" in name
    ):
        raise ValueError(f"{base}: the name {name!r} does not stay inside it")
    return base.rstrip("/") + "/" + name


def expand_braces(pattern: str) -> List[str]:
    """Expands ``{000..099}`` ranges (zero-padded to the wider bound) and ``{a,b}`` lists, as WebDataset does.

    Raises:
        ValueError: a range or list that is empty, or an expansion over :data:`MAX_EXPANSION` names.
    """
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    body = match.group(1)
    span = _RANGE.match(body)
    if span:
        lo, hi = int(span.group(1)), int(span.group(2))
        if hi < lo:
            raise ValueError(f"brace range {{{body}}} in {pattern!r} runs backwards")
        if hi - lo + 1 > MAX_EXPANSION:
            raise ValueError(f"brace range {{{body}}} in {pattern!r} names more than {MAX_EXPANSION:,} files")
        width = max(len(span.group(1)), len(span.group(2))) if span.group(1).startswith("0") else 0
        choices = [str(v).zfill(width) for v in range(lo, hi + 1)]
    else:
        choices = body.split(",")
        if not body:
            raise ValueError(f"empty braces in {pattern!r}")
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out: List[str] = []
    for choice in choices:
        out.extend(expand_braces(head + choice + tail))
        if len(out) > MAX_EXPANSION:
            raise ValueError(f"{pattern!r} names more than {MAX_EXPANSION:,} files")
    return out


def filesystem(url: str, storage_options: Optional[Dict] = None, timeout: float = 60.0) -> Tuple[Any, str]:
    """``(fsspec file system, path)`` for ``url``; ``storage_options`` go to the file system
    (credentials, ``endpoint_url``, ...) over gpupipe's defaults: connect and read time-outs of
    ``timeout`` seconds and no retries of its own (gpupipe retries whole downloads).

    Raises:
        ImportError: naming the extra to install for the URL's scheme.
    """
    try:
        import fsspec

        options = dict(_defaults(scheme(url), timeout))
        options.update(storage_options or {})
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as err:
        extra = EXTRAS.get(scheme(url))
        hint = f"pip install 'gpupipe[{extra}]'" if extra else str(err)
        raise ImportError(f"reading {url} needs the file system for '{scheme(url)}://': {hint}") from None


def _defaults(kind: str, timeout: float) -> Dict:
    if kind in ("http", "https"):
        import aiohttp

        return {
            "client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)}
        }
    if kind in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout, "retries": {"max_attempts": 1}}}
    if kind in ("gs", "gcs"):
        import aiohttp

        return {
            "session_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)}
        }
    return {}


__all__ = ["is_url", "join", "expand_braces", "filesystem", "scheme", "EXTRAS"]
