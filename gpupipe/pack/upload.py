"""Packing to a URL (``s3://``, ``gs://``): shards are written into a local staging folder, each
rank uploads its own, and rank 0 uploads ``sources.tsv`` and the manifest last, so that a reader
never sees a manifest naming a shard that is not there yet. A rerun skips what is uploaded."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ..remote import RemoteError, Retry, download, filesystem, join, read_small
from ..remote.fetch import with_retries
from ..remote.packs import INDEX_BYTES_PER_SAMPLE
from ..remote.urls import redact
from ..shards import format as shardfmt
from .check import verify
from .manifest import SOURCES

logger = logging.getLogger("gpupipe.pack")


def upload(staging: Path, dst: str, names: Sequence[str], retry: Retry, storage_options: dict | None = None) -> int:
    """Uploads ``staging/<name>`` to ``dst/<name>`` for each name, skipping files already there with
    the same size; returns the bytes sent.

    Raises:
        RemoteError: an upload failed after its retries, or the stored size differs.
    """
    fs, base = filesystem(dst, storage_options, retry.timeout)
    sent = 0
    for name in names:
        local, url = Path(staging) / name, join(dst, name)
        size = local.stat().st_size
        path = f"{base.rstrip('/')}/{name}"
        if _remote_size(fs, path) == size and name != shardfmt.MANIFEST:
            continue
        with_retries(url, retry, "uploading to", _put(fs, str(local), path))
        stored = _remote_size(fs, path)
        if stored != size:
            raise RemoteError(f"uploading to {url}: the server holds {stored} bytes, expected {size}")
        sent += size
        logger.info("uploaded %s (%d bytes)", url, size)
    return sent


def upload_manifest(staging: Path, dst: str, retry: Retry, storage_options: dict | None = None) -> None:
    """Uploads ``sources.tsv``, then the manifest (last: it makes the pack readable)."""
    upload(staging, dst, [SOURCES, shardfmt.MANIFEST], retry, storage_options)


def _put(fs, src: str, dst: str) -> Callable[[float], object]:
    """The upload as ``with_retries`` calls it: given the seconds left (a put has no deadline of its own)."""

    def put(seconds_left: float) -> object:
        return fs.put_file(src, dst)

    return put


def _remote_size(fs, path: str) -> int | None:
    try:
        return int(fs.info(path)["size"])
    except FileNotFoundError:
        return None


def verify_remote(url: str, retry: Retry, storage_options: dict | None = None) -> list[str]:
    """[`verify`][gpupipe.pack.verify] for a pack behind a URL: its manifest, tars and indexes are
    downloaded into a temporary folder and checked there."""
    folder = Path(tempfile.mkdtemp(prefix="gpupipe-verify-"))
    try:
        try:
            data = read_small(join(url, shardfmt.MANIFEST), retry, storage_options, shardfmt.MAX_METADATA_BYTES)
            (folder / shardfmt.MANIFEST).write_bytes(data)
            manifest = shardfmt.parse_manifest(data, redact(join(url, shardfmt.MANIFEST)))
        except (RemoteError, ValueError) as err:
            return [str(err)]
        for shard in manifest["shards"]:
            index_cap = min(shardfmt.MAX_METADATA_BYTES, INDEX_BYTES_PER_SAMPLE * (shard["samples"] + 1))
            for name, cap in ((shard["name"], shard["bytes"]), (shard["index"], index_cap)):  # never more read
                try:
                    source = join(url, name)  # refuses a name that leaves the pack, before anything is made
                    (folder / name).parent.mkdir(parents=True, exist_ok=True)  # a shard kept in a subfolder
                    download(source, str(folder / name), retry, storage_options=storage_options, max_bytes=cap)
                except (RemoteError, ValueError) as err:
                    return [str(err)]
                except OSError as err:  # a name under another shard's name ('a.tar/b.tar')
                    return [f"{redact(source)}: cannot be checked here ({err.strerror or err})"]
        return [p.replace(str(folder), redact(url)) for p in verify(folder)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["upload", "upload_manifest", "verify_remote"]
