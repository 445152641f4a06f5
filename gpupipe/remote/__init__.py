"""Data that is not on this disk: URLs read through ``fsspec``, a node-wide cache with a size limit,
downloads checked and retried, and the stores that shard sources read their tars from."""

from .cache import Pin, ShardCache, default_cache_dir
from .fetch import RemoteError, RemoteMissing, Retry, download, read_small, remote_info
from .store import CachedStore, Hold, LocalStore
from .urls import expand_braces, filesystem, is_url, join

__all__ = [
    "ShardCache",
    "Pin",
    "default_cache_dir",
    "RemoteError",
    "RemoteMissing",
    "Retry",
    "download",
    "read_small",
    "remote_info",
    "CachedStore",
    "LocalStore",
    "Hold",
    "expand_braces",
    "filesystem",
    "is_url",
    "join",
]
