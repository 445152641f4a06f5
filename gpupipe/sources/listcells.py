"""How ``FileList`` tells a list file's cells apart: a header row from a first sample, a bracketed list from a
class named in brackets, and a label from what is no label (an image path, a float, a class and its boxes).

Each check errs towards reading a line as the sample it was before multi-label lists: a first row is a
header only when both its cells are column names, and ``[unk]`` is a list only beside other lists.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("gpupipe.sources")

#: Column names of a header row (lower case, ``_``, ``-`` and spaces dropped; letters only).
HEADER_LABELS = frozenset(
    "label labels labelname labelnames labelid class classes classname classid target targets tag tags category "
    "categories categoryname categoryid annotation annotations y level diagnosis breed species grade".split()
)
HEADER_PATHS = frozenset(
    "path paths file files filename filepath fname image images imagepath imagename imageid imagefile img imgpath "
    "imgname url id ids idcode key name sample sampleid photo picture".split()
)
_SPACERS = str.maketrans("", "", "_- ")
#: Endings of an image file: a label ending so is a path in the label's place.
IMAGE_ENDINGS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".gif")
#: A class and its boxes, as ImageNet's ``LOC_val_solution.csv`` gives them: ``n02119789 255 142 454 329 ...``.
_BOXES = re.compile(r"\S+(?:\s+[-+]?\d+(?:\.\d+)?){4}(?:\s|$)")
#: An integer written as a float (``1.0``): pandas writes an int column that holds a NaN so.
FLOAT_INDEX = re.compile(r"[+-]?[0-9]+\.0*")
#: An integer (``'3'``, as ``str(label)`` writes it).
INTEGER = re.compile(r"[+-]?[0-9]+")
#: A number written in decimal or exponent form (``0.73``, ``1e-3``, ``.5``).
#: What pandas writes for a missing label (``df.astype(str)``: ``nan``; a nullable column: ``<NA>``).
MISSING_LABELS = frozenset({"nan", "NaN", "<NA>"})
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def column_name(cell: str) -> str:
    """``cell`` as a column name (``Image_ID`` -> ``imageid``), or ``""`` when it holds anything but letters
    and ``_ -`` (a digit, a dot, a slash: ``image_0001``, ``a.jpg``, ``class_1`` are samples)."""
    word = cell.strip().lower().translate(_SPACERS)
    return word if word.isalpha() and word.isascii() else ""


def is_header(cells: Sequence[str], either: bool, below: Iterable[str] = ()) -> bool:
    """Whether a first row ``[path, label]`` names its columns: both cells are column names, and one of them
    (``either``; a CSV) or both (a text file) are known ones, or (a CSV) the labels ``below`` it are all class
    indices (``id_code,diagnosis``: the one class name would be the header's)."""
    words = [column_name(c) for c in cells]
    if not all(words):
        return False
    found = (words[0] in HEADER_PATHS, words[1] in HEADER_LABELS)
    if any(found) if either else all(found):
        return True
    return either and all(c.strip().isascii() and c.strip().isdigit() for c in below)


def unquote(text: str) -> str:
    """``text`` without the quotes around it (``'cat'`` -> ``cat``), as a Python list's repr quotes items."""
    return text[1:-1].strip() if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


class Bracketed(list):
    """The one label of a cell in brackets without quotes (``[unk]``): a list beside other lists (pandas'
    ``['cat']``, ``cat,dog``), else the class name as written."""

    def __init__(self, items: list, text: str) -> None:
        super().__init__(items)
        self.text = text


def settle_brackets(labels: list, lists: bool) -> None:
    """Reads each ``Bracketed`` label of ``labels`` (in place) as a list when ``lists`` or when another label
    is a list, else as the class name it is written as."""
    if not any(isinstance(v, Bracketed) for v in labels):
        return
    lists = lists or any(isinstance(v, list) and not isinstance(v, Bracketed) for v in labels)
    for i, v in enumerate(labels):
        if isinstance(v, Bracketed):
            labels[i] = list(v) if lists else v.text


def check_label(text: str, list_file: Path, lineno: int) -> None:
    """Refuses a label cell that is no label: an image path (columns swapped, or CUB's ``images.txt``, which
    is ``id path``), or a class followed by box coordinates.

    Raises:
        ValueError: naming the file and line.
    """
    if text in MISSING_LABELS:
        raise ValueError(
            f"FileList: {list_file}:{lineno}: the label {text!r} is a missing value (as pandas writes NaN): "
            "drop the rows without a label (df.dropna(subset=['label'])) before writing the list"
        )
    if text.lower().endswith(IMAGE_ENDINGS):
        raise ValueError(
            f"FileList: {list_file}:{lineno}: the label {text!r} is an image path: a list file gives 'path label' "
            "(path first; CUB's images.txt is 'id path': join it with image_class_labels.txt on the id)"
        )
    if " " in text and _BOXES.match(text):
        raise ValueError(
            f"FileList: {list_file}:{lineno}: the label {text[:60]!r} is a class followed by box coordinates "
            f"(ImageNet's LOC_val_solution.csv): give one class per image, here {text.split()[0]!r}"
        )


#: Said of a list-file line that names a path without a label.
NO_LABEL = (
    ": the line has no label; give each image its label, or, to read images without labels (to predict on), "
    "pass their paths, gpupipe.FileList([path, ...]), or their folder, gpupipe.FileList(folder): each label is then "
    "the image's place in the list"
)


def columns_message(row: list[str], lineno: int, rows: Sequence[tuple[int, list[str]]] = ()) -> str:
    """Why a CSV row that is not ``path,label`` is refused: ``";"`` separators, extra columns (of 0s and 1s, one
    per class, as its first rows ``rows`` show), several labels."""
    if len(row) == 1 and ";" in row[0]:
        return (
            ": the CSV is separated by ';' (as Excel saves it where ',' is the decimal mark): save it with ',', "
            "or as a text list file"
        )
    if len(row) == 1:
        return NO_LABEL
    if len(row) <= 2:
        return ""
    said = f": {len(row)} columns; FileList reads two, the path and the label"
    data = next((r for _, r in rows[:2] if len(r) == len(row) and not all(column_name(c) for c in r)), None)
    if data is not None and all(c.strip() in ("0", "1", "0.0", "1.0") for c in data[1:]):
        return (
            f"{said}: its last {len(row) - 1} columns hold 0s and 1s, one per class (one-hot or multi-hot): give "
            "each image its class in one column (pandas: df['label'] = df[classes].idxmax(axis=1)), or its list "
            "of classes (several labels: gpupipe.FileList([(path, [c for c in classes if row[c] == 1]), ...], "
            "classes=classes))"
        )
    if lineno == 1 or all(column_name(c) for c in row):
        return said + _keep_two(rows[0][1] if rows and rows[0][0] == lineno else row)
    return f"{said}: for several labels, quote them (\"cat,dog\") or separate them with ';' (cat;dog)"


#: Columns that say which split or fold a row belongs to (Kaggle's ``fold``, fastai's ``is_valid``...).
SPLIT_COLUMNS = ("split", "fold", "kfold", "folds", "is_valid", "valid", "subset", "set", "partition", "phase")


def _keep_two(header: list[str]) -> str:
    """How to write the two columns FileList reads from a CSV whose first row ``header`` names more columns: a
    pandas index column (an empty first name) is dropped, one split's rows are kept by its split column."""
    names = [c.strip() for c in header]
    if not all(column_name(n) for n in names[1:]):  # a row of data, not of names
        return ": keep those two (pandas: df[[PATH_COLUMN, LABEL_COLUMN]].to_csv(path, index=False))"
    if names and not names[0]:
        return ": its first column is a pandas index column (no name): write the list with index=False"
    kept = [n for n in names if n.lower() not in SPLIT_COLUMNS][:2] or names[:2]
    split = next((n for n in names if n.lower() in SPLIT_COLUMNS), None)
    rows = f"df[df[{split!r}] == VALUE]" if split else "df"
    what = f"one {split} at a time, " if split else ""
    return f": keep those two, {what}as pandas writes them: {rows}[{kept!r}].to_csv(path, index=False)"


def float_label_hint(label: object) -> str:
    """Why a pair's float label is refused: a missing value (NaN), or an index that pandas holds as a float."""
    if isinstance(label, float) and label != label:
        return ": a missing value (NaN): leave out the images without a label (pandas: df.dropna(subset=[...]))"
    if isinstance(label, float) and label.is_integer():
        return ": a class index as a float, as pandas holds an int column with a NaN: pass int(label)"
    return ""


def float_indices_message(labels: Sequence, where: str) -> str:
    """A refusal for class names that are all numbers: integers written as floats (``1.0``, read as names they
    would be numbered from 0 in sorted order: ``1.0`` would be class 0), or values (``0.73``: regression
    targets, each value a class of its own), or ``""``."""
    if not labels or not isinstance(labels[0], str) or not NUMBER.fullmatch(labels[0]):
        return ""
    if not all(isinstance(v, str) and NUMBER.fullmatch(v) for v in labels):
        return ""
    if all(INTEGER.fullmatch(v) for v in labels):  # names that are numbers (``str(label)``): class names
        return ""
    if all(FLOAT_INDEX.fullmatch(v) or INTEGER.fullmatch(v) for v in labels):
        return (
            f"FileList: {where}: the label {labels[0]!r} is a class index written as a float, as every label is "
            "(pandas writes an int column that holds a NaN so): write them as ints (df['label'].astype(int)), or "
            "pass classes=[...] to read them as class names"
        )
    return (
        f"FileList: {where}: the label {labels[0]!r} is a number, as every label is: FileList reads class labels, "
        "and each value would be a class of its own, numbered in sorted order. For targets that are values "
        "(regression), read the images without labels, gpupipe.FileList(paths), whose labels are their places in "
        "the list, and take values[labels] for each batch; to read them as class names, pass classes=[...]"
    )


def refuse_multi_hot(rows: list[list], listing: Any) -> None:
    """Rows all of one length (2 or more), of 0s and 1s only, one with a value twice, are multi-hot rows: read as
    class indices they would be the classes {0, 1} (``listing``: a ``listfile.Listing``, naming the entry).

    Raises:
        ValueError: naming the first row with a value twice.
    """
    length = len(rows[0])
    if length < 2 or any(len(r) != length for r in rows):
        return
    if any(any(v not in (0, 1) or isinstance(v, str) for v in r) for r in rows):
        return
    twice = next((i for i, r in enumerate(rows) if len(set(r)) < len(r)), None)
    if twice is not None:
        raise ValueError(
            f"FileList: the labels look like multi-hot rows (every row {length} values of 0 and 1; "
            f"{listing.where(twice)} gives {rows[twice]!r}); labels are class indices: pass "
            "np.flatnonzero(row).tolist() for each row"
        )


def digit_names(classes: Sequence[str]) -> dict[int, int] | None:
    """``{number: class index}`` when ``classes`` are all integers (ASCII digits, a sign allowed) other than
    ``"0" .. "n-1"``: a list file's label ``2`` is then the class named ``2`` (of ``['1', '10', '2']``, as
    ``sorted(df.label.astype(str).unique())`` gives them; ``-1`` of ``['-1', '1']``), not the class at place 2;
    else ``None``.

    Raises:
        ValueError: two class names of one number (``'1'`` and ``'01'``).
    """
    if not all(isinstance(c, str) and c.isascii() and INTEGER.fullmatch(c) for c in classes):
        return None
    if all(c == str(i) for i, c in enumerate(classes)):
        return None
    table: dict[int, int] = {}
    for i, c in enumerate(classes):
        j = table.setdefault(int(c), i)
        if j != i:
            raise ValueError(f"FileList: classes=: {classes[j]!r} and {c!r} are both the number {int(c)}")
    return table


def warn_fixed_sets(rows: list[list], listing: Any) -> None:
    """Warns when a list file's several labels per image never come apart, each label always with the same
    others (``tiger, Panthera tigris``: ImageNet's synset names, which hold commas), over two or more kinds of
    rows: each is likely one class name holding commas (``listing``: a ``listfile.Listing``)."""
    if listing.list_file is None or not any(len(r) > 1 for r in rows):
        return
    together: dict[Any, frozenset] = {}
    for row in rows:
        held = frozenset(row)
        if any(together.setdefault(v, held) != held for v in row):
            return
    if len(set(together.values())) < 2:
        return
    i = next(i for i, r in enumerate(rows) if len(r) > 1)
    logger.warning(
        "FileList: %s: the several labels of each line never come apart (%s, line %d): if each line names one "
        "class whose name holds commas (ImageNet's 'tiger, Panthera tigris'), keep one name per class "
        "(df.label.str.split(',').str[0]); pass multi_label=True to read them as several labels",
        listing.list_file,
        ", ".join(map(repr, rows[i])),
        listing.lines[i],
    )


def by_value_message(labels: Sequence, negative: bool) -> str:
    """How to read a list file's ``negative`` labels (``-1`` and ``1``: CelebA's attributes) as the classes
    they name, or ``""`` (over 10 values)."""
    values = sorted(set(labels)) if negative else []
    if not values or len(values) > 10:
        return ""
    return f": to read each number as the class it names, pass classes={[str(v) for v in values]!r}"


def warn_from_one(labels: Sequence[int], listing: Any) -> None:
    """Warns when class indices count from 1 (each of ``1 .. n`` used, ``0`` not; Oxford Pets', CUB's and
    Flowers-102's lists number their classes so): class ``'0'`` then holds no image and there is one class more
    than the dataset has (``listing``: a ``listfile.Listing``)."""
    used = set(labels)
    top = max(used)
    if 0 in used or top < 2 or len(used) != top:
        return
    if listing.list_file is not None:
        where = str(listing.list_file)
        fix = (
            f"to number them from 0, pass classes={[str(i) for i in range(1, top + 1)]!r} if short, or "
            f"[str(i) for i in range(1, {top + 1})]: each number is then the class it names"
        )
    else:
        where, fix = "pairs", "to number them from 0, give each label minus 1"
    logger.warning(
        "FileList: %s: the labels count from 1 (1..%d, none is 0): class '0' holds no image, and there are %d "
        "classes; %s",
        where,
        top,
        top + 1,
        fix,
    )
