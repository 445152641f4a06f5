"""Reading untrusted files: regular files only, never more than a cap, never blocking.

A FIFO named ``x.jpg`` would block a plain ``open``; a link to
``/dev/zero`` would be read forever. Every read of a sample, an index or a
manifest goes through here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import stat

from .errors import Error

#: Default cap on one file's size (images, masks, annotation files): 1 GiB.
DEFAULT_MAX_FILE_SIZE = 1 << 30


class UnreadableFile(Error, ValueError):
    """A file that cannot be read as data; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def describe(err: OSError) -> str:
    """``"cannot read: No such file or directory"``."""
    return f"cannot read: {err.strerror or err}"


def regular_stat(path: str, max_size: int | None = DEFAULT_MAX_FILE_SIZE) -> os.stat_result:
    """``os.stat`` of a regular file no larger than ``max_size``.

    Raises:
        UnreadableFile: missing, not a regular file (FIFO, device, folder), or too large.
    """
    try:
        st = os.stat(path)
    except OSError as err:
        raise UnreadableFile(describe(err)) from None
    check_regular(st, max_size)
    return st


def check_regular(st: os.stat_result, max_size: int | None) -> None:
    """Refuses a stat result that is not a regular file of at most ``max_size`` bytes (``UnreadableFile``)."""
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile("not a regular file")
    if max_size is not None and st.st_size > max_size:
        raise UnreadableFile(f"file too large: {st.st_size:,} bytes exceeds the {max_size:,}-byte limit")


def read_file(path: str, max_size: int | None = DEFAULT_MAX_FILE_SIZE) -> bytes:
    """The whole content of a regular file of at most ``max_size`` bytes.

    The file is opened without blocking and checked on the open descriptor,
    so a FIFO or a device swapped in after a check is refused too.

    Raises:
        UnreadableFile: as ``regular_stat``, or an I/O error.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise UnreadableFile(describe(err)) from None
    try:
        st = os.fstat(fd)
        check_regular(st, max_size)
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as err:
        raise UnreadableFile(describe(err)) from None
    finally:
        os.close(fd)


def read_range(fd: int, offset: int, size: int, what: str) -> bytes:
    """Exactly ``size`` bytes at ``offset`` of an open file.

    Raises:
        UnreadableFile: the file ends before (``what`` names the data in the message).
    """
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise UnreadableFile(f"{what} is cut short: {len(data)} of {size} bytes at offset {offset}")
    return data


def byte_size(value, what: str, minimum: int = 1) -> int:
    """A size in bytes from an int or a text such as ``"256MB"``, ``"1.5G"``, ``"4096"`` (K, M, G, T are
    powers of 1024).

    Raises:
        ValueError: naming ``what`` and the value.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and value.strip():
        units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        text = value.strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in units else ""
        try:
            size = int(float(text[: len(text) - len(unit)]) * units[unit])
        except (ValueError, OverflowError):  # not a number, or nan / inf
            raise ValueError(f"{what} must look like 256MB, 1G or 4096, got {value!r}") from None
    else:
        raise ValueError(f"{what} must look like 256MB, 1G or 4096, got {value!r}")
    if size < minimum:
        raise ValueError(f"{what} must be at least {minimum:,} bytes, got {value!r}")
    return size


def read_json_object(path) -> dict | None:
    """The JSON object in the file ``path`` (a cache's own record), or ``None`` when it is missing,
    unreadable or not a JSON object."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sha256_hex(data: str | bytes, length: int | None = None) -> str:
    """The one digest of gpupipe's keys and checksums: sha256 of ``data`` as hex (text encoded as
    UTF-8, undecodable file names kept as written), cut to its first ``length`` digits."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:length]


def sha256_of(path) -> str:
    """The sha256 of a file (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# File locks: the one lock of gpupipe.

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def open_lock(path) -> int:
    """A descriptor of ``path`` (created if needed, never truncated), for ``lock`` / ``try_lock``.

    File locks (``flock``) are shared by every process that sees the file, whatever its PID namespace
    (the remote cache's per-file locks and partial downloads, the packer's lock on its output folder).
    A lock belongs to an open descriptor and goes with it: closing the descriptor (or the process
    dying) releases it, so a lock never outlives its owner and never needs a process id."""
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


def close_lock(fd: int) -> None:
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


def shell_word(path: str | os.PathLike) -> str:
    """``path`` as one word of a shell command a user can paste (the next command a tool prints): quoted where it
    holds spaces or other shell characters, ``./`` before a relative path that starts with a dash (a flag, else)."""
    path = os.fspath(path)
    return shlex.quote(f"./{path}" if path.startswith("-") else path)
