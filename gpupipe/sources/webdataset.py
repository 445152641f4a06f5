"""``WebDataset``: tars written by any WebDataset writer (img2dataset, webdataset's ``ShardWriter``,
``tarfile``), local or behind URLs, with class labels from a member."""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import Skipped
from ..fileio import DEFAULT_MAX_FILE_SIZE, byte_size, read_json_object, sha256_hex
from ..progress import Progress
from ..remote import CachedStore, LocalStore, Retry, ShardCache, default_cache_dir, is_url
from ..remote.cache import Pin, make_folder
from ..remote.fetch import remote_info
from ..remote.store import check_fits
from ..remote.urls import cache_key, redact
from ..shards import format as shardfmt
from ..shards.tarindex import TARGETS_ELSEWHERE, TarIndex, index_tar, is_image_member
from .base import numbered_classes
from .listcells import FLOAT_INDEX, NUMBER
from .shards import ShardSource
from .wdsspec import expand_shards, label_member, name_what_it_is

logger = logging.getLogger("gpupipe.sources")

#: Bump when the cached index's content changes.
#: 6: hard links read as their file, sparse members and other links refused, labels of several values refused;
#: 5: a key's members lying apart named; 4: formats DALI does not decode refused; 3: concatenated tars read
#: whole, EXIF as scan v4.
INDEX_FORMAT = 6
IMAGE_MEMBER = "image"


class WebDataset(ShardSource):
    """Samples in WebDataset tars written by another tool: an image member and a label member per key.

    Each tar is indexed on first use (its members' offsets, labels and image
    sizes, read once; remote tars are fetched into the cache for it) and the
    index is kept in ``cache_dir``: a later build reads only the indexes,
    checked against each tar's size, modification and change times and inode (for URLs, what the server says of its
    version: ETag, generation or modification time; the cached tar is fetched again when it changes).
    Then the tars are read as packed shards are, on every backend.

    Samples without an image or a label, labels that are not a class,
    members whose names DALI's index cannot hold, and tars that end early are
    reported (``problems``) and the loader refuses or skips them by
    ``on_error``; an image whose header cannot be read is a bad sample.

    Args:
        urls: tar paths or URLs, brace patterns (``"shard-{000000..000099}.tar"``), patterns joined by
            ``::`` (as in webdataset), local globs (``"shards/*.tar"``) or local folders (their ``.tar`` files;
            both in name order).
        label: the label member: ``"cls"``, ``"txt"`` (the text is a class index or a class
            name) or ``"json:<field>"`` (a field of the ``.json`` member; ``a.b`` for nested). Matched
            as member extensions are: in any case, a leading dot dropped.
        image: image extensions, ``;``-separated, in order of preference.
        classes: class names; int labels index them, name labels are looked up. Without:
            int labels ``0..max`` name their classes ``"0"``, ``"1"``, ...; name labels are
            numbered in sorted order.
        cache_dir, cache_limit, storage_options, retry: as for ``Shards``.
        max_file_size: members larger than this are never read while indexing and are bad samples
            (the loader's ``max_file_size`` applies as well).

    Raises:
        ValueError: no tar, a malformed pattern, labels mixing indices and names, or no usable sample.
        RemoteError: a remote tar cannot be read after the retries.
    """

    image_ext = IMAGE_MEMBER

    def __init__(
        self,
        urls: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        label: str = "cls",
        image: str = "jpg;jpeg;png;webp",
        classes: Sequence[str] | None = None,
        cache_dir=None,
        cache_limit="20GB",
        storage_options: dict | None = None,
        retry: Retry | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    ) -> None:
        member = label_member(label)  # as members' extensions are matched: lower case, no leading dot
        locations = expand_shards(urls)
        self.max_file_size = max_file_size
        first = redact(locations[0])  # what messages name
        self.root = first if len(locations) == 1 else f"{first} .. ({len(locations)} tars)"
        image_exts = [e.strip().lower().lstrip(".") for e in image.split(";") if e.strip()]
        if not image_exts:
            raise ValueError(f"WebDataset: image must name extensions such as 'jpg;png', got {image!r}")
        if not member.startswith("json:") and is_image_member(member, image_exts):
            raise ValueError(
                f"WebDataset: label={label!r} names an image member (a mask?); "
                + TARGETS_ELSEWHERE.format(what="masks", reader="SegmentationFolder(images, masks)")
            )
        folder = Path(cache_dir or default_cache_dir())
        remote = [is_url(loc) for loc in locations]
        cache = (
            ShardCache(folder, byte_size(cache_limit, "cache_limit"), retry, storage_options) if any(remote) else None
        )
        if cache is not None and not all(remote):
            raise ValueError("WebDataset: give either local tars or URLs, not both")
        indexer = _Indexer(folder / "wds-index", cache, image_exts, member, max_file_size)
        with ThreadPoolExecutor(min(8, len(locations)), thread_name_prefix="gpupipe-wds-index") as pool:
            with Progress("WebDataset index", total=len(locations), unit="tar", logger=logger) as progress:
                indexes = []
                for item in pool.map(indexer.index, locations):
                    indexes.append(item)
                    progress.update(1)
        self.problems: list[Skipped] = [Skipped(name, reason) for _, idx in indexes for name, reason in idx.problems]
        self.classes, labels = _classes(indexes, classes, self.problems)
        self.entries, self.names, shard_of, label_list, sizes, damaged = [], [], [], [], [], {}
        for number, (_, idx) in enumerate(indexes):
            for k, (_, member, _) in enumerate(idx.samples):
                if labels[number][k] is None:
                    continue
                if k in idx.bad:
                    damaged[len(self.names)] = idx.bad[k]
                self.entries.append({IMAGE_MEMBER: member})
                self.names.append(f"{redact(locations[number])}#{member.name}")
                shard_of.append(number)
                label_list.append(labels[number][k])
                sizes.append(idx.sizes[k])
        if not self.names:
            raise ValueError(
                f"WebDataset: no usable sample in {self.root}"
                + (f" ({len(self.problems)} problems, the first: {self.problems[0]})" if self.problems else "")
            )
        tar_sizes = [meta["size"] for meta, _ in indexes]
        if cache is not None:
            self.store = CachedStore(locations, tar_sizes, [meta.get("sha256") for meta, _ in indexes], cache)
        else:
            self.store = LocalStore(locations)
        self.shard_of = np.asarray(shard_of, np.int64)
        self._init_tables()
        self.labels = np.asarray(label_list, np.int64)
        self.validate_members(tar_sizes, [IMAGE_MEMBER])
        self.damaged.update(damaged)
        self.image_sizes = np.asarray(sizes, np.int64).reshape(-1, 2)


class _Indexer:
    """Indexes tars, keeping each index in ``folder`` keyed by the tar and the settings."""

    def __init__(
        self, folder: Path, cache: ShardCache | None, image_exts: list[str], label: str, max_file_size: int
    ) -> None:
        self.folder, self.cache, self.image_exts, self.label = folder, cache, image_exts, label
        self.max_file_size = max_file_size
        make_folder(folder)

    def index(self, location: str):
        """``(meta, TarIndex)`` of one tar: from the kept index when the tar is unchanged."""
        meta = self._meta(location)
        if self.cache is not None and meta["size"] is not None:
            check_fits(self.cache, meta["size"])  # before any download
        pin = None
        try:
            if self.cache is not None and not meta["stamp"][1]:
                # the server states no version: the tar is fetched again (once per node for the sources
                # built together) and its checksum says whether the kept index still holds
                pin = self._fetch(location, meta)
            path = self._kept_path(location)
            kept = read_json_object(path)
            if kept is not None and kept.get("meta", {}).get("stamp") == meta["stamp"]:
                try:
                    return kept["meta"], _from_json(kept["index"])
                except (KeyError, TypeError, ValueError):
                    logger.warning(
                        "WebDataset: the kept index %s of %s is damaged; indexing the tar again", path, meta["location"]
                    )
            if self.cache is not None:  # the cached copy must be the version the server has now
                pin = pin or self._fetch(location, meta)
                index = _index_tar(pin.path, self.image_exts, self.label, self.max_file_size)
                meta["sha256"] = self.cache.sha256(location)
                index.problems = [(n.replace(pin.path, meta["location"]), r) for n, r in index.problems]
            else:
                index = _index_tar(location, self.image_exts, self.label, self.max_file_size)
        finally:
            if pin is not None:
                pin.release()
        tmp = path.with_suffix(f".tmp{uuid.uuid4().hex[:12]}")  # unique across containers sharing the folder
        try:
            tmp.write_text(json.dumps({"meta": meta, "index": _to_json(index)}))
            os.replace(tmp, path)
        except OSError as err:  # a full disk: the index is only kept to save time, the tar is read all the same
            tmp.unlink(missing_ok=True)
            logger.warning("could not keep the WebDataset index %s: %s; the tar is indexed again next time", path, err)
        logger.info(
            "WebDataset: indexed %s: %d samples, %d problems", meta["location"], len(index.samples), len(index.problems)
        )
        return meta, index

    def _fetch(self, location: str, meta: dict) -> Pin:
        """The remote tar in the cache, as the server has it now (``meta``'s version; ``""``: fetched since
        the cache was made, then its sha256 is its version). A size the server did not state (no
        Content-Length, or compressed in transit) is the downloaded file's, at most ``cache_limit``."""
        assert self.cache is not None
        pin = self.cache.get(location, size=meta["size"], version=meta["stamp"][1], max_bytes=self.cache.limit)
        if meta["size"] is None:
            meta["size"] = os.path.getsize(pin.path)
        if not meta["stamp"][1]:
            meta["stamp"][1] = f"sha256={self.cache.sha256(location)}"
        return pin

    def _kept_path(self, location: str) -> Path:
        """Where the index of ``location`` with these settings is kept (the name is a digest: the
        location's credentials are never written)."""
        settings = {
            "format": INDEX_FORMAT,
            "image": self.image_exts,
            "label": self.label,
            "location": cache_key(location) if self.cache is not None else location,
            "max_file_size": self.max_file_size,
        }
        return self.folder / f"{sha256_hex(json.dumps(settings, sort_keys=True), 32)}.json"

    def _meta(self, location: str) -> dict:
        """The tar's size and what tells a changed tar apart (mtime, or the server's ETag or modification time;
        ``""`` where the server states none; a size it does not state is ``None`` until the tar is fetched)."""
        if self.cache is None:
            try:
                st = os.stat(location)
            except OSError as err:
                raise ValueError(f"WebDataset: cannot read {location}: {err.strerror or err}") from None
            # the change time and inode too: a tar replaced with its size and modification time kept (cp -p) differs
            stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
            return {"location": location, "size": st.st_size, "stamp": stamp}
        info = remote_info(location, self.cache.retry, self.cache.storage_options, need_size=False)
        # what the kept index names: never a URL's credentials
        return {"location": redact(location), "size": info["size"], "stamp": [info["size"], info["version"]]}


def _index_tar(path: str, image_exts: list[str], label: str, max_file_size: int) -> TarIndex:
    """``index_tar``, naming what a file that is no tar at all is instead (a ``.tar.gz``, a zip, ...)."""
    index = index_tar(path, image_exts, label, max_file_size=max_file_size)
    _apart(index)
    name_what_it_is(index, path)
    return index


#: Why a key is found twice, part of its members each time: the tar was not written sample by sample.
_APART = (
    "its members are apart in the tar ({reason}, but found at another place): WebDataset reads a sample's "
    "files next to each other; write the tar with them together (tar --sort=name, or webdataset's TarWriter)"
)


def _apart(index: TarIndex) -> None:
    """Says so where a key's members lie apart (``tar cf`` of a folder, in the folder's order): each part was
    "no image member" or "no label member", though both are in the tar."""
    partial = [k for k, (_, reason) in enumerate(index.problems) if reason.startswith(("no image member", "no ."))]
    counts = Counter(index.problems[k][0] for k in partial)
    for k in partial:
        where, reason = index.problems[k]
        if counts[where] > 1:
            index.problems[k] = (where, _APART.format(reason=reason.split(" (", 1)[0].split(":", 1)[0]))


def _classes(indexes, classes: Sequence[str] | None, problems: list[Skipped]):
    """Class names, and per tar and sample its label (``None`` where it names no class: listed in ``problems``)."""
    values = [v for _, idx in indexes for _, _, v in idx.samples]
    names = [v for v in values if isinstance(v, str)]
    if classes is not None:
        classes = [str(c) for c in classes]
    elif names and len(names) != len(values):
        named = next((m, s, v) for m, i in indexes for _, s, v in i.samples if isinstance(v, str))
        numbered = next((m, s, v) for m, i in indexes for _, s, v in i.samples if not isinstance(v, str))
        raise ValueError(
            "WebDataset: labels mix class indices and class names ("
            + " and ".join(f"{redact(m['location'])}#{s.name}: {v!r}" for m, s, v in (named, numbered))
            + "); pass classes=[...] to name them"
        )
    elif names:
        _refuse_numbers(indexes, names)
        classes = sorted(set(names))
    else:
        largest = max(values, default=-1)
        where = next(
            (f"{redact(m['location'])}#{s.name}" for m, i in indexes for _, s, v in i.samples if v == largest), ""
        )
        classes = numbered_classes(largest, "WebDataset", where)
    lookup = {name: i for i, name in enumerate(classes)}
    labels = []
    for meta, idx in indexes:
        row = []
        for _, member, value in idx.samples:
            label = lookup.get(value) if isinstance(value, str) else (value if 0 <= value < len(classes) else None)
            if label is None:
                problems.append(
                    Skipped(
                        f"{redact(meta['location'])}#{member.name}",
                        f"label {value!r} is not one of the {len(classes)} classes",
                    )
                )
            row.append(label)
        labels.append(row)
    return classes, labels


def _refuse_numbers(indexes, names: list[str]) -> None:
    """Refuses label members that are all numbers written with a decimal point (``2.0``, ``10.0``: read as class
    names they would be numbered in sorted order, ``10.0`` before ``2.0``; ``0.73``: each value a class)."""
    if not all(NUMBER.fullmatch(v) for v in names):
        return
    meta, member, value = next((m, s, v) for m, i in indexes for _, s, v in i.samples)
    indices = all(FLOAT_INDEX.fullmatch(v) for v in names)
    raise ValueError(
        f"WebDataset: {redact(meta['location'])}#{member.name}: the label {value!r} is "
        + (
            "a class index written as a float, as every label is: write the label members as ints"
            if indices
            else "a number, as every label is: each value would be a class of its own (WebDataset reads class labels)"
        )
        + "; to read them as class names, numbered as listed, pass classes=[...]"
    )


def _to_json(index: TarIndex) -> dict:
    return {
        "samples": [[key, m.name, m.offset, m.size, value] for key, m, value in index.samples],
        "sizes": [list(s) for s in index.sizes],
        "bad": {str(k): v for k, v in index.bad.items()},
        "problems": [list(p) for p in index.problems],
    }


def _from_json(data: dict) -> TarIndex:
    return TarIndex(
        samples=[
            (key, shardfmt.Member(name, offset, size), value) for key, name, offset, size, value in data["samples"]
        ],
        sizes=[tuple(s) for s in data["sizes"]],
        bad={int(k): v for k, v in data["bad"].items()},
        problems=[tuple(p) for p in data["problems"]],
    )


__all__ = ["WebDataset"]
