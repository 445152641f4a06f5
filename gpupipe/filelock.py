"""File locks (``flock``) shared by every process that sees the file, whatever its PID namespace:
the remote cache's per-file locks and partial downloads, and the packer's lock on its output folder.

A lock belongs to an open descriptor and goes with it: closing the
descriptor (or the process dying) releases it, so a lock never outlives
its owner and never needs a process id to be checked.
"""

from __future__ import annotations

import fcntl
import os

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def open_lock(path) -> int:
    """A descriptor of ``path`` (created if needed, never truncated), for ``lock`` / ``try_lock``."""
    return os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)


def lock(fd: int, *, shared: bool = False) -> None:
    """Takes the lock of ``fd`` (shared or exclusive), waiting while another descriptor holds it."""
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)


def try_lock(fd: int, *, shared: bool = False) -> bool:
    """Takes the lock of ``fd`` without waiting; ``False`` when another descriptor holds it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    """Releases the lock of ``fd`` (the descriptor stays open)."""
    fcntl.flock(fd, fcntl.LOCK_UN)


def close(fd: int) -> None:
    """Closes ``fd`` (releasing its lock), ignoring a descriptor already closed."""
    try:
        os.close(fd)
    except OSError:
        pass


def is_held(path) -> bool:
    """Whether some descriptor (of any process on this machine) holds a lock on the file ``path``;
    ``False`` for a missing file."""
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        return not try_lock(fd, shared=False)
    finally:
        os.close(fd)


__all__ = ["open_lock", "lock", "try_lock", "unlock", "close", "is_held"]
