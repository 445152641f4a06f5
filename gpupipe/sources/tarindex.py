"""Indexing a WebDataset tar written by any tool: its samples, their image and label members, the
images' sizes from their headers, and what cannot be used (each with its reason).

Members are grouped into samples as WebDataset groups them: consecutive
members sharing a key, the key being the path up to the first dot of the
file name (``dir/0001.seg.png`` is key ``dir/0001``, extension ``seg.png``).
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .. import shardfmt
from ..images import ImageRefused, header_at

_KEY_EXT = re.compile(r"^((?:.*/|)[^./][^/]*?)\.([^/]*)$")
#: Label members larger than this are refused (a label is a few bytes; a JSON a few KB).
MAX_LABEL_BYTES = 1 << 20


@dataclass
class TarIndex:
    """What one tar holds.

    Attributes:
        samples: per usable sample, ``(key, image member, raw label)``; the label is an int or a class name.
        sizes: per sample, the image's ``(h, w)`` with EXIF orientation, or ``(-1, -1)`` when unreadable.
        bad: ``{sample number: reason}`` of samples whose image header cannot be read.
        problems: ``(name, reason)`` of members and samples left out.
    """

    samples: List[Tuple[str, shardfmt.Member, object]] = field(default_factory=list)
    sizes: List[Tuple[int, int]] = field(default_factory=list)
    bad: Dict[int, str] = field(default_factory=dict)
    problems: List[Tuple[str, str]] = field(default_factory=list)


def split_name(name: str) -> Optional[Tuple[str, str]]:
    """``(key, extension)`` of a member name, or ``None`` when it has no extension."""
    match = _KEY_EXT.match(name)
    return (match.group(1), match.group(2)) if match else None


def index_tar(path: str, image_exts: Sequence[str], label: str, max_pixels: int = 1 << 62) -> TarIndex:
    """Indexes the local tar ``path``.

    Args:
        path: the tar.
        image_exts: extensions an image may have, in order of preference (lower case).
        label: ``"cls"``, ``"txt"`` (any extension whose text is the label) or ``"json:<field>"``.
        max_pixels: images with more pixels are bad samples.
    """
    out = TarIndex()
    label_ext, label_field = (label.split(":", 1) + [""])[:2] if label.startswith("json:") else (label, "")
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        groups = _groups(fh, path, size, out.problems)
        for key, members in groups:
            where = f"{path}#{key}"
            image_ext = next((e for e in image_exts if e in members), None)
            if image_ext is None:
                out.problems.append((where, f"no image member (.{', .'.join(image_exts)})"))
                continue
            if label_ext not in members:
                out.problems.append((where, f"no .{label_ext} member for the label"))
                continue
            try:
                value = _label(_read(fh, members[label_ext]), label_field)
            except ValueError as err:
                out.problems.append((f"{where}.{label_ext}", str(err)))
                continue
            image = members[image_ext]
            out.samples.append((key, image, value))
            try:
                out.sizes.append(_image_size(fh, image, max_pixels))
            except ImageRefused as err:
                out.bad[len(out.samples) - 1] = err.reason
                out.sizes.append((-1, -1))
    return out


def _groups(fh, path: str, size: int, problems: List[Tuple[str, str]]) -> List[Tuple[str, Dict[str, shardfmt.Member]]]:
    """Consecutive members by key; members DALI's index cannot hold are left out (and listed)."""
    groups: List[Tuple[str, Dict[str, shardfmt.Member]]] = []
    try:
        with tarfile.open(fileobj=fh, mode="r:") as tar:
            for info in tar:
                where = f"{path}#{info.name}"
                if not info.isfile():
                    continue
                parts = split_name(info.name)
                if parts is None:
                    problems.append((where, "no extension: not part of a WebDataset sample"))
                    continue
                if any(c.isspace() for c in info.name):
                    problems.append((where, "a name with white space, which DALI's tar index cannot hold"))
                    continue
                if info.offset_data + info.size > size:
                    problems.append((where, "lies past the end of the tar (cut short?)"))
                    continue
                key, ext = parts
                member = shardfmt.Member(info.name, info.offset_data, info.size)
                if groups and groups[-1][0] == key:
                    if ext.lower() in groups[-1][1]:
                        problems.append((where, f"a second .{ext} member in sample {key}"))
                        continue
                    groups[-1][1][ext.lower()] = member
                else:
                    groups.append((key, {ext.lower(): member}))
    except tarfile.TarError as err:
        problems.append((path, f"not a readable tar after {sum(len(g[1]) for g in groups)} members ({err})"))
    return groups


def _read(fh, member: shardfmt.Member) -> bytes:
    if member.size > MAX_LABEL_BYTES:
        raise ValueError(f"{member.size:,} bytes is too large for a label member")
    return os.pread(fh.fileno(), member.size, member.offset)


def _label(data: bytes, json_field: str):
    """The label in a ``.cls``/``.txt`` member (an int or a class name), or in a JSON member's field."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError("the label is not UTF-8 text") from None
    if json_field:
        try:
            value = json.loads(text)
            for part in json_field.split("."):
                value = value[part]
        except (ValueError, KeyError, TypeError, IndexError):
            raise ValueError(f"no field {json_field!r} in the JSON label member") from None
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"the label field {json_field!r} is {value!r}, not an int or a class name")
        return value
    if not text:
        raise ValueError("an empty label")
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _image_size(fh, member: shardfmt.Member, max_pixels: int) -> Tuple[int, int]:
    def read_at(offset: int, size: int) -> bytes:
        size = max(0, min(size, member.size - offset))
        return os.pread(fh.fileno(), size, member.offset + offset)

    header = header_at(read_at, lambda: io.BytesIO(read_at(0, member.size)), max_pixels)
    return header.oriented


__all__ = ["TarIndex", "index_tar", "split_name"]
