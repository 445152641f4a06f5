"""URLs of remote data: recognising them, joining names safely, brace patterns, and the file system
(``fsspec``) that reads each scheme, with time-outs so that a silent server cannot hang a reader."""

from __future__ import annotations

import logging
import posixpath
import re
import unicodedata
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

#: Schemes read through fsspec, and the extra that installs their file system.
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_LETTERS = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
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


#: How many times a name is percent-decoded when checked (``%252e`` is ``%2e`` once decoded).
_DECODE_ROUNDS = 4
#: ``scheme://user:password@``: up to the authority's last ``@`` (a password may hold one, as ``urlsplit`` reads it).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")
#: Query (or fragment: OAuth's ``#access_token=``) parameters whose values are secrets (AWS and GCS signed URLs,
#: Azure SAS, API keys, tokens).
_SECRET_PARAM = re.compile(
    r"(?i)([?&;#][^=&#\s]*(?:sig|signature|token|key|secret|password|passwd|credential|auth|session)[^=&#\s]*=)"
    r"[^&#\s'\"]*"
)


#: Request headers that carry a credential, as a client's debug line shows them (botocore's ``'Authorization':
#: b'AWS4-HMAC-SHA256 Credential=..., Signature=...'``, an ``Authorization: Bearer ...``).
_SECRET_HEADER = re.compile(
    r"(?i)((?:proxy-)?authorization|x-amz-security-token|x-goog-api-key|cookie)(['\"]?\s*:\s*(?:b['\"]|['\"])?)[^'\"\n]+"
)

#: A request's signature as botocore's signer logs it (``Signature:\n<hex>``).
_SIGNATURE = re.compile(r"(?i)(\bsignature:\s*)[0-9a-f]{16,}")


def redact(text) -> str:
    """``text`` (a URL, or a message naming URLs) with every credential replaced by ``***``: the
    ``user:password@`` part of a URL and the values of query parameters that hold a secret
    (``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Goog-Signature``, ``sig``, ``token``, ``key``, ...), and of
    headers that carry one (``Authorization``, ``X-Amz-Security-Token``, ``Cookie``) as debug lines show them.
    Every message and log line that names a URL goes through here."""
    text = _SIGNATURE.sub(r"\1***", _SECRET_HEADER.sub(r"\1\2***", str(text)))
    return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


#: Query parameters that sign a URL (AWS SigV4 and V2, GCS V4, CloudFront's ``Policy`` and ``Key-Pair-Id``, an
#: Azure SAS's ``sig``): they authorise a request and change with each signing, but never select another object.
_SIGNING = re.compile(
    r"(?i)^(?:x-amz-.*|x-goog-.*|signature|expires|awsaccesskeyid|googleaccessid|sig|policy|key-pair-id)$"
)


def cache_key(url: str) -> str:
    """``url`` as a cache names what it holds: without its credentials (``user:password@``) or the
    parameters that sign it (``X-Amz-Signature``, ``X-Amz-Date``, ``X-Goog-*``, CloudFront's ``Policy``, ...), so
    that a URL signed again reads the same cached copy and no secret decides a file name; every other parameter
    (``versionId``, ``generation``, ...) is kept, in order: it selects the object."""
    parts = urlsplit(url)
    kept = [p for p in parts.query.split("&") if p and not _SIGNING.match(unquote(p.split("=", 1)[0]))]
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "&".join(kept), parts.fragment))


def safe_name(name) -> str:
    """A name read from a manifest (a shard or an index), checked to stay inside the folder or URL
    prefix it is joined to, after any percent-decoding: one rule for local paths and URLs alike.

    Raises:
        ValueError: the name is empty or not a string, or (as written or decoded) absolute, a URL,
            or holds ``..``, ``.``, an empty part, ``\\``, ``:``, ``?``, ``#``, ``%`` once fully
            decoded, or a control character; also once compatibility characters are folded (NFKC:
            ``\uff0e\uff0e`` or ``\u2025`` is ``..``, ``\uff0f`` is ``/``), as some servers fold them.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"the name {name!r} is not a file name")
    forms = [name]
    for _ in range(_DECODE_ROUNDS):
        try:
            decoded = unquote(forms[-1], errors="strict") if "%" in forms[-1] else forms[-1]
        except UnicodeDecodeError:
            raise ValueError(f"the name {name!r} decodes to no text") from None
        if decoded == forms[-1]:
            break
        forms.append(decoded)
    # what a server that folds compatibility characters reads: fullwidth or leader dots ("\uff0e\uff0e", "\u2025")
    # as "..", a fullwidth solidus as "/"
    forms += [folded for form in forms if (folded := unicodedata.normalize("NFKC", form)) != form]
    for form in forms:
        parts = form.split("/")
        if (
            form.startswith(("/", "~"))
            or is_url(form)
            or any(c in form for c in "\\:?#")
            or any(ord(c) < 32 or ord(c) == 127 for c in form)
            or any(part in ("", ".", "..") for part in parts)
        ):
            raise ValueError(f"the name {name!r} does not stay inside it")
    if "%" in forms[-1]:
        raise ValueError(f"the name {name!r} is percent-encoded more than {_DECODE_ROUNDS} times")
    return name


def join(base: str, name: str) -> str:
    """``base/name`` for a name read from a manifest, refusing names that would leave ``base``
    (``safe_name``), and checking the joined URL: same scheme and host as ``base``, and a path
    under ``base``'s path once decoded and normalised.

    Raises:
        ValueError: naming ``base`` (credentials redacted) and the name; or ``base`` has a query
            string or a fragment (a signed URL names one file, never a folder).
    """
    try:
        safe_name(name)
    except ValueError:
        raise ValueError(f"{redact(base)}: the name {name!r} does not stay inside it") from None
    parts = urlsplit(base) if is_url(base) else None
    if parts is not None and (parts.query or parts.fragment):
        raise ValueError(
            f"{redact(base)}: a URL with a query string or a fragment ('?...', '#...') cannot name a "
            "folder: file names are added to its path, so a signed URL's token would reach no file; "
            "give the folder's plain URL and the credentials in storage_options"
        )
    joined = base.rstrip("/") + "/" + name
    if not inside(base, joined):
        raise ValueError(f"{redact(base)}: the name {name!r} does not stay inside it")
    return joined


def inside(base: str, url: str) -> bool:
    """Whether ``url`` resolves under ``base`` (scheme, host and decoded, normalised path)."""
    if not is_url(base):
        root = posixpath.normpath(base)
        return posixpath.normpath(url).startswith(root.rstrip("/") + "/")
    a, b = urlsplit(base), urlsplit(url)
    if (a.scheme.lower(), a.netloc.lower()) != (b.scheme.lower(), b.netloc.lower()) or b.query or b.fragment:
        return False
    root = posixpath.normpath("/" + unquote(a.path)).rstrip("/") + "/"
    return posixpath.normpath("/" + unquote(b.path)).startswith(root)


def within_pattern(pattern: str, name: str) -> None:
    """Refuses an expansion of a brace pattern that leaves the folder written before the pattern's first brace
    (``{a,..}``, ``{a,%2e%2e}``: a choice that climbs out of it once decoded and normalised).

    Raises:
        ValueError: naming the pattern and the expansion (credentials redacted).
    """
    head = pattern[: pattern.find("{")]
    folder = head.rsplit("/", 1)[0] if "/" in head else "."
    if "{" not in pattern or is_url(name) != is_url(folder):  # braces in the scheme or host: nothing to leave
        return
    if is_url(name):
        leaves = not inside(folder, name.split("?", 1)[0].split("#", 1)[0])
    else:
        rel = posixpath.relpath(posixpath.normpath(name), posixpath.normpath(folder))
        leaves = rel == ".." or rel.startswith("../")
    if leaves:
        raise ValueError(
            f"{redact(name)!r}, an expansion of the pattern {redact(pattern)!r}, leaves the folder "
            f"{redact(folder)!r} written before the pattern's first brace"
        )


def expand_braces(pattern: str) -> list[str]:
    """Expands brace patterns as ``braceexpand`` (what WebDataset uses) does: ``{a,b}`` lists (nested
    too), ``{000..099}`` ranges, zero-padded to the wider bound when a bound has a leading zero
    (``{0..10}`` is not padded), with an optional step (``{0..10..2}``), and ``{a..e}`` letters;
    braces holding neither a list nor a range stay as written.

    Raises:
        ValueError: unbalanced braces, a range that runs backwards, or an expansion over
            ``MAX_EXPANSION`` names.
    """
    depth = 0
    for c in pattern:
        depth += (c == "{") - (c == "}")
        if depth < 0:
            break
    if depth:
        raise ValueError(f"unbalanced braces in {redact(pattern)!r}")
    return _expand(pattern, redact(pattern))


def _expand(text: str, pattern: str) -> list[str]:
    """``text`` (balanced) expanded at its brace groups, outermost first; a group holding neither a
    list nor a range keeps its braces (what it holds is expanded)."""
    open_at = text.find("{")
    if open_at < 0:
        return [text]
    close_at = _closing(text, open_at)
    body = text[open_at + 1 : close_at]
    choices = _choices(body, pattern)
    if choices is None:
        middles = ["{" + inner + "}" for inner in _expand(body, pattern)]
    else:
        middles = [middle for choice in choices for middle in _expand(choice, pattern)]
    head, tails = text[:open_at], _expand(text[close_at + 1 :], pattern)
    if len(middles) * len(tails) > MAX_EXPANSION:
        raise ValueError(f"{pattern!r} names more than {MAX_EXPANSION:,} files")
    return [head + middle + tail for middle in middles for tail in tails]


def _closing(text: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(text)):
        depth += (text[k] == "{") - (text[k] == "}")
        if depth == 0:
            return k
    raise AssertionError(text)  # balanced: checked by expand_braces


def _choices(body: str, pattern: str) -> list[str] | None:
    """What one brace group stands for: a range's values, or a list's items (unexpanded); ``None``
    when it is neither (kept as written)."""
    span = _RANGE.match(body) or _LETTERS.match(body)
    if span:
        first, last, step = span.group(1), span.group(2), int(span.group(3) or 1) or 1
        if first.isalpha():
            lo, hi = ord(first), ord(last)
        else:
            lo, hi = int(first), int(last)
        if hi < lo:
            raise ValueError(f"brace range {{{body}}} in {pattern!r} runs backwards")
        if (hi - lo) // step + 1 > MAX_EXPANSION:
            raise ValueError(f"brace range {{{body}}} in {pattern!r} names more than {MAX_EXPANSION:,} files")
        if first.isalpha():
            return [chr(v) for v in range(lo, hi + 1, step)]
        padded = any(b.startswith(("0", "-0")) and b not in ("0", "-0") for b in (first, last))
        width = max(len(first), len(last)) if padded else 0
        return [f"{v:0{width}d}" for v in range(lo, hi + 1, step)]
    items, depth, start = [], 0, 0
    for k, c in enumerate(body):
        depth += (c == "{") - (c == "}")
        if c == "," and depth == 0:
            items.append(body[start:k])
            start = k + 1
    return items + [body[start:]] if items else None


#: The loggers of the file systems gpupipe reads through: they log whole URLs (at DEBUG).
CLIENT_LOGGERS = (
    "fsspec",
    "fsspec.http",
    "fsspec.asyn",
    "s3fs",
    "gcsfs",
    "gcsfs.core",
    "botocore.endpoint",
    "botocore.auth",
)


class Redacting(logging.Filter):
    """Passes every record on with its message ``redact``-ed (fsspec's HTTP file system logs each URL whole,
    signature and password included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message != (clean := redact(message)):
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:  # what a handler's formatter would print, redacted
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def _redact_client_logs() -> None:
    """Adds the ``Redacting`` filter to each of ``CLIENT_LOGGERS`` (once)."""
    for name in CLIENT_LOGGERS:
        client = logging.getLogger(name)
        if not any(isinstance(f, Redacting) for f in client.filters):
            client.addFilter(Redacting())


def filesystem(url: str, storage_options: dict | None = None, timeout: float = 60.0) -> tuple[Any, str]:
    """``(fsspec file system, path)`` for ``url``; ``storage_options`` go to the file system
    (credentials, ``endpoint_url``, ...) over gpupipe's defaults: connect and read time-outs of
    ``timeout`` seconds and no retries of its own (gpupipe retries whole downloads).

    Raises:
        ImportError: naming the extra to install for the URL's scheme.
    """
    _redact_client_logs()
    try:
        import fsspec

        options = dict(_defaults(scheme(url), timeout))
        options.update(storage_options or {})
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as err:
        extra = EXTRAS.get(scheme(url))
        hint = f"pip install 'gpupipe[{extra}]'" if extra else str(err)
        raise ImportError(f"reading {url} needs the file system for '{scheme(url)}://': {hint}") from None


def _defaults(kind: str, timeout: float) -> dict:
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


__all__ = [
    "is_url",
    "inside",
    "within_pattern",
    "join",
    "safe_name",
    "redact",
    "cache_key",
    "expand_braces",
    "filesystem",
    "scheme",
    "EXTRAS",
]
