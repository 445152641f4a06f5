"""Where a list file's paths lead: paths written on Windows, and labels separated by spaces read as part of
a path. (``FileList``'s checks that look at the file system; ``listfile`` parses.)"""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from collections.abc import Sequence

from ..errors import plural
from .listfile import Listing, as_list
from .walk import IMAGE_EXTENSIONS, OTHER_IMAGE_EXTENSIONS

logger = logging.getLogger("gpupipe.sources")

#: A Windows drive: ``C:\\`` or ``C:/``.
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")


def windows_separators(listing: Listing, names: list[str]) -> list[str]:
    """Paths written on Windows (``train\\cat\\001.jpg``), read on a system whose separator is ``/``: a
    name holding ``\\`` that is no file is read with ``/`` (a file whose name holds a real ``\\`` is read as
    named); one line says how many. A Windows absolute path (``C:\\...``, ``D:/...``, ``\\\\server\\...``)
    cannot be opened here, and is refused.

    Args:
        listing: the entries (their paths as written, for messages).
        names: their absolute paths.

    Returns:
        The absolute paths to read.

    Raises:
        ValueError: a Windows absolute path, naming its line (or the pair's path) and the fix.
    """
    if os.sep != "/":
        return names
    joined = "\n".join(listing.paths)
    if "\\" not in joined and ":" not in joined:
        return names
    read = list(names)
    turned = []
    for i, path in enumerate(listing.paths):
        if ("\\" in path or _DRIVE.match(path)) and not os.path.lexists(names[i]):
            if _DRIVE.match(path) or path[:2] == "\\\\":
                line = f"{listing.list_file}:{listing.lines[i]}: " if listing.lines[i] else ""
                raise ValueError(
                    f"FileList: {line}{path!r} is a Windows absolute path, which this system cannot open: write "
                    "the paths relative to the list file's folder (or to root=)"
                )
            read[i] = names[i].replace("\\", "/")
            turned.append(i)
    if turned:
        logger.info(
            "FileList: %s: %s written with '\\' (Windows) are read with '/' (first: %s)",
            listing.list_file if listing.list_file is not None else "pairs",
            plural(len(turned), "path"),
            listing.where(turned[0]),
        )
    return read


def unicode_forms(listing: Listing, names: list[str]) -> list[str]:
    """Paths written in another Unicode normal form than the files' names (a macOS archive's files are named in
    NFD, ``e`` and a combining accent; a list written elsewhere in NFC): a name that is no file is read in the
    form that names one; one line says how many.

    Args:
        listing: the entries (for messages).
        names: their absolute paths.

    Returns:
        The absolute paths to read.
    """
    if all(name.isascii() for name in names):
        return names
    read = list(names)
    turned = []
    for i, name in enumerate(names):
        if name.isascii() or os.path.lexists(name):
            continue
        for form in ("NFD", "NFC"):
            other = unicodedata.normalize(form, name)
            if other != name and os.path.lexists(other):
                read[i] = other
                turned.append(i)
                break
    if turned:
        logger.info(
            "FileList: %s: %s written in another Unicode normal form than the files' names (NFC and NFD, as "
            "macOS names files) are read as the files are named (first: %s)",
            listing.list_file if listing.list_file is not None else "pairs",
            plural(len(turned), "path"),
            listing.where(turned[0]),
        )
    return read


def check_space_separated(listing: Listing, names: Sequence[str]) -> None:
    """Refuses a text line whose path (holding a space) is no file while its first word is one: labels
    separated by spaces (``path cat dog``), which would be read as the file ``path cat`` labelled ``dog``.

    Args:
        listing: the list file's entries.
        names: their absolute paths.
    """
    if listing.list_file is None or listing.list_file.suffix.lower() == ".csv":
        return
    for i, (path, name) in enumerate(zip(listing.paths, names)):
        head, *rest = path.split(None, 1)
        if not rest or os.path.lexists(name):
            continue
        if os.path.isfile(name[: len(name) - len(path)] + head):  # name: the folder the path starts from + path
            labels = [str(v) for v in as_list(listing.labels[i])]
            words = [w for w in re.split(r"[\s,;]+", rest[0]) if w] + labels
            raise ValueError(
                f"FileList: {listing.list_file}:{listing.lines[i]}: {path!r} does not exist but {head!r} exists: "
                f"if {', '.join(map(repr, words))} are its labels, separate several labels with ',' "
                f"({head} {','.join(words)}); if they name one class, put a tab between the path and the label "
                f"({head}<TAB>{rest[0]} {', '.join(labels)})"
            )


def refuse_none_found(names: Sequence[str], base: str, list_file: os.PathLike | None) -> None:
    """Refuses a list none of whose files exists (paths relative to another folder, or another machine's
    absolute paths), naming the ``root=`` to pass where the first files are found (``base``, its parent, the
    current folder, or a folder in ``base`` or beside it). One ``stat`` for a list whose first file exists.

    Args:
        names: the absolute paths of the list's files.
        base: the folder relative paths start from.
        list_file: the list file, or ``None`` for pairs.

    Raises:
        ValueError: no file exists, naming the list and, where found, the ``root=`` and the part to drop.
    """
    if not names or any(os.path.lexists(name) for name in names):
        return
    what = f"{list_file} names" if list_file is not None else "of the pairs"
    head = f"FileList: none of the {plural(len(names), 'file')} {what} exists"
    prefix = base.rstrip("/") + "/"
    name = names[0]
    if name.startswith(prefix):  # a relative path, as written (with '/')
        path = name[len(prefix) :]
        rel = [n[len(prefix) :] for n in names[:10] if n.startswith(prefix)]
        found = _holder(base, rel)
        suffixed = None if found is not None else _ending(base, rel)
        if suffixed is not None:
            folder, ending = suffixed
            where = "" if folder == base else f" and root={folder!r}"
            raise ValueError(
                f"{head} ({path!r} is not in {base!r}, where relative paths start); {path + ending!r} is in "
                f"{folder!r}: the list names the files without their extension: pass suffix={ending!r}{where})"
            )
        if found is None:
            raise ValueError(
                f"{head} ({path!r} is not in {base!r}, where relative paths start; pass root= to start them elsewhere)"
            )
        raise ValueError(
            f"{head} ({path!r} is not in {base!r}, where relative paths start); they are in {found!r}: "
            f"pass root={found!r}" + (" (or move the list file there)" if list_file is not None else "")
        )
    parts = name.strip("/").split("/")
    for k in range(1, len(parts)):
        suffix = "/".join(parts[k:])
        found = _holder(base, [suffix])
        if found is not None:
            tail = f" and pass root={found!r}" if found != base else ""
            raise ValueError(
                f"{head} ({name!r} is not there); {suffix!r} is in {found!r}: write the paths without "
                f"{name[: len(name) - len(suffix)]!r}{tail}"
            )
    raise ValueError(
        f"{head} ({name!r} is not there: a path of another machine? write the paths relative to the list file's folder)"
    )


#: The endings tried on a list's paths that name no file (ids without their extension: ``0007`` for ``0007.jpg``).
_ENDINGS = tuple(e for ext in IMAGE_EXTENSIONS + OTHER_IMAGE_EXTENSIONS for e in (ext, ext.upper()))


def _ending(base: str, rel: Sequence[str]) -> tuple[str, str] | None:
    """``(folder, ending)``: the first folder ``_holder`` finds that holds every path of ``rel`` with one of
    ``_ENDINGS`` appended, or ``None``."""
    for ending in _ENDINGS:
        found = _holder(base, [r + ending for r in rel])
        if found is not None:
            return found, ending
    return None


#: At most this many folders in ``base`` (and beside it) are tried as the ``root=`` of a list's relative paths.
_FOLDERS_TRIED = 50


def _holder(base: str, rel: Sequence[str]) -> str | None:
    """The first of ``base``, its parent, the current folder and the folders in ``base`` and beside it that holds
    every path of ``rel``, or ``None``."""
    parent = os.path.dirname(base.rstrip("/")) or "/"
    tried = [base, parent, os.getcwd()]
    for folder in (base, parent):
        try:
            with os.scandir(folder) as entries:
                inside = sorted(e.path for e in entries if not e.name.startswith(".") and e.is_dir())
        except OSError:
            continue
        tried += inside[:_FOLDERS_TRIED]
    return next((t for t in tried if all(os.path.lexists(os.path.join(t, r)) for r in rel)), None)


def refuse_images_elsewhere(who: str, names: Sequence[str], root: str, bad: dict[int, str], listed_in: str) -> None:
    """Refuses a source none of whose images is under ``root``, or nearly none (at most 1 in 20) where another
    folder holds the missing ones: the images folder given is another (the folder above it, as ``det`` for
    ``det/images``), which ``on_error='skip'`` would not mend. Names the folder that holds them (``_holder``:
    ``root``'s folders, its parent's, the current one). A few images found and the others nowhere: a subset
    downloaded, left to ``on_error``.

    Args:
        who: the source, for messages (``"CocoDetection"``).
        names: the images' absolute paths.
        root: the images folder given.
        bad: the scan's reasons, by index.
        listed_in: what names the images (the annotation file).

    Raises:
        ValueError: nearly none of the images is found.
    """
    missing = [names[i] for i, why in sorted(bad.items()) if "No such file" in why]
    found = len(names) - len(missing)
    if not missing or found * 20 > len(names):
        return
    prefix = root.rstrip("/") + "/"
    rel = [name[len(prefix) :] for name in missing[:10] if name.startswith(prefix)]
    how = "none" if not found else f"{found} ({found * 100 / len(names):.1f}%)"
    head = (
        f"{who}: {how} of the {plural(len(names), 'image')} {listed_in} names is under the images folder {root!r} "
        f"({missing[0]!r} is not there)"
    )
    holder = _holder(root, rel) if rel else None
    if holder is not None and holder != root:
        raise ValueError(f"{head}; they are in {holder!r}: pass {holder!r} as the images folder")
    if found:
        return
    raise ValueError(f"{head}: pass the folder that holds the images, where their file_name starts")
