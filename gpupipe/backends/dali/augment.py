"""The DALI lowerings of the auto-augment policies (RandAugment, TrivialAugment Wide, AutoAugment):
the plan's op choices applied per sample with DALI's ``nvidia.dali.auto_aug`` augmentations.

Imported by ``lowering``; they join its table (``table``).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any

from ... import ops as O
from ...targets import IMAGE_LEVEL
from .augment_fused import levels_of, lower_fused, names_of
from .augment_suite import suite
from .table import Graph, lowering

_IMAGE_ONLY = "DALI's auto_aug applies its geometric ops to one input, not to the targets"


def fill_refused(op: Any) -> str:
    """Why DALI cannot keep ``op.fill`` (a lowering's ``refuses``): a fill that differs per channel, where DALI's
    ``warp_affine`` and ``rotate`` fill with one value; ``""`` for one value."""
    if len(set(op.fill)) > 1:
        return (
            f"fill={op.fill} differs per channel, and the DALI backends' warp_affine and rotate fill with one "
            "value: give one value, or use backend='torchvision'"
        )
    return ""


def one_fill(op: Any) -> float:
    """``op.fill`` as the one value DALI's ``warp_affine`` and ``rotate`` fill with.

    Raises:
        ValueError: a fill that differs per channel (refused, not approximated; ``fill_refused``).
    """
    refused = fill_refused(op)
    if refused:
        raise ValueError(f"{op.name}: {refused}")
    return op.fill[0]


@lowering(O.RandAugment, O.TrivialAugment, O.AutoAugment, targets=IMAGE_LEVEL, why=_IMAGE_ONLY, refuses=fill_refused)
def _auto_augment(g: Graph, j: int, op) -> None:
    """The planned ops of RandAugment / TrivialAugment Wide / AutoAugment with DALI's auto_aug ops, at
    torchvision's magnitudes (``suite``), resampled with the op's interpolation, ``fill`` where no pixel maps:
    split per op with ``select`` (the ``"cpu"`` form), or every op on every sample with neutral parameters
    where another was drawn (the ``"gpu"`` form, see ``augment_fused``)."""
    from nvidia.dali import types
    from nvidia.dali.auto_aug.core import select, signed_bin

    fill = one_fill(op)
    interp = types.INTERP_NN if op.interpolation == "nearest" else types.INTERP_LINEAR
    if g.form == "gpu":
        lower_fused(g, j, op, fill, interp)
        return
    names = names_of(op)
    size = g.spec.size_before(j)
    assert size is not None  # the op needs images of one size: build_spec refuses it where sizes vary
    ordered = suite(op, names, size)
    ops, signs = g.p(j, "ops"), g.p(j, "signs")
    if isinstance(op, O.RandAugment):
        bins = [op.magnitude] * op.num_ops
    elif isinstance(op, O.TrivialAugment):
        bins = [g.p(j, "bins")]
    else:
        bins = [g.p(j, "bins")[level] for level in range(levels_of(op))]
    for level, magnitude_bin in enumerate(bins):
        g.images = select(
            ordered,
            ops[level],
            data=g.images,
            magnitude_bin=signed_bin(magnitude_bin, random_sign=signs[level]),
            num_magnitude_bins=op.num_magnitude_bins,
            fill_value=fill,
            interp_type=interp,
        )


@contextlib.contextmanager
def quiet_auto_aug():
    """Silences exactly the deprecation notices DALI's own auto_aug module prints about the
    experimental aliases it calls (``fn.experimental.filter`` / ``equalize``).

    DALI forces them through its own ``catch_warnings()`` + ``simplefilter("default")``, so a filter
    cannot stop them; ``warnings.showwarning`` is wrapped instead. Pipelines are traced in the loader's
    thread while runs build in the background, so the wrapper is counted: installed by the first
    thread in, restored by the last one out (a swap restored by one thread would unmute the other).
    """
    with _QUIET["lock"]:
        if _QUIET["depth"] == 0:
            _QUIET["shown"] = shown = warnings.showwarning

            def show(message, category, *args, **kwargs):
                if category is DeprecationWarning and "nvidia.dali.fn.experimental" in str(message):
                    return
                shown(message, category, *args, **kwargs)

            _QUIET["show"] = warnings.showwarning = show
        _QUIET["depth"] += 1
    try:
        yield
    finally:
        with _QUIET["lock"]:
            _QUIET["depth"] -= 1
            if _QUIET["depth"] == 0 and warnings.showwarning is _QUIET["show"]:
                warnings.showwarning = _QUIET["shown"]


_QUIET: dict = {"lock": threading.Lock(), "depth": 0, "shown": None, "show": None}
