"""What ``WebDataset`` is given, made plain: the tars a shard spec names (brace patterns, ``::``-joined
patterns, local globs, folders), the label member as written (``"CLS"``, ``".cls"``), and what a file that
is no tar is instead."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from ..errors import plural
from ..remote import expand_braces, is_url
from ..remote.fetch import is_html_page
from ..remote.urls import redact, within_pattern
from ..shards.tarindex import TarIndex
from .sniff import SNIFF_BYTES, kind_of

_GLOB = frozenset("*?[")
#: ``::`` joining patterns, not one inside brackets (an IPv6 host: ``http://[::1]:8000/``).
_JOIN = re.compile(r"::(?![^\[]*\])")


def expand_shards(urls) -> list[str]:
    """The tars ``urls`` names, in order: each pattern's ``::``-joined parts (as in webdataset), their braces
    expanded, a local glob (``*``, ``?``, ``[...]``) in name order, a local folder's ``.tar`` files in name order.

    Raises:
        ValueError: no tar, a malformed pattern, a glob matching nothing, a folder without ``.tar`` file.
    """
    items = [urls] if isinstance(urls, (str, os.PathLike)) else list(urls)
    out: list[str] = []
    for item in items:
        for text in _JOIN.split(item) if isinstance(item, str) else [os.fspath(item)]:
            if not text.strip():  # '', 'a.tar::': not the current folder
                raise ValueError(f"WebDataset: an empty tar name in {redact(str(item))!r}")
            for e in expand_braces(text):
                within_pattern(text, e)
                out.extend(_tars(e))
    if not out:
        raise ValueError("WebDataset: no tar given")
    return out


def _tars(e: str) -> list[str]:
    """The tars one expanded name stands for."""
    if is_url(e):
        return [e]
    path = Path(e).expanduser()
    if path.is_dir():  # a folder of shards: its tars, in name order
        tars = sorted(str(p.absolute()) for p in path.glob("*.tar") if p.name[0] != ".")
        if not tars:
            packed = sum(1 for p in path.glob("*.t*gz") if p.name.endswith((".tar.gz", ".tgz")))
            hint = (
                f": it holds {plural(packed, '.tar.gz file')}: decompress them (gunzip; DALI reads plain tars)"
                if packed
                else ""
            )
            raise ValueError(f"WebDataset: no .tar file in the folder {e}{hint}")
        return tars
    if _GLOB & set(e) and not path.exists():  # a glob, as the shell would expand it
        found = sorted(str(Path(p).absolute()) for p in glob.glob(str(path)) if Path(p).is_file())
        if not found:
            raise ValueError(f"WebDataset: no file matches the pattern {e}")
        return found
    return [str(path.absolute())]


def label_member(label: str) -> str:
    """``label`` with its member's extension as members' are matched (lower case, no leading dot):
    ``"CLS"`` and ``".cls"`` are ``"cls"``; ``"JSON:Meta.Label"`` is ``"json:Meta.Label"`` (the field kept).

    Raises:
        ValueError: ``"json"`` without a field, or no extension at all.
    """
    if not isinstance(label, str):
        raise ValueError(f"WebDataset: label must be a member's extension such as 'cls', got {label!r}")
    ext, sep, field = label.strip().partition(":")
    ext = ext.strip().lstrip(".").lower()
    if ext == "json" and not field.strip():
        raise ValueError(
            f"WebDataset: label={label!r} reads a field of the .json member: give it as 'json:<field>' "
            "(label='json:label' for {\"label\": 3}, 'json:a.b' for a nested field)"
        )
    if not ext or sep and ext != "json":
        raise ValueError(f"WebDataset: label must be 'cls', 'txt', another extension or 'json:<field>', got {label!r}")
    return f"{ext}:{field.strip()}" if sep else ext


def name_what_it_is(index: TarIndex, path: str) -> None:
    """Rewrites the problem of a file that is no tar at all to say what it is (a ``.tar.gz``, a zip, an HTML
    page, a text list of shards)."""
    for k, (where, reason) in enumerate(index.problems):
        if where == path and reason.startswith("not a readable tar after 0 members"):
            try:
                with open(path, "rb") as fh:
                    head = fh.read(SNIFF_BYTES)
            except OSError:
                head = b"\0"
            what = kind_of(head)
            if what is None and is_html_page(head):
                index.problems[k] = (where, "an HTML page, not a tar (a server's error or sign-in page?)")
            elif what is None and head.strip():
                index.problems[k] = (
                    where,
                    "a text file, not a tar (a list of shards?): pass the tars it names, as a list "
                    "(gpupipe.WebDataset(Path(LIST).read_text().split())) or a brace pattern",
                )
            elif what is not None and what != "a tar archive":
                hint = "decompress it: DALI reads uncompressed tars" if what.endswith("archive") else "not a shard"
                index.problems[k] = (where, f"{what}, not a tar: {hint}")


__all__ = ["expand_shards", "label_member", "name_what_it_is"]
