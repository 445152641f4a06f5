"""Labels separated by spaces inside one CSV cell, tab-separated label or pair (Kaggle's ``image_name,tags``
rows: ``haze primary``; ``Id,Target``: ``16 0``): several labels per image, or one class name holding spaces
(``golden retriever``)? Read as one class name each, tags became classes of their own, one per combination."""

from __future__ import annotations

from collections.abc import Sequence

from .listfile import Listing, _at, _label

#: A label of several words: its entry and its words.
_Spaced = tuple[int, list[str]]


def spaced_labels(listing: Listing, multi_label: bool | None, classes: Sequence[str] | None = None) -> None:
    """Settles the labels holding spaces: ``multi_label=True`` reads each word as a label (unless the file
    separates its labels with ``,`` or ``;``, whose labels then may hold spaces, or the label is one of
    ``classes``: a validation list of one label per image), ``False`` each label as one
    class name; by default a label of several words is one class name unless its words look like tags: all
    class indices (``16 0``), or a word at another place in another label (``clear primary``, ``agriculture
    clear primary water``: ``_looks_like_tags``), which is refused.

    Args:
        listing: the entries (their labels split in place with ``multi_label=True``).
        multi_label: ``FileList``'s argument.
        classes: ``FileList``'s argument.

    Raises:
        ValueError: labels that look like tags without ``multi_label``, naming the entries and both ways to
            read them.
    """
    if multi_label is False:
        return
    spaced = [(i, v.split()) for i, v in enumerate(listing.labels) if isinstance(v, str) and len(v.split()) > 1]
    if not spaced:
        return
    if multi_label is True:
        separated = any(isinstance(v, list) and any(isinstance(w, str) and " " in w for w in v) for v in listing.labels)
        named = set(classes or ())
        if not separated:
            for i, words in spaced:
                if listing.labels[i] not in named:
                    listing.labels[i] = [_label(w) for w in words]
        return
    problem = _looks_like_tags(listing, spaced)
    if problem:
        raise ValueError(
            f"FileList: {problem}: if they are several labels per image separated by spaces (as Kaggle's CSV files "
            "write them), pass multi_label=True (or separate them with ','); if each is one class name, pass "
            "multi_label=False"
        )


#: At most this many distinct labels of several words are compared word by word (a bound on a caption-like file).
_COMPARED = 2000


def _looks_like_tags(listing: Listing, spaced: list[_Spaced]) -> str:
    """Why the labels of several words look like tags, or ``""``.

    Class names share a word at one place (``apple pie`` and ``pumpkin pie``: the last; ``tiger`` and ``tiger
    shark``: the first), and a compound noun's word may end one name and start another (``sports car`` and
    ``car wheel``, ``Chevrolet Tahoe Hybrid SUV 2012`` and ``Chevrolet Silverado 1500 Hybrid Crew Cab 2012``);
    tags go wherever the other tags of the image put them: two labels that hold two words each at another
    place, counted from both the start and the end (``clear primary`` and ``agriculture clear primary water``),
    are tags. The refusal names the first label with a word at another place.
    """
    for i, words in spaced:
        if all(w.isascii() and w.isdigit() for w in words):
            return f"{_at(listing, i)}: label {listing.labels[i]!r} holds class indices separated by spaces"
    if not _two_words_moved(spaced):
        return ""
    in_spaced = {word for _, words in spaced for word in words}
    labelled = list(spaced) + [
        (i, [v]) for i, v in enumerate(listing.labels) if isinstance(v, str) and v in in_spaced and " " not in v
    ]
    places: dict[str, dict[tuple[int, int], int]] = {}  # word: {(from the start, from the end): first entry}
    for i, words in labelled:
        for k, word in enumerate(words):
            place, seen = (k, len(words) - k), places.setdefault(word, {})
            j = next((j for (start, end), j in seen.items() if start != place[0] and end != place[1] and j != i), None)
            if j is not None:
                first, other = sorted((i, j))
                return (
                    f"{_at(listing, first)}: label {listing.labels[first]!r} and label {listing.labels[other]!r} "
                    f"({_at(listing, other)}) hold the word {word!r} at different places"
                )
            seen.setdefault(place, i)
    return ""


def _two_words_moved(spaced: list[_Spaced]) -> bool:
    """Whether two distinct labels (of the first ``_COMPARED``) hold two words each at another place, counted
    from both the start and the end (a word twice in one label counts once)."""
    distinct = list(dict.fromkeys(" ".join(words) for _, words in spaced))[:_COMPARED]
    held: dict[str, list[tuple[int, int, int]]] = {}  # word: [(label, from the start, from the end)]
    for n, label in enumerate(distinct):
        words = label.split()
        moved: dict[int, set[str]] = {}  # earlier label: the words of this one at another place in it
        for k, word in enumerate(words):
            for m, start, end in held.get(word, ()):
                if m != n and start != k and end != len(words) - k:
                    moved.setdefault(m, set()).add(word)
                    if len(moved[m]) >= 2:
                        return True
        for k, word in enumerate(words):
            held.setdefault(word, []).append((n, k, len(words) - k))
    return False
