"""What a file is, by its first bytes: an image, an archive, other binary data, JSON or YAML, or text.

A path given where a folder or a list file is expected is checked here
first, so that an image or an archive is named as such instead of being
parsed as a list file line by line.
"""

from __future__ import annotations

import os

from ..errors import Error

#: Bytes read to tell what a file is (a tar header's ``ustar`` lies at 257).
SNIFF_BYTES = 512
#: ``(offset, signature, what)``: the first match names the file.
SIGNATURES = (
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (0, b"GIF87a", "a GIF image"),
    (0, b"GIF89a", "a GIF image"),
    (0, b"II*\x00", "a TIFF image"),
    (0, b"MM\x00*", "a TIFF image"),
    (0, b"\x1f\x8b", "a gzip archive"),
    (0, b"PK\x03\x04", "a zip archive"),
    (0, b"PK\x05\x06", "a zip archive"),
    (0, b"BZh", "a bzip2 archive"),
    (0, b"\xfd7zXZ\x00", "an xz archive"),
    (0, b"(\xb5/\xfd", "a zstd archive"),
    (0, b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (257, b"ustar", "a tar archive"),
)
#: Sizes of the header after a BMP's ``BM`` (a text line may well start with ``BM``).
_BMP_HEADERS = (12, 40, 52, 56, 64, 108, 124)


#: Byte-order marks of UTF-16 text (Excel's "Unicode Text", PowerShell's ``>``): text, though it holds NULs.
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def decode_text(data: bytes) -> str:
    """A list file's text: UTF-8 (a byte-order mark dropped; bytes that are not UTF-8 kept as surrogates, as
    file names are), or UTF-16 where it starts with its byte-order mark.

    Raises:
        UnicodeDecodeError: UTF-16 text that does not decode.
    """
    if data[:2] in UTF16_BOMS and data[:4] != b"\xff\xfe\x00\x00":  # not UTF-32
        return data.decode("utf-16")
    return data.decode("utf-8-sig", "surrogateescape")


class NotAListFile(Error, ValueError):
    """A file given where a folder or a list file is expected is an image, an archive, binary data, JSON or YAML."""


def kind_of(head: bytes) -> str | None:
    """``"a JPEG image"``, ``"a tar archive"``, ``"a binary file"``... for the first bytes of a file;
    ``None`` for text (what a list file is)."""
    for offset, signature, what in SIGNATURES:
        if head[offset : offset + len(signature)] == signature:
            return what
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if head[:2] == b"BM" and int.from_bytes(head[14:18], "little") in _BMP_HEADERS:
        return "a BMP image"
    if b"\x00" in head:
        return "a binary file"
    return None


def _text_kind(head: bytes, path: str) -> str | None:
    """``"a JSON file"`` (``"a JSON file (COCO annotations)"``) or ``"a YAML file"`` for a text file that is
    no list file (a list's first path may start with ``[``: ``[2023] trip/a.jpg``, not ``[[`` or ``["``)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"{" or text[:1] == b"[" and text[1:].lstrip()[:1] in (b"[", b"{", b'"'):
        coco = b'"images"' in head and (b'"annotations"' in head or b'"categories"' in head)
        return "a JSON file (COCO annotations)" if coco else "a JSON file"
    if path.lower().endswith((".yaml", ".yml")):
        return "a YAML file"
    return None


def check_list_file(path: str | os.PathLike, expected: str = "a list file", image_hint: str = "") -> None:
    """Raises ``NotAListFile`` where ``path`` is not a text list, saying what it is instead (and what reads it).

    Args:
        expected: what the argument should have been, e.g. ``"a folder or a list file"``.
        image_hint: what to pass instead of an image, appended after a colon.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return  # the reader that follows reports it with its reason
    if head[:2] in UTF16_BOMS and head[:4] != b"\xff\xfe\x00\x00":
        head = head[: len(head) // 2 * 2].decode("utf-16", "replace").encode()
    what = kind_of(head) or _text_kind(head, os.fspath(path))
    if what is None:
        return
    hint = ""
    if what.startswith("a JSON file (COCO"):
        hint = f"read it with gpupipe.CocoDetection(IMAGES_FOLDER, {os.fspath(path)!r})"
    elif what == "a JSON file":
        hint = "load its (path, label) pairs and pass gpupipe.FileList(pairs)"
    elif what == "a YAML file":
        hint = "pass the image folder, or a list file of 'path label' lines"
    if what.endswith("image"):
        hint = image_hint
    elif what.endswith("archive"):
        hint = "unpack it, or read WebDataset shards with gpupipe.sources.WebDataset"
    raise NotAListFile(f"{os.fspath(path)} is {what}, not {expected}" + (f": {hint}" if hint else ""))
