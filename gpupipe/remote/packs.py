"""A gpupipe pack behind a URL: its manifest and indexes read (and checked) through the cache."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..shards import format as shardfmt
from .cache import ShardCache
from .fetch import RemoteMissing, is_html_page, read_small
from .urls import join, redact

logger = logging.getLogger("gpupipe.remote")
#: Index files fetched at once when a remote pack is opened.
INDEX_THREADS = 16
#: An index may hold at most this many bytes per sample the manifest gives its shard (its download's
#: cap: an index line is a few names and numbers).
INDEX_BYTES_PER_SAMPLE = 4096


@dataclass(frozen=True)
class PackedTar:
    """One tar of a pack: where it is, its size and checksum (from the manifest), and its index."""

    location: str
    size: int
    sha256: str | None
    entries: list[shardfmt.IndexEntry]


def remote_pack(url: str, cache: ShardCache) -> tuple[dict, list[PackedTar]]:
    """The manifest of the pack at ``url`` and its tars, each index downloaded once (checked against
    the manifest's ``index_sha256``) into ``cache``. The manifest is read with a cap of
    ``MAX_METADATA_BYTES``, each index with one of
    ``INDEX_BYTES_PER_SAMPLE`` per sample; messages name ``url`` with its credentials redacted.

    Raises:
        ValueError: no manifest there, a malformed one, a name leaving ``url``, or an index that
            does not match the manifest.
        RemoteError: the server cannot be reached after the retries.
    """
    manifest = _manifest(url, cache)
    shards = manifest["shards"]
    locations = [
        (_join(url, s["name"], f"shards[{k}].name"), _join(url, s["index"], f"shards[{k}].index"))
        for k, s in enumerate(shards)
    ]

    def index(k: int) -> list[shardfmt.IndexEntry]:
        index_url = locations[k][1]
        cap = min(shardfmt.MAX_METADATA_BYTES, INDEX_BYTES_PER_SAMPLE * (shards[k]["samples"] + 1))
        pin = cache.get(index_url, sha256=shards[k].get("index_sha256") or None, max_bytes=cap)
        try:
            return shardfmt.read_shard_index(pin.path, shards[k], redact(index_url))
        finally:
            pin.release()

    with ThreadPoolExecutor(INDEX_THREADS, thread_name_prefix="gpupipe-index") as pool:
        indexes = list(pool.map(index, range(len(shards))))
    tars = [
        PackedTar(tar, s["bytes"], s.get("sha256") or None, entries)
        for (tar, _), s, entries in zip(locations, shards, indexes)
    ]
    return manifest, tars


def _manifest(url: str, cache: ShardCache) -> dict:
    """The pack's manifest, read and checked; one that does not parse is read once more (with retries left): a
    body cut with its connection, where the server states no Content-Length, looks whole."""
    where = join(url, shardfmt.MANIFEST)
    data = _read_manifest(url, where, cache)
    try:
        return shardfmt.parse_manifest(data, redact(where))
    except ValueError as err:
        if cache.retry.attempts == 1:
            raise
        logger.warning("%s; reading it again (cut short in transfer?)", err)
    return shardfmt.parse_manifest(_read_manifest(url, where, cache), redact(where))


def _read_manifest(url: str, where: str, cache: ShardCache) -> bytes:
    try:
        data = read_small(where, cache.retry, cache.storage_options, shardfmt.MAX_METADATA_BYTES)
    except RemoteMissing as err:  # its words name a missing bucket as such
        raise ValueError(
            f"{redact(url)} is not a gpupipe pack: no {shardfmt.MANIFEST} there ({err}); for tars written by "
            "another tool, use gpupipe.WebDataset; a folder of image files is read from a local disk only: pack it "
            "once (python -m gpupipe.pack <local folder> <url>) or copy it to this machine"
        ) from None
    if is_html_page(data[:512]):
        raise ValueError(f"{redact(where)} is an HTML page, not a manifest (a server's error or sign-in page?)")
    return data


def _join(url: str, name, field: str) -> str:
    try:
        return join(url, name)
    except ValueError:
        raise ValueError(f"{redact(join(url, shardfmt.MANIFEST))}: {field} {name!r} leaves the pack") from None


__all__ = ["remote_pack", "PackedTar"]
