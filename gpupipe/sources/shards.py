"""Samples inside WebDataset tars, read by offset: packed shards (``Shards``) and their base class."""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..fileio import DEFAULT_MAX_FILE_SIZE, UnreadableFile, byte_size, regular_stat
from ..images import ImageRefused, read_header
from ..plan.seeding import order_generator
from ..remote import CachedStore, LocalStore, Retry, ShardCache, default_cache_dir, is_url
from ..remote.packs import PackedTar, remote_pack
from ..remote.urls import redact, safe_name
from ..shards import format as shardfmt
from ..targets import TargetKind
from .base import Indices, Source, given_path
from .scan import ScanResult

logger = logging.getLogger("gpupipe.sources")

PathLike = str
#: Member sizes are checked by the scan, with the loader's ``max_file_size``.
_NO_LIMIT = 1 << 62


class ShardSource(Source):
    """A source whose samples are members of tar files, located by an index.

    Attributes:
        store: where the tars are (``LocalStore`` or, for URLs, the node's cache).
        tar_paths: the tars as local files (for URLs: where the cache keeps them).
        entries: per sample, its members by extension (offset and size in its tar).
        shard_of: ``(N,)`` the tar of each sample (``tars_of`` is the public question).
        image_ext: the member holding the image.
        target_ext: the member DALI's reader reads with the image (a mask), else ``None``.
        damaged: ``{index: reason}`` of members that cannot be read (found when the source was built).
    """

    needs_scan = False
    image_ext = shardfmt.IMAGE_EXT
    target_ext: str | None = None
    columns: tuple[str, ...] = ("names", "labels", "entries", "shard_of", "image_sizes", "damaged")
    store: LocalStore | CachedStore
    root: str | Path
    entries: list[shardfmt.IndexEntry]
    shard_of: np.ndarray
    image_sizes: np.ndarray
    damaged: dict[int, str]

    @property
    def tar_paths(self) -> list[str]:
        return self.store.paths

    @property
    def shards_per_run(self) -> int | None:
        """Tars one DALI run may read (``None``: any number): a cache must hold a run's tars."""
        return self.store.shards_per_run

    def fetched_since(self, since: float):
        """For tars behind URLs, what the node downloaded of them from wall time ``since`` on
        (a ``Fetched``); ``None`` for tars on this disk."""
        return self.store.fetched_since(since) if isinstance(self.store, CachedStore) else None

    def _init_tables(self) -> None:
        self.shard_of = np.asarray(self.shard_of, np.int64)
        self._after_subset()

    def _after_subset(self) -> None:
        self._starts = np.searchsorted(self.shard_of, np.arange(len(self.tar_paths) + 1)).tolist()
        self.store = self.store.clone()  # open descriptors and pins of this object only

    def _scan(self, max_pixels: int, max_file_size: int) -> ScanResult:
        """Samples known bad: damaged members, members over ``max_file_size`` (the loader's, as for a
        folder; at most the source's own), images over ``max_pixels``; nothing is read."""
        bad = dict(self.__dict__.get("damaged", {}))
        limit = min(max_file_size, self.max_file_size)
        required = [self.image_ext] + ([self.target_ext] if self.target_ext else [])
        for i, entry in enumerate(self.entries):
            if i in bad:
                continue
            member = max((entry[ext] for ext in required if ext in entry), key=lambda m: m.size, default=None)
            if member is not None and member.size > limit:
                bad[i] = f"{member.name}: file too large: {member.size:,} bytes exceeds the {limit:,}-byte limit"
        pixels = self.image_sizes[:, 0] * self.image_sizes[:, 1]
        for too_big in np.flatnonzero(pixels > max_pixels):
            h, w = (int(side) for side in self.image_sizes[too_big])
            bad.setdefault(
                int(too_big),
                f"too many pixels: {w}x{h} = {w * h / 1e6:.0f} MP exceeds the "
                f"{max_pixels / 1e6:.0f} MP limit (decompression bomb?)",
            )
        return ScanResult(bad=bad, sizes=self.image_sizes)

    def members(self, indices: Sequence[int]) -> list[tuple[str, list[shardfmt.IndexEntry]]]:
        """``(tar path, entries)`` per run of consecutive samples from one tar (what DALI's reader takes)."""
        shard_of = self.shard_of[np.asarray(indices, np.int64)].tolist()
        return [
            (self.tar_paths[shard], [self.entries[i] for i in indices[start:end]])
            for shard, start, end in shardfmt.runs(shard_of)
        ]

    def read_member(self, index: int, ext: str) -> np.ndarray:
        """One member of sample ``index`` as a writable 1-D uint8 array.

        Raises:
            UnreadableFile: the tar is shorter than the index says.
        """
        member = self.entries[index][ext]
        shard = int(self.shard_of[index])
        data = self.store.read(shard, member.offset, member.size, f"{self.store.locations[shard]}#{member.name}")
        return np.frombuffer(bytearray(data), np.uint8)

    def will_read(self, order: np.ndarray, start: int) -> None:
        """Fetches ahead: the next tars ``order[start:]`` will read (a no-op for local tars)."""
        if not self.store.remote:
            return
        per_shard = max(1, len(self) // max(1, len(self.tar_paths)))
        upcoming = self.shard_of[np.asarray(order[start : start + 4 * per_shard], np.int64)]
        self.store.prefetch(list(dict.fromkeys(upcoming.tolist())))

    def hold(self, indices: Indices):
        """Makes the tars of ``indices`` local and keeps them so until the returned hold is released."""
        return self.store.hold(np.unique(self.shard_of[np.asarray(indices, np.int64)]).tolist())

    def read_bytes(self, index: int) -> np.ndarray:
        return self.read_member(index, self.image_ext)

    def read_mask(self, index: int) -> np.ndarray:
        if self.target_ext is None:
            return super().read_mask(index)
        return self.read_member(index, self.target_ext)

    def tars_of(self, indices) -> np.ndarray:
        return self.shard_of[np.asarray(indices, np.int64)]

    def epoch_order(self, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
        """Shuffled epochs permute the tars, then the samples inside each: reads stay within one tar at a time."""
        if not shuffle:
            return np.arange(len(self), dtype=np.int64)
        import torch

        generator = order_generator(seed, epoch)
        parts = []
        for shard in torch.randperm(len(self.tar_paths), generator=generator).tolist():
            start, end = self._starts[shard], self._starts[shard + 1]
            parts.append(start + torch.randperm(end - start, generator=generator).numpy())
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def validate_members(self, tar_sizes: Sequence[int], required: Sequence[str]) -> None:
        """Records in ``damaged`` every sample with a missing member or one that lies outside its tar
        (sizes over ``max_file_size`` are the scan's business: the loader's setting applies)."""
        damaged: dict[int, str] = {}
        for i, entry in enumerate(self.entries):
            tar_size = tar_sizes[int(self.shard_of[i])]
            for ext in required:
                member = entry.get(ext)
                problem = (
                    f"no .{ext} member" if member is None else shardfmt.member_problem(member, tar_size, _NO_LIMIT)
                )
                if problem:
                    damaged[i] = problem
                    break
        self.damaged = damaged

    def header_sizes(self) -> np.ndarray:
        """``(N, 2)`` oriented image sizes read from each image member's header (-1 where unreadable)."""
        sizes = np.full((len(self), 2), -1, np.int64)
        for i in range(len(self)):
            if i in self.damaged:
                continue
            try:
                data = self.read_member(i, self.image_ext).tobytes()
                sizes[i] = read_header(io.BytesIO(data), max_pixels=1 << 62).oriented
            except (UnreadableFile, ImageRefused) as err:
                self.damaged[i] = err.reason
        return sizes


class Shards(ShardSource):
    """Samples packed by ``python -m gpupipe.pack`` (WebDataset tars with DALI indexes).

    Reads ``root/manifest.json`` and each shard's index, and checks them
    against the tars, without reading any image: every name must stay
    inside ``root``, every indexed member must lie inside its tar (a shard
    cut short by an interrupted copy has members past its end; they are
    reported as bad samples, which the loader refuses or skips by
    ``on_error``), and every label must index a class. Targets (labels,
    label sets, boxes) come from the manifest, on every backend. A shuffled
    epoch permutes the shards, then the samples inside each shard.

    A pack behind a URL (``s3://``, ``gs://``, ``https://``; through
    ``fsspec``) is read the same way: its manifest and indexes at once, each
    tar into the node's cache as the epoch reaches it (see ``gpupipe.remote``).

    Args:
        root: the packed folder, or its URL.
        max_file_size: members larger than this are bad samples.
        cache_dir: where a remote pack's tars are cached (default ``remote/`` in
            ``gpupipe.env.cache_dir``; processes sharing it download each tar once).
        cache_limit: bytes of tars the cache keeps (``"20GB"``; least recently used go first).
        storage_options: for the fsspec file system (credentials, ``endpoint_url``, ...).
        retry: attempts, back-off and time-out of remote reads.
        checksums: a local pack's shards are checked against the manifest's sizes
            always, and against its sha256 checksums when this is ``True``, or when
            it is ``None`` and the pack is small (``CHECKSUM_AUTO_BYTES``,
            64 MiB: hashing costs about a second per GB, on every open); a shard
            whose tar and index were both hashed has its tar headers left unread
            (without, the headers of its first and last samples are checked);
            ``python -m gpupipe.pack --verify`` checks everything.

    Raises:
        ValueError: no manifest, a malformed one (the field is named), a name
            leaving ``root``, a missing shard or index, a shard whose size (or
            checksum) differs from the manifest's, an index that does not match
            the manifest, or a label out of range.
        RemoteError: a remote pack's server cannot be reached after the retries.
    """

    def __init__(
        self,
        root,
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        cache_dir=None,
        cache_limit="20GB",
        storage_options: dict | None = None,
        retry: Retry | None = None,
        checksums: bool | None = None,
    ) -> None:
        self.max_file_size = max_file_size
        if is_url(str(root)):
            self.root = redact(str(root).rstrip("/"))  # what messages name
            cache = ShardCache(
                cache_dir or default_cache_dir(), byte_size(cache_limit, "cache_limit"), retry, storage_options
            )
            manifest, tars = remote_pack(str(root).rstrip("/"), cache)
            self.store = CachedStore(
                [t.location for t in tars], [t.size for t in tars], [t.sha256 for t in tars], cache
            )
        else:
            local = given_path(root, "Shards: root")
            self.root = local
            manifest, tars = _local_pack(local, checksums)
            self.store = LocalStore([t.location for t in tars])
        self.manifest = manifest
        self.kind = TargetKind(manifest.get("kind", "label"))
        self.classes = list(manifest["classes"])
        self.ignore_index = int(manifest.get("ignore_index", 255))
        target = self.target
        if target.read_from_tar:
            self.target_ext = target.member
        self.entries, self.names = [], []
        shard_of: list[int] = []
        labels: list[int] = []
        sizes: list[list[int]] = []
        columns: dict[str, list] = {field: [] for field in target.manifest_fields if field != "labels"}
        for number, (shard, tar) in enumerate(zip(manifest["shards"], tars)):
            count = len(tar.entries)
            self.entries.extend(tar.entries)
            shard_of.extend([number] * count)
            where = redact(tar.location)
            self.names.extend(f"{where}#{e[self.image_ext].name if self.image_ext in e else '?'}" for e in tar.entries)
            labels.extend(shard.get("labels") or [-1] * count)
            for field, values in target.unpack(shard, count).items():
                if field in columns:
                    columns[field].extend(values)
            sizes.extend(shard.get("sizes") or [[-1, -1]] * count)
        if not self.names:
            raise ValueError(f"Shards: {self.root} holds no samples")
        self.shard_of = np.asarray(shard_of, np.int64)
        self._init_tables()
        self.labels = np.asarray(labels, np.int64)
        for field, values in columns.items():
            setattr(self, field, values)
        self.columns = ShardSource.columns + tuple(columns)
        target.check(self, f"Shards {self.root}")
        required = [self.image_ext] + ([self.target_ext] if self.target_ext else [])
        self.validate_members([t.size for t in tars], required)
        self.image_sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        if manifest["version"] < 2:
            logger.info("Shards: %s has no image sizes (format version 1); reading them from the headers", self.root)
            self.image_sizes = self.header_sizes()

    @property
    def packed_max_size(self) -> int | None:
        """The ``--max-size`` the pack was made with (its images' shorter sides are at most this),
        ``None`` if its images kept their sizes."""
        settings = self.manifest.get("settings")
        convert = settings.get("convert") if isinstance(settings, dict) else None
        size = convert.get("max_size") if isinstance(convert, dict) else None
        return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None

    def label_sets(self, indices: Indices) -> list[np.ndarray]:
        lists = self.__dict__.get("label_lists")
        return super().label_sets(indices) if lists is None else [lists[i] for i in indices]


def _local_pack(root: Path, checksums: bool | None) -> tuple[dict, list[PackedTar]]:
    """The manifest of the packed folder ``root`` and its tars (sizes, checksums as ``checksums`` says, and
    indexes checked against the manifest)."""
    manifest = shardfmt.read_manifest(root)
    if checksums is None:
        checksums = sum(s["bytes"] for s in manifest["shards"]) <= shardfmt.CHECKSUM_AUTO_BYTES
    tars = []
    for number, shard in enumerate(manifest["shards"]):
        tar = _confined(root, shard["name"], f"shards[{number}].name")
        index = _confined(root, shard["index"], f"shards[{number}].index")
        try:
            size = regular_stat(str(tar), None).st_size
        except UnreadableFile as err:
            raise ValueError(f"Shards: {tar} is listed in the manifest but {err.reason}") from None
        verified = shardfmt.check_shard_file(tar, shard, size, root, checksums)
        entries = shardfmt.read_shard_index(index, shard)
        if not (verified and shard.get("index_sha256")):  # both hashed: the headers can say nothing new
            shardfmt.check_shard_members(tar, entries, size, root)  # no shard read in another's place
        tars.append(PackedTar(str(tar), size, shard.get("sha256") or None, entries))
    return manifest, tars


def _confined(root: Path, name, field: str) -> Path:
    """``root / name`` for a manifest's entry: the rule of names for URLs (``safe_name``:
    nothing that leaves the pack however it is encoded), then no link out of ``root``."""
    try:
        safe_name(name)
    except ValueError:
        raise ValueError(f"{root / shardfmt.MANIFEST}: {field} {name!r} leaves the packed folder") from None
    return shardfmt.confined(root, name, field)
