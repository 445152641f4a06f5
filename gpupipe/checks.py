"""Argument checks shared by every layer: one home for each rule, each error naming the argument.

``what`` is how the message names the argument (``"batch_size"``, ``"Resize: max_size"``); ``name``
and ``arg`` (the op and its argument) are joined as ``"name: arg"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def positive_int(what: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int, checked.

    Raises:
        ValueError: naming the argument, when ``value`` is not an int (a bool is not) in ``minimum..maximum``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be an int in {minimum}..{maximum}, got {value!r}")
    return int(value)


def number_range(name: str, arg: str, value: Any, lo: float, hi: float) -> tuple[float, float]:
    """Validates a ``(min, max)`` pair within ``[lo, hi]`` (``value``: the caller's argument, of any type)."""
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {arg} must be a (min, max) pair, got {value!r}") from None
    if not (lo <= a <= b <= hi) or math.isnan(a) or math.isnan(b):
        raise ValueError(f"{name}: {arg} must satisfy {lo} <= min <= max <= {hi}, got {value!r}")
    return a, b


def probability(name: str, p: float, arg: str = "p") -> float:
    """``p`` as a float, checked to be a probability in ``[0, 1]``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: {arg} must be a probability in [0, 1], got {p!r}")
    return float(p)


def is_int(value: Any) -> bool:
    """A JSON integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)
