"""The op table of docs/pipelines.md, derived from the op registry (``{{ op_table() }}``).

One row per op gpupipe ships (``gpupipe.ops.OP_TYPES``): its constructor, the first sentence
of its docstring, and what it does to masks and boxes, read from the op (its effect and the
target kinds it carries) and from every backend's lowering (a lowering that refuses a kind
says why). Nothing in it is typed by hand, so a new op appears once it is registered.
"""

from __future__ import annotations

import importlib
import inspect
from typing import List

FOLLOWS = {"geometric": "follows", "pixel": "unchanged", "normalize": "unchanged", "decode": "yes",
           "target": "yes", "output": "yes", "batch": "-"}


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, tuple):
        inner = ", ".join(_value(v) for v in value)
        return f"({inner})"
    return repr(value)


def signature(cls) -> str:
    """``Name(arg, *, key=default)`` as the constructor takes it."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    out, star = [], False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        out.append(p.name if p.default is p.empty else f"{p.name}={_value(p.default)}")
    return f"{cls.__name__}({', '.join(out)})"


def meaning(cls) -> str:
    doc = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
    first = doc.split(". ")[0].rstrip(".")
    return first.replace("|", "\\|").replace("``", "`")


def _tables() -> list:
    tables = []
    for module in ("gpupipe.backends.torchvision.lowering", "gpupipe.backends.dali.lowering"):
        try:
            tables.append(importlib.import_module(module).LOWERINGS)
        except ImportError:  # DALI missing where the docs are built: its refusals are not listed
            continue
    return tables


def carried(cls, kind, tables) -> str:
    if kind not in cls.carries:
        return "-"
    refused = [(t.backend, t[cls].why) for t in tables if cls in t and kind not in t[cls].targets]
    if refused:
        return f"refused on {', '.join(name for name, _ in refused)} ({refused[0][1]})"
    return FOLLOWS[cls.effect.value]


def table() -> str:
    from gpupipe.ops import OP_TYPES
    from gpupipe.targets import TargetKind

    tables = _tables()
    rows: List[str] = ["| op | meaning | masks | boxes |", "|---|---|---|---|"]
    for cls in OP_TYPES:
        cells = [f"`{signature(cls)}`", meaning(cls), carried(cls, TargetKind.MASK, tables),
                 carried(cls, TargetKind.BOXES, tables)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
