"""Finding bad files before they reach a decoder, and every image's size: a fast header scan.

DALI cannot skip a sample inside a batch (one bad file invalidates the
pipeline), and torchvision's PNG decoder crashes the process on some
corrupt files, so the loader checks every file once when it is built:
missing files, files that are not regular (FIFOs, devices), empty or
oversized files, files that are not images, truncated JPEGs and PNGs (no
end marker) and images with more pixels than allowed (decompression bombs)
are found from the first and last bytes, without decoding. The same pass
records every image's size (EXIF orientation applied) and whether its
orientation turned it, which the planner needs to draw crop windows on the
image as its source reads it (``Source.decode_as``: upright, or as stored).

Results are cached per folder, keyed by each file's size and modification
time, so a later scan only stats the files. A cold scan uses every core;
among the ranks that share a loader (``gpupipe.loading.agreement``: the process
group, when the loader's share is the group's own) each rank scans its share
and the results are exchanged, with each rank's listing, which must be the
same on every rank; a loader of one process (``world_size=1``) scans alone.

Files that pass the scan but still fail to decode (corrupt data inside)
are caught while loading (see the backends).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import env
from ..fileio import UnreadableFile, check_regular, describe, sha256_hex
from ..images import Header, ImageRefused, header_at, loader_refusal
from ..loading import agreement
from ..progress import Progress

logger = logging.getLogger("gpupipe.scan")

#: 9: APNGs whose default image is no frame, and TIFFs, BMPs and PNMs DALI reads unlike PIL, refused;
#: 8: each image's ``traits`` (turned by its EXIF orientation, a 16-bit grey PNG); 7: 12-bit, hierarchical and
#: lossless JPEGs refused; 6: formats DALI does not decode refused; 5: a JPEG with data after its image is whole; ...
CACHE_VERSION = 9
#: How far from the end an end-of-image marker may sit (some writers pad files).
_TAIL_BYTES = 4096
#: Below this many files to check (or to stat), a scan stays in this process.
_PARALLEL_FROM = 2048
_PARALLEL_STAT_FROM = 200_000
#: ``ScanResult.traits`` bits: turned by its EXIF orientation (5 to 8); a 16-bit grey PNG.
TURNED, GREY16 = 1, 2


@dataclass(frozen=True)
class ScanResult:
    """The outcome of a scan.

    Attributes:
        bad: ``{index: reason}`` of the files that cannot be used.
        sizes: ``(N, 2)`` int64 ``(h, w)`` of each image, EXIF orientation applied (``-1`` for bad files).
        traits: ``(N,)`` uint8 bits per image: ``TURNED`` (its EXIF orientation, 5 to 8, swaps its height and
            width), ``GREY16`` (a 16-bit grey PNG); ``None``: not recorded (packed and annotated sources).
    """

    bad: dict[int, str]
    sizes: np.ndarray
    traits: np.ndarray | None = None

    def has(self, trait: int) -> np.ndarray:
        """``(N,)`` bool: the images with ``trait`` (``TURNED``, ``GREY16``)."""
        return np.zeros(len(self.sizes), bool) if self.traits is None else (self.traits & trait) != 0

    def subset(self, keep: np.ndarray, bad: dict[int, str]) -> ScanResult:
        """The result of the files at ``keep`` (an index array), with their ``bad`` renumbered."""
        return ScanResult(bad, self.sizes[keep], None if self.traits is None else self.traits[keep])

    def as_read(self, decode_as: str) -> ScanResult:
        """The sizes as the decoders give them: ``"upright"`` (as scanned) or ``"stored"`` (EXIF orientation not
        applied: height and width swapped back where ``TURNED``)."""
        turned = self.has(TURNED)
        if decode_as == "upright" or not turned.any():
            return self
        return ScanResult(self.bad, np.where(turned[:, None], self.sizes[:, ::-1], self.sizes), self.traits)


def check_file(path: str, *, max_pixels: int, max_file_size: int) -> tuple[str | None, int, int]:
    """Checks one file from its header and tail (a few ``pread`` calls; FIFOs and devices are not read).

    Returns:
        ``(reason, h, w)``: why it cannot be used (``None`` when it looks
        sound) and its oriented size (``-1`` when unknown).
    """
    return check_traits(path, max_pixels=max_pixels, max_file_size=max_file_size)[:3]


def check_traits(path: str, *, max_pixels: int, max_file_size: int) -> tuple[str | None, int, int, int]:
    """``check_file``'s ``(reason, h, w)`` and the image's ``ScanResult.traits`` bits."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        return describe(err), -1, -1, 0
    try:
        st = os.fstat(fd)
        check_regular(st, max_file_size)
        if st.st_size == 0:
            return "empty file (0 bytes)", -1, -1, 0
        header = header_at(
            lambda offset, n: os.pread(fd, n, offset), lambda: os.fdopen(os.dup(fd), "rb"), max_pixels, st.st_size
        )
        refusal = loader_refusal(header, os.path.splitext(path)[1])
        if refusal:
            return refusal, -1, -1, 0
        tail = os.pread(fd, _TAIL_BYTES, max(0, st.st_size - _TAIL_BYTES))
        truncated = truncation(header.kind, tail)
        grey16 = header.kind == "PNG" and os.pread(fd, 2, 24) == b"\x10\x00"  # IHDR: bit depth 16, colour type 0
        if (
            truncated
            and header.kind == "JPEG"
            and ends_before_trailer(lambda o, n: os.pread(fd, n, o), header, st.st_size)
        ):
            truncated = None  # data after the image (a phone's motion photo: a video appended)
    except (UnreadableFile, ImageRefused) as refused:
        return refused.reason, -1, -1, 0
    except OSError as err:
        return describe(err), -1, -1, 0
    finally:
        os.close(fd)
    if truncated:
        return truncated, -1, -1, 0
    h, w = header.oriented
    return None, h, w, (TURNED if header.orientation in (5, 6, 7, 8) else 0) | (GREY16 if grey16 else 0)


#: Bytes read at a time when a JPEG's end-of-image marker is looked for before data appended to it.
_SEARCH_BYTES = 1 << 20


def ends_before_trailer(read_at: Callable[[int, int], bytes], header: Header, size: int) -> bool:
    """Whether a JPEG whose last bytes hold no end-of-image marker has one after its scan starts: its image
    is whole and other data follows it (a phone's motion photo appends a video; the decoders stop at the
    marker). Read from ``header.scan_at`` on, ``_SEARCH_BYTES`` at a time: only for such files."""
    if header.scan_at < 0:
        return False
    at = header.scan_at
    while at < size:
        chunk = read_at(at, _SEARCH_BYTES + 1)  # one byte more: a marker across two reads
        if b"\xff\xd9" in chunk:
            return True
        if len(chunk) <= 1:
            return False
        at += len(chunk) - 1
    return False


def truncation(kind: str | None, tail: bytes) -> str | None:
    """Why a file of format ``kind`` (``"JPEG"``, ``"PNG"``) whose last ``_TAIL_BYTES`` bytes are ``tail``
    is cut short, or ``None``: the scan's reason, given by the packer too."""
    if kind == "JPEG" and b"\xff\xd9" not in tail[-_TAIL_BYTES:]:
        return "truncated JPEG (no end-of-image marker)"
    if kind == "PNG" and b"IEND" not in tail[-_TAIL_BYTES:]:
        return "truncated PNG (no IEND chunk)"
    return None


#: The paths of the scan under way, inherited by forked workers (cheaper than sending them).
_PATHS: list[str] = []


def _stat_part(bounds: tuple[int, int]) -> np.ndarray:
    """``(n, 2)`` int64 ``(size, mtime_ns)`` of ``_PATHS[start:end]``, ``(-1, -1)`` where stat fails."""
    start, end = bounds
    keys = np.full((end - start, 2), -1, np.int64)
    stat = os.stat
    for k, path in enumerate(_PATHS[start:end]):
        try:
            st = stat(path)
        except OSError:
            continue
        keys[k, 0], keys[k, 1] = st.st_size, st.st_mtime_ns
    return keys


def _check_part(args: tuple[int, int, int, int]) -> list[tuple[str | None, int, int, int]]:
    start, end, max_pixels, max_file_size = args
    return [check_traits(p, max_pixels=max_pixels, max_file_size=max_file_size) for p in _PATHS[start:end]]


def _in_parts(fn, count: int, extra: tuple, workers: int, parallel_from: int, progress=None) -> list:
    """``fn((start, end) + extra)`` over ``_PATHS``, in forked processes when there are many;
    ``progress`` (a ``Progress``) counts the paths done, part by part."""
    if count < parallel_from:
        return [fn((0, count) + extra)]
    step = -(-count // (max(workers, 1) * 4))
    parts = [(i, min(i + step, count)) + extra for i in range(0, count, step)]
    if workers <= 1:
        return [_counted(fn(p), p, progress) for p in parts]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return [_counted(r, p, progress) for p, r in zip(parts, pool.imap(fn, parts))]


def _counted(result, part: tuple, progress) -> list:
    if progress is not None:
        progress.update(part[1] - part[0])
    return result


def scan(
    paths: Sequence[str],
    *,
    max_pixels: int,
    max_file_size: int,
    cache_dir: Path | None,
    workers: int | None = None,
) -> ScanResult:
    """Checks every file and reads its size; unchanged files come from the cache.

    Args:
        paths: the files.
        max_pixels: images with more pixels are refused.
        max_file_size: larger files are refused.
        cache_dir: where results are kept between runs (``None``: no cache).
        workers: processes for a cold scan (default: the usable cores).
    """
    started = time.perf_counter()
    paths = list(paths)
    world = agreement.current_group() or (0, 1)
    mine = np.arange(world[0], len(paths), world[1]) if world[1] > 1 else np.arange(len(paths))
    cache = _Cache(cache_dir, paths, max_pixels, max_file_size) if cache_dir is not None else None
    cached = cache.load() if cache is not None else None

    global _PATHS
    workers = workers or env.cores()
    try:
        _PATHS = [paths[i] for i in mine] if world[1] > 1 else paths
        keys = np.concatenate(_in_parts(_stat_part, len(mine), (), workers, _PARALLEL_STAT_FROM))
        reasons: list[str | None] = [None] * len(mine)
        sizes = np.full((len(mine), 2), -1, np.int64)
        traits = np.zeros(len(mine), np.uint8)
        fresh = np.ones(len(mine), bool)
        if cached is not None:
            fresh = ~np.all(cached.keys[mine] == keys, axis=1)
            sizes[~fresh] = cached.sizes[mine[~fresh]]
            traits[~fresh] = cached.traits[mine[~fresh]]
            for k in np.flatnonzero(~fresh & (cached.codes[mine] >= 0)):  # the cached bad files
                reasons[k] = cached.reason(mine[k])
        todo = np.flatnonzero(fresh)
        _PATHS = [_PATHS[k] for k in todo]
        with Progress("scan", total=len(todo), unit="file", logger=logger) as progress:
            limits = (max_pixels, max_file_size)
            parts = _in_parts(_check_part, len(todo), limits, workers, _PARALLEL_FROM, progress)
        results = [r for part in parts for r in part]
    finally:
        _PATHS = []
    for k, (reason, h, w, trait) in zip(todo, results):
        reasons[k], sizes[k], traits[k] = reason, (h, w), trait
    part = (mine, keys, sizes, reasons, len(todo), traits)
    if world[1] > 1:
        part = _exchange(part, paths, (max_pixels, max_file_size))
    all_idx, all_keys, all_sizes, all_reasons, checked, all_traits = part
    order = np.argsort(all_idx)
    result_keys, result_sizes, result_traits = all_keys[order], all_sizes[order], all_traits[order]
    result_reasons = [all_reasons[i] for i in order]
    if cache is not None and (checked or cached is None) and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        cache.save(result_keys, result_sizes, result_reasons, result_traits)
    bad = {i: r for i, r in enumerate(result_reasons) if r is not None}
    logger.info(
        "scanned %d files (%d read, %d from the cache) in %.2f s: %d bad",
        len(paths),
        checked,
        len(paths) - checked,
        time.perf_counter() - started,
        len(bad),
    )
    return ScanResult(bad=bad, sizes=result_sizes, traits=result_traits)


def _exchange(part, paths: list[str], limits: tuple[int, int]):
    """Every rank's share of the scan, gathered on every rank, after checking that every rank
    scanned the same listing with the same limits (the shares are merged by index).

    Raises:
        agreement.RanksDisagree: naming what differs and the ranks, on every rank alike.
    """
    listing = {"files": len(paths), "listing": agreement.listing_digest(paths), "max_pixels, max_file_size": limits}
    gathered = agreement.gather((listing, part))
    agreement.check_agree([g[0] for g in gathered], "the files the scan listed")
    gathered = [g[1] for g in gathered]
    return (
        np.concatenate([g[0] for g in gathered]),
        np.concatenate([g[1] for g in gathered]),
        np.concatenate([g[2] for g in gathered]),
        [r for g in gathered for r in g[3]],
        sum(g[4] for g in gathered),
        np.concatenate([g[5] for g in gathered]),
    )


class _Cached:
    """A loaded cache, aligned with the paths being scanned."""

    def __init__(self, keys: np.ndarray, sizes: np.ndarray, codes: np.ndarray, table: list[str], traits) -> None:
        self.keys, self.sizes, self.codes, self.table, self.traits = keys, sizes, codes, table, traits

    def reason(self, i: int) -> str | None:
        code = int(self.codes[i])
        return None if code < 0 else self.table[code]


class _Cache:
    """One ``.npz`` per (folder, settings): per-file stat keys, sizes and reasons, in path order.

    When the list of paths is the one cached (the usual case) the arrays
    line up with it and nothing is looked up per path.
    """

    def __init__(self, cache_dir: Path, paths: list[str], max_pixels: int, max_file_size: int) -> None:
        root = os.path.dirname(os.path.commonprefix([min(paths), max(paths)])) if paths else ""
        digest = sha256_hex(f"{CACHE_VERSION}|{root}|{max_pixels}|{max_file_size}", 20)
        self.file = Path(cache_dir) / "scan" / f"{digest}.npz"
        self.paths = paths
        self.listing = sha256_hex("\0".join(paths))

    def load(self) -> _Cached | None:
        if not self.file.is_file():
            return None
        try:
            with np.load(self.file, allow_pickle=False) as data:
                if str(data["listing"]) != self.listing:
                    return None  # other files: scan them all (a changed folder is rare)
                keys, sizes, codes, traits = data["keys"], data["sizes"], data["codes"], data["traits"]
                table = [str(t) for t in data["table"]]
            n = len(self.paths)
            if (
                keys.shape != (n, 2)
                or sizes.shape != (n, 2)
                or codes.shape != (n,)
                or traits.shape != (n,)
                or (len(codes) and int(codes.max(initial=-1)) >= len(table))
            ):
                raise ValueError("arrays do not match the listing")
            return _Cached(
                keys.astype(np.int64), sizes.astype(np.int64), codes.astype(np.int64), table, traits.astype(np.uint8)
            )
        except (OSError, ValueError, KeyError, TypeError, EOFError) as err:
            logger.warning("ignoring unreadable scan cache %s: %s", self.file, err)
            return None

    def save(self, keys: np.ndarray, sizes: np.ndarray, reasons: list[str | None], traits: np.ndarray) -> None:
        table = sorted({r for r in reasons if r is not None})
        index = {r: k for k, r in enumerate(table)}
        codes = np.array([-1 if r is None else index[r] for r in reasons], np.int32)
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.file.with_name(f"{self.file.stem}.{os.getpid()}.tmp.npz")
            np.savez(
                tmp,
                listing=np.array(self.listing),
                keys=keys,
                sizes=sizes.astype(np.int32),
                codes=codes,
                traits=traits.astype(np.uint8),
                table=np.array(table, dtype=str),
            )
            os.replace(tmp, self.file)
        except OSError as err:
            logger.warning("could not write the scan cache %s: %s", self.file, err)
