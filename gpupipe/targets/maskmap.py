"""A user's table from what a mask file stores to class ids (``SegmentationFolder(mask_map=...)``).

Two kinds of table, one per kind of mask:

* values: ``{stored value: class id}`` for gray masks (1 to 16 bits, the stored samples, 0..65535) and
  palette masks (the palette indices); Cityscapes' ``labelIds`` to its ``trainIds``;
* colours: ``{(r, g, b): class id}`` for colour-coded masks (an 8-bit RGB PNG, an opaque RGBA PNG, or
  a palette PNG read by its palette's colours, its transparency ignored); CamVid's colours.

A value or colour the table does not list makes its mask a bad sample, named with the values: a table
that leaves something out is never filled in silently (map what you ignore to ``ignore_index``).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .maskfiles import MASK_DEPTHS, decode_mask, header_problem, png_layout

#: The stored values a value table may list (a 16-bit gray PNG's range).
_MAX_VALUE = 65535


class MaskMap:
    """A checked ``{stored value or (r, g, b): class id}`` table.

    Args:
        table: the user's mapping (see the module docstring).

    Raises:
        ValueError: a table that is not a dict, is empty, mixes values and colours, or holds a key or id
            out of range (each message names ``mask_map``).
    """

    def __init__(self, table: Mapping) -> None:
        if not isinstance(table, Mapping):
            raise ValueError(
                f"mask_map must be a dict {{stored value: class id}} or {{(r, g, b): class id}}, got "
                f"{type(table).__name__} (a lookup list is dict(enumerate(lut)))"
            )
        if not table:
            raise ValueError("mask_map is empty: give each value (or colour) the masks hold its class id")
        colours = [isinstance(k, (tuple, list)) for k in table]
        if any(colours) and not all(colours):
            raise ValueError("mask_map must map either stored values (ints) or colours ((r, g, b)), not both")
        self.colours = all(colours)
        pairs: dict[int, int] = {}
        for key, value in table.items():
            code = _colour_code(key) if self.colours else _value_key(key)
            if not is_int(value) or not 0 <= int(value) <= 255:
                raise ValueError(f"mask_map[{key!r}] is {value!r}: class ids in 0..255 only (ignore_index included)")
            pairs[code] = int(value)
        self.pairs = pairs
        self._keys = np.array(sorted(pairs), np.int64)
        self._ids = np.array([pairs[k] for k in self._keys.tolist()], np.uint8)
        # values: one lookup over every 16-bit value (-1: not listed), indexed by the stored samples directly
        self._lut = np.full(_MAX_VALUE + 1, -1, np.int16)
        if not self.colours:
            self._lut[self._keys] = self._ids

    def ids(self) -> set[int]:
        """The class ids the table gives."""
        return set(self.pairs.values())

    def apply(self, data: bytes) -> np.ndarray:
        """The ``(H, W)`` uint8 class ids of the encoded mask ``data`` through the table.

        Raises:
            ValueError: a mask of the wrong kind for the table, or holding values it does not list.
            OSError, SyntaxError: PIL cannot read the data.
        """
        if self.colours:
            stored = self._colour_codes(data)
            where = np.minimum(np.searchsorted(self._keys, stored), len(self._keys) - 1)
            listed = self._keys[where] == stored
            if listed.all():
                return self._ids[where]
            missing = np.unique(stored[~listed])
        else:
            stored = self._stored(data)
            present = np.flatnonzero(np.bincount(stored.ravel(), minlength=1))  # the values it holds, cheaply
            missing = present[self._lut[present] < 0]
            if not len(missing):
                top = int(present[-1]) + 1 if len(present) else 1
                return np.take(self._lut[:top].astype(np.uint8), stored)
        shown = ", ".join(_describe(int(v), self.colours) for v in missing[:6])
        more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
        raise ValueError(
            f"it holds {shown}{more}, which mask_map does not list (map each to a class id, or to ignore_index)"
        )

    def __repr__(self) -> str:
        """One line naming the table by its content (the packer's ``sources.tsv`` and journal: another
        table is another input)."""
        digest = hashlib.sha256(repr(sorted(self.pairs.items())).encode()).hexdigest()[:12]
        return f"MaskMap({len(self.pairs)} {'colours' if self.colours else 'values'}, {digest})"

    def header_problem(self, head: bytes) -> str:
        """Why a mask file (its first bytes) cannot be read through this table; ``''`` when it can."""
        layout = png_layout(head)
        if self.colours:
            if layout is None:
                return "is not a PNG"
            if layout in ((2, 8), (6, 8)) or (layout[0] == 3 and layout[1] in MASK_DEPTHS[3]):
                return ""
            return (
                f"is not an 8-bit RGB(A) or a palette PNG (colour type {layout[0]}, {layout[1]}-bit): mask_map maps "
                "colours"
            )
        problem = header_problem(head)
        if layout is not None and layout[0] in (2, 6):
            problem += " (a colour mask needs a mask_map of colours {(r, g, b): class id})"
        return problem

    def _stored(self, data: bytes) -> np.ndarray:
        layout = png_layout(data)
        if layout is not None and layout[0] == 2:
            raise ValueError("a colour (RGB) mask needs a mask_map of colours {(r, g, b): class id}")
        return _raw_values(data)

    def _colour_codes(self, data: bytes) -> np.ndarray:
        from PIL import Image

        from ..images import upright

        with Image.open(io.BytesIO(data)) as img:
            if img.mode not in ("RGB", "RGBA", "P"):
                raise ValueError(
                    f"mask_map maps colours: a mask must be an RGB(A) or palette image, got mode {img.mode}"
                )
            # a palette is read by its colours, its transparency ignored; RGBA keeps its alpha to be checked
            rgb = np.asarray(upright(img.convert("RGB") if img.mode == "P" else img), np.int64)
        if rgb.shape[-1] == 4:
            if (rgb[..., 3] != 255).any():  # what a see-through pixel's class is, no table can say
                raise ValueError("the colour mask has transparent pixels: save it without alpha, or opaque")
            rgb = rgb[..., :3]
        return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]


def _raw_values(data: bytes) -> np.ndarray:
    """A gray or palette mask's stored values as uint8 or uint16, of any range (``decode_mask`` without its
    0..255 limit)."""
    try:
        return decode_mask(data)
    except ValueError as err:
        if "must fit 0..255" not in str(err):
            raise
    from PIL import Image

    from ..images import upright

    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(upright(img)).astype(np.uint16)  # 16-bit gray: decode_mask read 0..65535


def is_int(value: Any) -> bool:
    """An int or a NumPy integer (a table built from arrays), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _value_key(key: Any) -> int:
    if not is_int(key) or not 0 <= int(key) <= _MAX_VALUE:
        raise ValueError(f"mask_map key {key!r}: a stored value is an int in 0..{_MAX_VALUE}")
    return int(key)


def _colour_code(key: Sequence) -> int:
    if len(key) != 3 or not all(is_int(v) and 0 <= int(v) <= 255 for v in key):
        raise ValueError(f"mask_map key {tuple(key)!r}: a colour is (r, g, b), each an int in 0..255")
    r, g, b = (int(v) for v in key)
    return (r << 16) | (g << 8) | b


def _describe(code: int, colour: bool) -> str:
    return f"({code >> 16}, {(code >> 8) & 255}, {code & 255})" if colour else str(code)


def of(value: Any) -> MaskMap | None:
    """``value`` as a ``MaskMap`` (``None`` stays ``None``; a ``MaskMap`` is kept)."""
    return value if value is None or isinstance(value, MaskMap) else MaskMap(value)


__all__ = ["MaskMap", "of"]
