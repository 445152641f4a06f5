"""What ``FileList`` reads: list files (text or CSV) and ``(path, label)`` pairs, as checked labels.

Each entry keeps where it came from (the list file and line, or the pair's
path), so that every refusal names it. A label is a class index (an int; in
a list file, ASCII digits only) or a class name (a str); a list of them is a
label set (multi-label), each label counted once.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import plural
from ..fileio import UnreadableFile, read_file
from .base import numbered_classes
from .listcells import (
    NO_LABEL,
    Bracketed,
    by_value_message,
    check_label,
    columns_message,
    digit_names,
    float_indices_message,
    float_label_hint,
    is_header,
    refuse_multi_hot,
    settle_brackets,
    unquote,
    warn_fixed_sets,
    warn_from_one,
)
from .sniff import check_list_file, decode_text

logger = logging.getLogger("gpupipe.sources")

PathLike = str | os.PathLike
Label = int | str
LabelArg = Label | list[Label]

_WORD = re.compile(r"\S+")
_SEPARATORS = (",", ";")
#: A class index in a list file: ASCII digits (``int()`` also takes ``1_0``, Arabic and full-width digits).
_INDEX = re.compile(r"[+-]?[0-9]+")


@dataclass
class Listing:
    """``FileList``'s entries: per entry its path (as given), its label or label list, and its line in
    ``list_file`` (0 for pairs)."""

    paths: list[str] = field(default_factory=list)
    labels: list[LabelArg] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    list_file: Path | None = None

    def add(self, path: str, label: LabelArg, line: int = 0) -> None:
        self.paths.append(path)
        self.labels.append(label)
        self.lines.append(line)

    def where(self, i: int) -> str:
        """Entry ``i`` in messages: ``'path' (list.txt:3)``, or ``'path'`` for a pair."""
        return f"{self.paths[i]!r} ({self.list_file}:{self.lines[i]})" if self.lines[i] else repr(self.paths[i])


def read_pairs(entries: Iterable[tuple[PathLike, Any]]) -> Listing:
    """``(path, label)`` pairs; a label is an int or a str, a list (tuple, set, array, tensor) of those is a
    label set; NumPy and torch values are read as their Python values.

    Raises:
        ValueError: a label that is neither a class index nor a class name, naming its path.
    """
    listing = Listing()
    for path, label in entries:
        listing.add(os.fspath(path), _plain(label, os.fspath(path)))
    joined = [(i, v) for i, v in enumerate(listing.labels) if isinstance(v, str) and ("," in v or ";" in v)]
    if joined:
        i, v = joined[0]
        logger.warning(
            "FileList: label %r of %s is one class name (%d such labels); several labels per image are a list: %r",
            v,
            listing.where(i),
            len(joined),
            [p.strip() for p in v.replace(";", ",").split(",")],
        )
    return listing


def _plain(label: Any, path: str) -> LabelArg:
    if hasattr(label, "tolist") and not isinstance(label, str):  # NumPy / torch values and arrays
        label = label.tolist()
    if isinstance(label, (set, frozenset)):
        try:
            label = sorted(label)
        except TypeError:
            label = sorted(label, key=repr)
    if isinstance(label, (list, tuple)):
        return [_one(v.tolist() if hasattr(v, "tolist") else v, path) for v in label]
    return _one(label, path)


def _one(label: Any, path: str) -> Label:
    if isinstance(label, str) or (isinstance(label, int) and not isinstance(label, bool)):
        return label
    raise ValueError(
        f"FileList: label {label!r} of {path!r} is neither a class index (int) nor a class name (str): labels "
        f"must be all ints or all class names{float_label_hint(label)}"
    )


def read_list_file(list_file: Path, empty: bool = False) -> Listing:
    """Parses a text (``path label``) or CSV (``path,label``) list file (``empty``: a CSV row's empty label
    cell is no label, not an error).

    Raises:
        ValueError: a malformed line, naming the file and line.
    """
    check_list_file(list_file, "a list file (text, one 'path label' per line)")
    try:
        text = decode_text(read_file(str(list_file)))  # a BOM (Excel, Notepad) is dropped; UTF-16 read
    except (UnreadableFile, UnicodeDecodeError) as err:  # a UTF-16 byte-order mark before other bytes
        raise ValueError(f"FileList: {list_file}: {err.reason if isinstance(err, UnreadableFile) else err}") from None
    listing = Listing(list_file=list_file)
    if list_file.suffix.lower() == ".csv":
        rows = [
            (i, row)
            for i, row in enumerate(csv.reader(io.StringIO(text, newline="")), 1)
            if any(c.strip() for c in row)
        ]
        for _, row in rows:
            while len(row) > 2 and not row[-1].strip():  # the empty cells Excel leaves after the last column
                row.pop()
        below = (row[1] for _, row in rows[1:] if len(row) == 2)
        if rows and len(rows[0][1]) == 2 and is_header(rows[0][1], either=True, below=below):
            logger.info("FileList: %s:%d %r is read as a header, not as a sample", list_file, *rows[0])
            rows = rows[1:]
        for lineno, row in rows:
            if len(row) != 2 or not row[0].strip():
                hint = columns_message(row, lineno, rows)
                raise ValueError(f"FileList: {list_file}:{lineno}: expected 'path,label', got {row!r}{hint}")
            listing.add(row[0].strip(), _labels(row[1].strip(), list_file, lineno, empty), lineno)
        settle_brackets(listing.labels, empty)
        return listing
    paths, labels, lines = listing.paths, listing.labels, listing.lines
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] == "#":
            continue
        if "\t" in line:  # tab-separated: the label may hold spaces (golden retriever)
            parts = [cell.strip() for cell in line.split("\t") if cell.strip()]
            if len(parts) > 2:
                hint = columns_message(parts, 1) if not paths else ""  # a first row of names: which to keep
                raise ValueError(f"FileList: {list_file}:{lineno}: expected 'path<TAB>label', got {parts!r}{hint}")
        else:
            parts = _split_line(line) if "," in line or ";" in line else line.rsplit(None, 1)
        if len(parts) != 2:
            hint = NO_LABEL if len(parts) == 1 else ""
            raise ValueError(f"FileList: {list_file}:{lineno}: expected 'path label', got {line!r}{hint}")
        if not paths and is_header(parts, either=False):
            logger.info("FileList: %s:%d %r is read as a header, not as a sample", list_file, lineno, parts)
            continue
        path, label = parts
        paths.append(path)
        labels.append(int(label) if label.isdigit() and label.isascii() else _labels(label, list_file, lineno))
        lines.append(lineno)
    settle_brackets(labels, empty)
    return listing


def _split_line(line: str) -> list[str]:
    """``[path, labels]`` of a text line with separated labels: the labels are the last words joined by ``,``
    or ``;`` with spaces allowed around them (``cat, dog``), the path (which may hold spaces) the words before
    (at least one). One pass from the end, no backtracking."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(line)]
    if len(words) < 2:
        return [line]
    k = len(words) - 1
    while k > 1 and (line[words[k - 1][1] - 1] in _SEPARATORS or line[words[k][0]] in _SEPARATORS):
        k -= 1
    return [line[: words[k - 1][1]], line[words[k][0] :]]


def _labels(text: str, list_file: Path, lineno: int, empty: bool = False) -> LabelArg:
    """A cell's label, or its labels (joined by ``,`` or ``;``, or in brackets as pandas writes a list:
    ``['cat', 'dog']``, quotes dropped; ``[]``: none; ``[unk]``: a ``Bracketed`` list, settled once the whole
    file is read); ``empty``: an empty cell is no label.

    Raises:
        ValueError: an empty label, or a cell that is no label (an image path, a class and its boxes).
    """
    if not text:
        if empty:
            return []
        raise ValueError(f"FileList: {list_file}:{lineno}: the label is empty")
    listed = text[0] == "[" and text[-1] == "]"
    inner = text[1:-1].strip() if listed else text
    if listed and not inner:
        return []
    if not listed and "," not in text and ";" not in text:
        check_label(text, list_file, lineno)
        return _label(text)
    raw = [p.strip() for p in inner.replace(";", ",").split(",")]
    parts = [unquote(p) for p in raw]
    if not all(parts):
        raise ValueError(f"FileList: {list_file}:{lineno}: empty label in {text!r}")
    for part in parts:
        check_label(part, list_file, lineno)
    if listed and len(raw) == 1 and raw[0] == parts[0] and not _INDEX.fullmatch(parts[0]):
        return Bracketed([parts[0]], text)  # [unk]: a class name unless the file has lists
    return [_label(p) for p in parts]


def _label(text: str) -> Label:
    return int(text) if (text.isascii() and text.isdigit()) or _INDEX.fullmatch(text) else text


def merge_repeated(listing: Listing, names: list[str], multi_label: bool | None) -> list[str]:
    """An image listed more than once (Open Images' long form: one line per image and label): with
    ``multi_label=True`` its entries become one, at its first place, with every label; otherwise entries with
    other labels are refused (listed twice alike, it is read twice).

    Args:
        listing: the entries (merged in place).
        names: their absolute paths.

    Returns:
        The absolute paths of the entries left.

    Raises:
        ValueError: an image listed with other labels and ``multi_label`` not ``True``, naming both entries.
    """
    joined = "\n".join(names)
    keys = [os.path.normpath(n) for n in names] if "/." in joined or "//" in joined or os.sep != "/" else names
    if len(set(keys)) == len(keys):
        return names
    first: dict[str, int] = {}
    alike: list[tuple[int, int]] = []
    for i, key in enumerate(keys):
        j = first.setdefault(key, i)
        if j == i:
            continue
        alike.append((j, i))
        a, b = listing.labels[j], listing.labels[i]
        one_kind = len({isinstance(v, str) for v in as_list(a) + as_list(b)}) < 2  # else: numbering says it
        if multi_label is not True and one_kind and set(as_list(a)) != set(as_list(b)):
            if listing.list_file is None:
                said = f"{a!r} and {b!r} (entries {j} and {i})"
            else:
                shown = [", ".join(map(repr, as_list(v))) for v in (a, b)]
                said = (
                    f"on line {listing.lines[j]} ({shown[0]}) and line {listing.lines[i]} ({shown[1]}) of "
                    f"{listing.list_file}"
                )
            raise ValueError(
                f"FileList: {listing.paths[i]!r} is listed with other labels{':' if listing.list_file is None else ''} "
                f"{said}: give an image's labels together ([...] in a pair, 'path cat,dog' in a list file), or pass "
                "multi_label=True to merge an image's entries into one label set"
            )
    if multi_label is not True:
        logger.warning(
            "FileList: %s listed more than once with the same labels, read as often as listed (first: %s and %s)",
            plural(len({j for j, _ in alike}), "image"),
            *map(listing.where, alike[0]),
        )
        return names
    merged: dict[str, int] = {}
    keep: list[int] = []
    for i, key in enumerate(keys):
        j = merged.setdefault(key, i)
        if j == i:
            listing.labels[i] = as_list(listing.labels[i])
            keep.append(i)
        else:
            listing.labels[j] = as_list(listing.labels[j]) + as_list(listing.labels[i])  # type: ignore[operator]
    listing.paths = [listing.paths[i] for i in keep]
    listing.labels = [listing.labels[i] for i in keep]
    listing.lines = [listing.lines[i] for i in keep]
    return [names[i] for i in keep]


def as_list(label: LabelArg) -> list[Label]:
    """``label`` as a list: a label set as it is, one label as a list of one."""
    return list(label) if isinstance(label, list) else [label]


def label_sets(listing: Listing, multi_label: bool | None) -> list[list[Label]] | None:
    """Each entry's label set, each label once, if the listing is multi-label (``multi_label``, or by default
    a list of labels on some entry), else ``None``.

    Raises:
        ValueError: several labels (or none) on an entry while ``multi_label`` is ``False``; rows of 0s and
            1s (multi-hot rows, not class indices); each naming the entry.
    """
    if multi_label not in (True, False, None):
        raise ValueError(f"FileList: multi_label must be True, False or None, got {multi_label!r}")
    listed = [i for i, v in enumerate(listing.labels) if isinstance(v, list)]
    if multi_label is False:
        for i in listed:
            row = as_list(listing.labels[i])
            if len(row) != 1:
                said = f"several labels {row!r}" if row else "no label"
                raise ValueError(f"FileList: {said} of {listing.where(i)}, but multi_label=False")
        listing.labels = [v[0] if isinstance(v, list) else v for v in listing.labels]
        return None
    if multi_label is None and not listed:
        return None
    rows = [as_list(v) for v in listing.labels]
    refuse_multi_hot(rows, listing)
    if multi_label is None:
        warn_fixed_sets(rows, listing)
    return [list(dict.fromkeys(row)) for row in rows]


def numbering(
    labels: Sequence[Label], owners: Sequence[int], listing: Listing, classes: Sequence[str] | None
) -> tuple[list[str], Callable[[Label], int]]:
    """Class names and a function from a label to its class index.

    Args:
        labels: every label (of every entry, flattened).
        owners: per label, its entry in ``listing`` (for messages).
        listing: the entries.
        classes: the user's class names, or ``None`` (sorted names, or ``"0" .. str(largest index)``).

    Raises:
        ValueError: indices mixed with names, a name not among ``classes``, an index outside them, a class
            named twice, or no labels at all without ``classes``; naming the entry.
    """
    if classes is not None:
        classes = list(classes)
        seen: set[str] = set()
        twice = next((c for c in classes if c in seen or seen.add(c)), None)  # type: ignore[func-returns-value]
        if twice is not None:
            raise ValueError(f"FileList: classes={classes[:10]} names {twice!r} twice: each class needs one name")
    elif not labels:
        raise ValueError("FileList: no labels at all: pass classes=[...] to name the classes")
    if not labels:
        return list(classes or ()), int
    first = isinstance(labels[0], str)
    other = next((k for k, v in enumerate(labels) if isinstance(v, str) is not first), None)
    if other is not None:
        as_text = [str(v) for v in labels]  # values (0.5 beside 1): a number, not a mix of indices and names
        problem = float_indices_message(as_text, _at(listing, owners[0])) if classes is None else ""
        if problem:
            raise ValueError(problem)
        kinds = ("class index", "class name")
        raise ValueError(
            f"FileList: label {labels[other]!r} of {listing.where(owners[other])} is a {kinds[not first]}, but "
            f"label {labels[0]!r} of {listing.where(owners[0])} is a {kinds[first]}: labels must be all ints or "
            "all class names"
        )
    if first and classes is None:
        problem = float_indices_message(labels, _at(listing, owners[0]))
        if problem:
            raise ValueError(problem)
    named = digit_names(classes) if classes is not None and listing.list_file is not None and not first else None
    if not first and named is None:
        largest = labels.index(max(labels))  # type: ignore[type-var]  # max() and index() run in C: 1M lines
        inferred = classes is None
        if classes is None:
            classes = numbered_classes(int(labels[largest]), "FileList", f"of {listing.where(owners[largest])}")
        if min(labels) < 0 or int(labels[largest]) >= len(classes):  # type: ignore[type-var, operator]
            bad = next(k for k, v in enumerate(labels) if not 0 <= int(v) < len(classes))
            raise ValueError(
                f"FileList: label {labels[bad]} of {listing.where(owners[bad])} is outside the class range "
                f"0..{len(classes) - 1}"
                + by_value_message(labels, listing.list_file is not None and int(labels[bad]) < 0)
            )
        if inferred:
            warn_from_one(labels, listing)  # type: ignore[arg-type]
        return list(classes), int
    if classes is None:
        classes = sorted(set(labels))  # type: ignore[arg-type]
    table = named or {c: i for i, c in enumerate(classes)}  # type: ignore[misc]
    unknown = next((k for k, v in enumerate(labels) if v not in table), None)
    if unknown is not None:
        missing = sorted({v for v in labels if v not in table})  # type: ignore[type-var]
        raise ValueError(
            f"FileList: labels {missing[:5]} are not among classes {list(classes)[:10]} (label "
            f"{labels[unknown]!r} of {listing.where(owners[unknown])}"
            + (f", and {len(missing) - 1} more)" if len(missing) > 1 else ")")
        )
    return list(classes), table.__getitem__  # type: ignore[return-value]


def _at(listing: Listing, i: int) -> str:
    """Entry ``i`` in a refusal's first words: ``list.txt:3``, or its path for a pair."""
    return f"{listing.list_file}:{listing.lines[i]}" if listing.lines[i] else repr(listing.paths[i])
