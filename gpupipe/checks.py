"""Argument checks shared by every layer: one home for each rule, each error naming the argument.

``what`` is how the message names the argument (``"batch_size"``, ``"Resize: max_size"``); ``name``
and ``arg`` (the op and its argument) are joined as ``"name: arg"``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import operator
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar

import numpy as np


def positive_int(what: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int, checked: an int, a numpy int or a 0-d integer tensor (``operator.index``).

    Raises:
        ValueError: naming the argument, when ``value`` is not an int (a bool or a float is not) in
            ``minimum..maximum``.
    """
    number = int_or_none(value)
    if number is None or number < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value!r}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{what} must be an int in {minimum}..{maximum}, got {value!r}")
    return number


def int_or_none(value: Any) -> int | None:
    """``value`` as an int where it is one (``operator.index``: an int, a numpy int, a 0-d integer tensor), else
    ``None`` (a bool of any kind, a float, a string...)."""
    if isinstance(value, (bool, np.bool_)) or getattr(value, "ndim", 0) != 0:  # an array of one int is no int
        return None
    try:
        number = operator.index(value)
    except (TypeError, ValueError, RuntimeError):  # a float, a tensor of several elements or of floats
        return None
    return None if isinstance(number, bool) else int(number)


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


def did_you_mean(given: str, choices: Iterable[str], quote: bool = True) -> str:
    """`` (did you mean 'X'?)`` naming the one choice closest to a mistyped ``given``, or ``""`` when none is close.

    For error messages: ``f"unknown preset {name!r}{did_you_mean(name, PRESETS)}; choose one of ..."``;
    ``quote=False`` names a command-line flag as it is typed (``--batch-size``).
    """
    choices = list(choices)
    by_case = {c.lower(): c for c in reversed(choices)}  # case aside (DALI-CPU, TorchVision), the first choice
    close = difflib.get_close_matches(given.lower(), list(by_case), n=1, cutoff=0.75)
    if not close:
        return ""
    meant = by_case[close[0]]
    if meant == given:
        return ""
    return f" (did you mean {meant!r}?)" if quote else f" (did you mean {meant}?)"


P = ParamSpec("P")
R = TypeVar("R")


def explained_keywords(hints: dict[str, str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: a keyword the function does not take raises ``TypeError`` naming the one meant (``did_you_mean``),
    or, for a name of ``hints`` (another API's argument, such as torch ``DataLoader``'s ``num_workers``), what to
    pass instead; the function's signature is unchanged."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            unknown = [name for name in kwargs if name not in signature.parameters]
            if unknown:
                name, hint = unknown[0], hints.get(unknown[0])
                why = f": {hint}" if hint else did_you_mean(name, signature.parameters)
                raise TypeError(f"{function.__name__}() got an unexpected keyword argument {name!r}{why}")
            return function(*args, **kwargs)

        return checked

    return decorate
