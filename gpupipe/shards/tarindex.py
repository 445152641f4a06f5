"""Indexing a WebDataset tar written by any tool: its samples, their image and label members, the
images' sizes from their headers, and what cannot be used (each with its reason).

Members are grouped into samples as WebDataset groups them: consecutive
members sharing a key, the key being the path up to the first dot of the
file name (``dir/0001.seg.png`` is key ``dir/0001``, extension ``seg.png``).

Nothing is read before its size is known from its tar header: a member over
``max_file_size`` is never read, a label member over ``MAX_LABEL_BYTES``
neither, an image's header is read by offset (a few KB, never the whole
member), and an extended (pax or GNU long-name) header over
``MAX_HEADER_BYTES`` ends the tar's index as unreadable. A hard link to a member
before it is that member's data; other links, devices and sparse members are
listed, never followed or read.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, cast

from ..errors import short_repr
from ..fileio import DEFAULT_MAX_FILE_SIZE
from ..images import ImageRefused, header_at, loader_refusal
from . import format as shardfmt
from .memberfile import MemberFile

_KEY_EXT = re.compile(r"^((?:.*/|)[^./][^/]*?)\.([^/]*)$")
#: Label members larger than this are refused (a label is a few bytes; a JSON a few KB).
MAX_LABEL_BYTES = 1 << 20
#: Extended tar headers (pax, GNU long names) larger than this are refused unread.
MAX_HEADER_BYTES = 1 << 20
#: Member extensions that hold an image whatever the image members asked for (a mask is often a PNG).
IMAGE_MEMBER_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff"})
#: Member extensions that WebDataset writers use for a class label.
LABEL_MEMBER_EXTENSIONS = frozenset({"cls", "cls2", "txt", "label", "labels", "target", "class", "index", "idx"})


def is_image_member(ext: str, image_exts: Sequence[str]) -> bool:
    """Whether a member with extension ``ext`` (``seg.png``: its last part counts) holds an image."""
    return ext.lower().rsplit(".", 1)[-1] in {*image_exts, *IMAGE_MEMBER_EXTENSIONS}


@dataclass
class TarIndex:
    """What one tar holds.

    Attributes:
        samples: per usable sample, ``(key, image member, raw label)``; the label is an int or a class name.
        sizes: per sample, the image's ``(h, w)`` with EXIF orientation, or ``(-1, -1)`` when unreadable.
        bad: ``{sample number: reason}`` of samples whose image header cannot be read.
        problems: ``(name, reason)`` of members and samples left out.
    """

    samples: list[tuple[str, shardfmt.Member, object]] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    bad: dict[int, str] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name, or ``None`` when it has no extension."""
    match = _KEY_EXT.match(name)
    return (match.group(1), match.group(2)) if match else None


def index_tar(
    path: str,
    image_exts: Sequence[str],
    label: str,
    max_pixels: int = 1 << 62,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
) -> TarIndex:
    """Indexes the local tar ``path``.

    Args:
        path: the tar.
        image_exts: extensions an image may have, in order of preference (lower case).
        label: ``"cls"``, ``"txt"`` (any extension whose text is the label) or ``"json:<field>"``.
        max_pixels: images with more pixels are bad samples.
        max_file_size: larger images are bad samples and larger members are never read.
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
                out.problems.append(
                    (where, f"no image member (.{', .'.join(image_exts)}){_dotted(members, image_exts)}")
                )
                continue
            if label_ext not in members:
                out.problems.append(
                    (
                        where,
                        f"no .{label_ext} member for the label"
                        + _targets_hint(members, image_ext, image_exts, label_ext),
                    )
                )
                continue
            try:
                value = _label(_read(fh, members[label_ext], max_file_size), label_field)
            except ValueError as err:
                out.problems.append((f"{where}.{label_ext}", str(err)))
                continue
            image = members[image_ext]
            out.samples.append((key, image, value))
            if image.size == 0:
                out.bad[len(out.samples) - 1] = "an empty file (0 bytes)"
                out.sizes.append((-1, -1))
                continue
            if image.size > max_file_size:
                out.bad[len(out.samples) - 1] = (
                    f"file too large: {image.size:,} bytes exceeds the {max_file_size:,}-byte limit"
                )
                out.sizes.append((-1, -1))
                continue
            try:
                out.sizes.append(_image_size(fh, image, max_pixels))
            except ImageRefused as err:
                out.bad[len(out.samples) - 1] = err.reason
                out.sizes.append((-1, -1))
    return out


#: What reads the masks and boxes that other WebDataset writers store beside an image.
TARGETS_ELSEWHERE = (
    "gpupipe.WebDataset reads class labels only (a .cls or .txt member, or a field of the .json); "
    "for {what}, read the images and their {what} with gpupipe.{reader} (and pack that with python -m gpupipe.pack "
    "to read it from shards or a URL)"
)


def _targets_hint(
    members: dict[str, shardfmt.Member], image_ext: str, image_exts: Sequence[str], label_ext: str = ""
) -> str:
    """A hint when a sample without its label member holds what looks like a mask (a second image),
    annotations (a ``.json``: boxes, or a label field not asked for) or another label member, else ``""``."""
    labels = [ext for ext in members if ext in LABEL_MEMBER_EXTENSIONS and ext != label_ext]
    if labels and "json" not in members:
        return f": the sample holds .{labels[0]}: label={labels[0]!r} reads the class label from it"
    images = [ext for ext in members if ext != image_ext and is_image_member(ext, image_exts)]
    if images:
        return f": the sample holds .{images[0]} beside its .{image_ext} image (a mask?); " + TARGETS_ELSEWHERE.format(
            what="masks", reader="SegmentationFolder(images, masks)"
        )
    if "json" in members:
        return (
            "; the sample holds a .json member: label='json:<field>' reads a class label from it; "
            + TARGETS_ELSEWHERE.format(what="boxes", reader="CocoDetection(images, annotations)")
        )
    return ""


def _dotted(members: dict[str, shardfmt.Member], image_exts: Sequence[str]) -> str:
    """A hint when an image member's name has a dot before its extension (``a.b.jpg``), else ``""``."""
    dotted = [m.name for ext, m in members.items() if "." in ext and ext.rsplit(".", 1)[1] in image_exts]
    if not dotted:
        return ""
    key, ext = split_name(dotted[0]) or ("", "")
    return (
        f": {dotted[0]!r} is key {key!r} with extension {ext!r}, "
        "as in WebDataset, where the key ends at the first dot of the file name"
    )


def _groups(fh, path: str, size: int, problems: list[tuple[str, str]]) -> list[tuple[str, dict[str, shardfmt.Member]]]:
    """Consecutive members by key; members DALI's index cannot hold are left out (and listed).

    Tars written back to back (``cat a.tar b.tar``) are read whole, as ``tar -i`` reads them: an
    archive's end marker is followed by the next archive's first header.
    """
    groups: list[tuple[str, dict[str, shardfmt.Member]]] = []
    files: dict[str, tuple[int, int]] = {}
    start: int | None = 0
    try:
        while start is not None:
            fh.seek(start)
            with tarfile.open(fileobj=fh, mode="r:", tarinfo=_CappedTarInfo) as tar:
                for info in tar:
                    _add_member(groups, files, info, path, size, problems)
                end = tar.offset
            # tarfile ends its listing quietly at a missing or unreadable header: only an end marker (a
            # block of zeros) there says the tar is whole, so nothing after a cut goes unnoticed
            if os.pread(fh.fileno(), tarfile.BLOCKSIZE, end) != bytes(tarfile.BLOCKSIZE):
                read = sum(len(g[1]) for g in groups)
                why = (
                    f"no end marker after {read} members (byte {end}, the end of the file): written "
                    "without one, or cut at a member boundary (then later members are missing)"
                    if end == size
                    else f"no tar header at byte {end} after {read} members, and no end marker (cut short "
                    "or damaged?): nothing after it is read"
                )
                problems.append((path, why))
                break
            start = _next_archive(fh, path, end, problems)
    except tarfile.TarError as err:
        problems.append((path, f"not a readable tar after {sum(len(g[1]) for g in groups)} members ({err})"))
    return groups


def _add_member(groups, files: dict, info: tarfile.TarInfo, path: str, size: int, problems: list) -> None:
    """Adds a regular file member (or a hard link to one read before: ``files``, ``{name: (offset, size)}``)
    to its sample (the last group when it has the same key)."""
    where = f"{path}#{info.name}"
    if info.islnk() and info.linkname in files:  # a later copy of a file (GNU tar): the first copy's data
        offset, length = files[info.linkname]
    elif not info.isfile():
        if not info.isdir():  # other links and devices are listed, never followed (webdataset skips them unsaid)
            problems.append((where, _not_a_file(info)))
        return
    else:
        offset, length = info.offset_data, info.size
    if info.sparse is not None or info.type == tarfile.GNUTYPE_SPARSE:
        problems.append(
            (where, "a sparse member (tar --sparse): its data is not stored as written; write the tar without --sparse")
        )
        return
    parts = split_name(info.name)
    if parts is None:
        hidden = info.name.rsplit("/", 1)[-1].startswith(".")  # macOS tar adds ._<name> and .DS_Store files
        why = "a hidden file (macOS metadata? COPYFILE_DISABLE=1 tar leaves it out)" if hidden else "no extension"
        problems.append((where, f"{why}: not part of a WebDataset sample"))
        return
    if any(c.isspace() for c in info.name):
        problems.append((where, "a name with white space, which DALI's tar index cannot hold"))
        return
    if offset + length > size:
        problems.append((where, "lies past the end of the tar (cut short?)"))
        return
    files[info.name] = (offset, length)
    key, ext = parts
    member = shardfmt.Member(info.name, offset, length)
    if groups and groups[-1][0] == key:
        if ext.lower() in groups[-1][1]:
            problems.append((where, f"a second .{ext} member in sample {key}"))
            return
        groups[-1][1][ext.lower()] = member
    else:
        groups.append((key, {ext.lower(): member}))


def _not_a_file(info: tarfile.TarInfo) -> str:
    """Why a member that is no regular file or folder is not part of a sample."""
    if info.issym() or info.islnk():
        what = "a symbolic link" if info.issym() else "a hard link"
        return (
            f"{what} (to {info.linkname!r}): links are not followed; a WebDataset sample's files are "
            "regular members of the tar"
        )
    kinds = {tarfile.FIFOTYPE: "a FIFO", tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device"}
    return f"{kinds.get(info.type, f'a member of type {info.type!r}')}, not a file: not part of a sample"


def _next_archive(fh, path: str, end: int, problems: list[tuple[str, str]]) -> int | None:
    """Where the next archive starts after the end marker at ``end`` (the first block that is not
    zeros), or ``None`` at the end of the file; data there that is no tar header is listed, not read."""
    pos = end
    while True:
        data = os.pread(fh.fileno(), 1 << 20, pos)
        if not data:
            return None
        stripped = data.lstrip(b"\x00")
        if stripped:
            block = pos + len(data) - len(stripped)
            block -= block % tarfile.BLOCKSIZE
            break
        pos += len(data)
    try:
        tarfile.TarInfo.frombuf(os.pread(fh.fileno(), tarfile.BLOCKSIZE, block), "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        problems.append((path, f"data after the end marker at byte {block} is not a tar header: not read"))
        return None
    return block


class _CappedTarInfo(tarfile.TarInfo):
    """A tar header whose extended header (pax, GNU long name) is refused unread when over
    ``MAX_HEADER_BYTES`` (``tarfile`` reads one whole into memory)."""

    _EXTENDED = (
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    )

    def _proc_member(self, tarfile_):
        if self.type in self._EXTENDED and self.size > MAX_HEADER_BYTES:
            raise tarfile.SubsequentHeaderError(
                f"an extended header of {self.size:,} bytes at offset {self.offset} (over {MAX_HEADER_BYTES:,})"
            )
        return super()._proc_member(tarfile_)


def _read(fh, member: shardfmt.Member, max_file_size: int) -> bytes:
    if member.size > min(MAX_LABEL_BYTES, max_file_size):
        raise ValueError(f"{member.size:,} bytes is too large for a label member")
    return os.pread(fh.fileno(), member.size, member.offset)


def _label(data: bytes, json_field: str):
    """The label in a ``.cls``/``.txt`` member (an int or a class name), or in a JSON member's field."""
    try:
        text = data.decode("utf-8-sig").strip()  # a BOM is dropped
    except UnicodeDecodeError:
        raise ValueError("the label is not UTF-8 text") from None
    if json_field:
        try:
            value = json.loads(text)
            for part in json_field.split("."):  # a number indexes a list: 'labels.0'
                value = value[int(part)] if isinstance(value, list) and part.isdigit() else value[part]
        except (ValueError, KeyError, TypeError, IndexError):
            raise ValueError(f"no field {json_field!r} in the JSON label member") from None
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(
                f"the label field {json_field!r} is {short_repr(value)}, not an int or a class name{_list_hint(value)}"
            )
        return value
    if not text:
        raise ValueError("an empty label")
    if re.fullmatch(r"-?\d+(?:[\s,;]+-?\d+)+", text):  # '1 2', '1,4': several class indices
        raise ValueError(f"the label {short_repr(text)} holds several values, not one class label" + _list_hint([1]))
    if "\n" in text:
        raise ValueError(f"the label member holds {text.count(chr(10)) + 1} lines, not one class label (a caption?)")
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _list_hint(value) -> str:
    """What reads a JSON label field that holds a list: several class labels, or boxes."""
    if not isinstance(value, list) or not value:
        return ""
    if all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
        return (
            " (several labels per image: gpupipe.WebDataset reads one; gpupipe.FileList reads several per image, "
            "a multi-label source)"
        )
    return "; " + TARGETS_ELSEWHERE.format(what="boxes", reader="CocoDetection(images, annotations)")


def _image_size(fh, member: shardfmt.Member, max_pixels: int) -> tuple[int, int]:
    def read_at(offset: int, size: int) -> bytes:
        size = max(0, min(size, member.size - offset))
        return os.pread(fh.fileno(), size, member.offset + offset)

    header = header_at(read_at, lambda: cast(BinaryIO, MemberFile(fh.fileno(), member)), max_pixels, member.size)
    refusal = loader_refusal(header, os.path.splitext(member.name)[1])  # what DALI fails on, PIL would deliver
    if refusal:
        raise ImageRefused(refusal)
    return header.oriented


__all__ = ["TarIndex", "index_tar", "split_name"]
