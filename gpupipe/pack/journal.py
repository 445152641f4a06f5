"""What makes packing safe to interrupt and impossible to run twice at once: the journal and the lock.

The journal records every finished shard (with its targets and sizes) and
every skipped input; a rerun on the same folder takes it up and continues
after the last finished shard, giving the same bytes as an uninterrupted
run. A lock file held for the whole run makes a second packer on the same
folder fail at once with a clear message instead of both writing.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import logging
import os
from pathlib import Path

from .. import fileio
from ..errors import Error
from ..fileio import sha256_hex
from ..shards import format as shardfmt

logger = logging.getLogger("gpupipe.pack")

LOCK = ".pack.lock"


#: The files a pack writes in its folder (``fnmatch`` patterns); any other file there is the user's.
PACK_FILES = (
    "shard-*.tar",
    "shard-*.idx",
    "shard-*.tmp",
    shardfmt.MANIFEST,
    "sources.tsv",
    ".pack-journal*.json",
    ".pack*.lock",
)


def delete_advice(dst: Path, named: str = "") -> str:
    """``"delete DST"`` (``"delete it"`` with ``named="it"``) where ``dst`` holds the pack's own files alone
    (``PACK_FILES``), else the advice to delete those, named (a pattern where several match), and keep the
    user's other files."""
    try:
        names = sorted(p.name for p in dst.iterdir())
    except OSError:
        names = []
    others = [n for n in names if not any(fnmatch.fnmatch(n, m) for m in PACK_FILES)]
    if not others:
        return f"delete {named or dst}"
    own = []
    for pattern in PACK_FILES[:-1]:  # not the lock: it is not the pack's data, and is taken again
        matched = [n for n in names if fnmatch.fnmatch(n, pattern)]
        own += matched if len(matched) == 1 else [pattern] if matched else []
    yours = f"{others[0]} and {len(others) - 1} more are yours" if len(others) > 1 else f"{others[0]} is yours"
    return f"delete the pack's own files from {dst} ({', '.join(own)}; {yours}, not the pack's)"


class PackError(Error, RuntimeError):
    """Packing stopped: a bad input with ``on_error="raise"``, a folder packed with other settings,
    another packer on the same folder, or a write that failed (disk full)."""


class NothingPacked(PackError):
    """Every input of a pack was bad: no shard was written (each input is listed in the manifest)."""


def stamp(path: str) -> dict:
    """``{"stat": [size, mtime_ns, ctime_ns]}`` of a skipped input's file (``None`` where it cannot be read), which a
    rerun compares: a file mended or finished since it was skipped is not left out silently."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return {"stat": None}
    return {"stat": [st.st_size, st.st_mtime_ns, st.st_ctime_ns]}


def _changed(then: list | None, now: list | None) -> bool:
    """Whether a skipped file differs from when it was skipped; one gone since (deleted as the manifest's list of
    bad files invites) is skipped by any run alike, so not."""
    return now is not None and now != then


def write_failed(what: str, err: OSError) -> PackError:
    """The error for a write into the output folder that failed (``what``: ``cannot write PATH``), saying what to
    do next where a disk or quota is full, or the folder is not writable: the journal lets the same command
    resume after the last finished shard."""
    advice = ""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = (
            "; free space on that disk and run the same command again: it goes on after the last finished shard "
            "(or pack into a folder on a disk with room)"
        )
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "; pack into a folder you can write, or make this one writable and run the same command again"
    return PackError(f"{what}: {err.strerror or err}{advice}")


class DstLock:
    """An exclusive lock on (one part of) the output folder for the time of a pack
    (``flock`` on ``DST/.pack.lock``, or ``DST/.pack-rNNNN.lock`` for part N > 0 under torchrun)."""

    def __init__(self, dst: Path, part: int = 0) -> None:
        self.path = dst / (LOCK if part == 0 else f".pack-r{part:04d}.lock")
        self._fd: int | None = None

    def __enter__(self) -> DstLock:
        fd = fileio.open_lock(self.path)
        if not fileio.try_lock(fd):
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise PackError(
                f"another pack is writing into {self.path.parent} (process {holder}); "
                "wait for it to finish, or pack into another folder"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fileio.unlock(self._fd)
            os.close(self._fd)
            self._fd = None


def fingerprint(settings: dict, inputs: list[str]) -> str:
    """A digest of the settings and the inputs (path and target of each, in write order)."""
    return sha256_hex(json.dumps(settings, sort_keys=True) + "".join(f"{line}\n" for line in inputs))


class Journal:
    """The finished shards and skipped inputs of one part of a pack, saved after every shard.

    Args:
        path: the journal file.
        fingerprint: what the part packs (a journal with another fingerprint is refused).
        start: the first input position of the part.
    """

    def __init__(self, path: Path, fingerprint: str, start: int = 0) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.shards: list[dict] = []
        self.skipped: list[dict] = []
        self.next_input = start

    def load(self) -> None:
        """Takes up an earlier run's journal, if it packed the same inputs with the same settings."""
        if not self.path.is_file():
            return
        try:
            saved = json.loads(self.path.read_text())
            known = saved["fingerprint"], saved["shards"], saved["skipped"]
            _check_shape(saved)
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
            raise PackError(f"{self.path} is unreadable ({err}); delete it to pack again from the start") from None
        if known[0] != self.fingerprint:
            raise PackError(
                f"{self.path.parent} was packed from other inputs or with other settings; "
                f"pack into a new folder (or {delete_advice(self.path.parent, 'it')} first)"
            )
        for shard in saved["shards"]:
            problem = _finished_problem(self.path.parent, shard)
            if problem:
                logger.warning("shard %s of the earlier run %s: packing from before it", shard["name"], problem)
                break
            self.shards.append(shard)
        if len(self.shards) == len(saved["shards"]) and isinstance(saved.get("next_input"), int):
            self.next_input = saved["next_input"]  # every shard is there: up to where the run got
        elif self.shards:
            self.next_input = self.shards[-1]["next_input"]
        self.skipped = [s for s in saved["skipped"] if s["position"] < self.next_input]
        changed = next((s for s in self.skipped if "stat" in s and _changed(s["stat"], stamp(s["path"])["stat"])), None)
        if changed:  # a file still being copied when it was read, a file mended since: the rerun would keep it out
            raise PackError(
                f"{changed['path']} was skipped by the earlier run ({changed['reason']}) and has changed since (a "
                f"file still being written then?): to pack it, {delete_advice(self.path.parent)} and run the command "
                "again (or pack into a new folder)"
            )

    def save(self) -> None:
        """Writes the journal whole (``write_whole``).

        Raises:
            PackError: the write failed (a full disk), naming the file.
        """
        state = {"fingerprint": self.fingerprint, "shards": self.shards, "skipped": self.skipped}
        write_whole(self.path, json.dumps({**state, "next_input": self.next_input}))


def _finished_problem(folder: Path, shard: dict) -> str:
    """Why a shard the journal lists as finished cannot be kept ('' when it can): its tar missing or of
    another size, its index missing or not the one written (its sha256), or tar headers at its first and
    last samples that do not name them. (The tar is not hashed: a resume does not read every finished
    shard whole; ``--verify`` does.)"""
    tar = folder / shard["name"]
    if not tar.is_file() or tar.stat().st_size != shard["bytes"]:
        return "is missing or changed"
    try:
        entries = shardfmt.read_shard_index(folder / shard["index"], shard)
        shardfmt.check_shard_members(tar, entries, shard["bytes"], folder)
    except (OSError, ValueError):
        return "has lost its index, or its index or tar changed"
    return ""


#: What each finished shard and each skipped input of a journal holds (as ``Journal.save`` writes them).
_SHARD_FIELDS = {"name": str, "index": str, "samples": int, "bytes": int, "next_input": int, "sizes": list}
_SKIPPED_FIELDS = {"position": int, "path": str, "reason": str}


def _check_shape(saved) -> None:
    """Checks a journal's fields as ``Journal.load`` and the manifest use them.

    Raises:
        ValueError: the first field missing or of the wrong type (a journal edited by hand, or cut short).
    """
    if not isinstance(saved["fingerprint"], str) or not isinstance(saved.get("next_input", 0), int):
        raise ValueError("its fingerprint or next_input is of the wrong type")
    for part, fields in (("shards", _SHARD_FIELDS), ("skipped", _SKIPPED_FIELDS)):
        if not isinstance(saved[part], list):
            raise ValueError(f"{part} is not a list")
        for k, entry in enumerate(saved[part]):
            if not isinstance(entry, dict):
                raise ValueError(f"{part}[{k}] is not an object")
            wrong = next((f for f, kind in fields.items() if not isinstance(entry.get(f), kind)), None)
            if wrong is not None:
                raise ValueError(f"{part}[{k}].{wrong} is missing or of the wrong type")


def write_whole(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through ``path.tmp``, renamed into place: ``path`` holds the old text or
    the new, never part of it, and a failed write leaves no temporary file.

    Raises:
        PackError: the write failed (a full disk, a folder removed), naming ``path``.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except BaseException:  # a failed write, or Ctrl-C / SIGTERM during it
            with contextlib.suppress(OSError):  # not a file (nothing of ours), or the folder is gone
                tmp.unlink(missing_ok=True)
            raise
    except OSError as err:
        raise write_failed(f"cannot write {path}", err) from None
