"""What a loader's state and its ranks' exchange record besides the settings: classes, labels and pipeline.

The settings and the listing that decide the samples are ``gpupipe.loading.epochs.resume_fields`` (a state) and
``gpupipe.loading.agreement.AGREED`` (the ranks). This adds what decides what each sample *means* and looks like:

- ``classes`` (the class names in index order) and ``labels`` (a digest of every sample's target: its class index,
  its classes, its mask file): a state refuses a loader whose differ (each label would name another class, or a
  sample would carry another target, than in the run saved), and so do the ranks sharing a loader;
- ``pipeline`` (a digest of the ops, normalisation and batch ops): the ranks must build the same (one rank
  normalising with another mean trains one model on two inputs); a state resumed into another pipeline warns
  (``PipelineChanged``) and goes on: which samples follow is unchanged, and a changed augmentation is a choice;
- ``backend``: the ranks must use the same (its decoder and resampling differ slightly); a resume on another
  backend is exact (the augmentations are drawn on the host), so a state does not record it as a rule.

``checked`` also checks each field a state records for its type and range before anything reads it, so an edited or
damaged state is refused naming the field rather than failing later as a ``TypeError`` or ``ZeroDivisionError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import re
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import Error
from .agreement import listing_digest
from .config import INT_BOUNDS, MAX_SEED
from .epochs import resume_fields
from .resplit import SPLIT

#: Class lists up to this long are recorded (and named in errors) as they are; longer ones by their digest.
SHOWN_CLASSES = 16
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a function's or object's address differs from process to process


class PipelineChanged(Error, UserWarning):
    """A state was loaded into a loader whose pipeline differs from the one of the run saved: the same samples
    follow, augmented or normalised otherwise (``checked``). A warning category (``gpupipe.Error`` too)."""


def pipeline_digest(spec: Any, *, output: bool = True) -> str:
    """A digest of the pipeline ``spec``: its ops, normalisation, batch ops, box sanitising and (``output``) the
    output's dtype and memory format; 16 hex digits, alike in every process."""
    parts = [spec.ops, spec.normalize, spec.batch_ops, spec.sanitize, spec.ignore_index]
    said = _ADDRESS.sub("", repr(parts + ([spec.output] if output else [])))
    return hashlib.sha256(said.encode()).hexdigest()[:16]


#: ``targets`` of the sources digested while they live (a million labels take a few milliseconds; ``state_dict()``
#: may be called every few steps).
_TARGETS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def targets(source: Any) -> dict[str, Any]:
    """``{"classes", "labels"}`` of ``source``: its class names (written as a list up to ``SHOWN_CLASSES``, else their
    count and digest) and a digest of every sample's target (class index, classes, mask file's name), computed once
    per source."""
    try:
        return _TARGETS[source]
    except (KeyError, TypeError):  # not digested yet, or a source that cannot be weakly referred to
        pass
    names = [str(name) for name in source.classes]
    classes = str(names)  # a string (a state holds plain scalars only)
    if len(names) > SHOWN_CLASSES or len(classes) > 400:
        classes = f"{len(names)} classes {hashlib.sha256(chr(0).join(names).encode()).hexdigest()[:16]}"
    h = hashlib.sha256(str(getattr(source, "kind", "")).encode())
    labels = getattr(source, "labels", None)
    if labels is not None:
        h.update(np.ascontiguousarray(labels, np.int64).tobytes())
    for row in getattr(source, "label_lists", None) or ():
        h.update(len(row).to_bytes(8, "little") + np.ascontiguousarray(row, np.int64).tobytes())
    masks = getattr(source, "mask_names", None)
    if masks is not None:
        h.update(listing_digest(masks).encode())
    found = {"classes": classes, "labels": f"{len(source)} targets {h.hexdigest()[:16]}"}
    with contextlib.suppress(TypeError):
        _TARGETS[source] = found
    return found


def recorded(loader: Any, world_size: int) -> dict[str, Any]:
    """What a state of ``loader`` (sharing its epochs among ``world_size`` ranks) records for a resume to match:
    ``resume_fields``, the ``targets`` and the pipeline's digest (without the output's dtype and memory format)."""
    source = loader.source
    fields = resume_fields(loader.config, world_size, source.names, source.draws)
    return {**fields, **targets(source), "pipeline": pipeline_digest(loader.spec, output=False)}


def agreed(source: Any, spec: Any, backend: str) -> dict[str, Any]:
    """What the ranks sharing a loader compare besides its files and settings (``check_ranks_agree``'s ``extra``)."""
    return {**targets(source), "pipeline": pipeline_digest(spec), "backend": backend}


#: The fields ``recorded`` adds to ``resume_fields``; ``cursor`` leaves them out of what the cursor compares.
OWN = ("classes", "labels", "pipeline")


def cursor(match: Mapping[str, Any]) -> dict[str, Any]:
    """``match`` without ``OWN``: what ``EpochCursor.load_state_dict`` compares."""
    return {name: value for name, value in match.items() if name not in OWN}


#: The int fields a state may record and their ranges (``epoch``, ``batches_done`` and ``offset`` the cursor checks).
_INTS = {
    "format": (1, 2**31 - 1),  # a format newer than STATE_FORMAT: the cursor says that a later version wrote it
    "world_size": (1, 2**31 - 1),
    "batch_size": INT_BOUNDS["batch_size"],
    "seed": (0, MAX_SEED),
    "samples": (0, 2**62),
}
_BOOLS = ("shuffle", "drop_last", "even_batches")
_STRINGS = ("dataset", "draws", "backend", "classes", "labels", "pipeline")


def checked(state: Any, match: Mapping[str, Any]) -> Any:
    """``state`` with each field it records checked for its type and range (ints as ``int``), then its ``classes``
    and ``labels`` compared with ``match`` (``recorded``) and its ``pipeline`` (a warning, ``PipelineChanged``).

    Raises:
        ValueError: naming the field: a wrong type (a bool or float for an int, a string for a bool...), an int out of
            range, a ``rank`` outside the state's world size; ``classes`` or ``labels`` that differ.
    """
    if not isinstance(state, Mapping):
        return state  # the cursor refuses it as no state
    state = dict(state)
    for name, (low, high) in _INTS.items():
        if name in state:
            state[name] = _int(name, state[name], low, high)
    if "rank" in state:
        state["rank"] = _int("rank", state["rank"], 0, state.get("world_size", 1) - 1, "of the state's world_size")
    for name in _BOOLS:
        if name in state:
            if not isinstance(state[name], (bool, np.bool_)):
                raise ValueError(f"load_state_dict: {name} must be a bool, the state has {state[name]!r}")
            state[name] = bool(state[name])
    for name in _STRINGS:
        if name in state and not isinstance(state[name], str):
            raise ValueError(f"load_state_dict: {name} must be a string, the state has {state[name]!r}")
    epoch, core = state.get("epoch"), cursor(match)
    if any(state.get(name, ours) != ours for name, ours in core.items() if name not in SPLIT):
        return state  # the cursor refuses it, naming the first setting or listing that differs
    for name, why in (
        (
            "classes",
            "each label is an index into the classes, so a label would name another class than in the run saved",
        ),
        ("labels", "the samples that follow would carry other targets than in the run saved"),
    ):
        if name in state and state[name] != match[name]:
            raise ValueError(
                f"load_state_dict: {name} differ: the state has {name} {state[name]!r}, this loader {name} "
                f"{match[name]!r}; {why}. To train on the changed dataset from epoch {epoch} on, call "
                f"loader.set_epoch({epoch}) instead of loading the state"
            )
    if "pipeline" in state and state["pipeline"] != match["pipeline"]:
        warnings.warn(
            f"load_state_dict: this loader's pipeline (digest {match['pipeline']}) differs from that of the run saved "
            f"({state['pipeline']}): the same samples follow, augmented or normalised by this pipeline",
            PipelineChanged,
            stacklevel=6,  # the caller of Loader.load_state_dict (through agreement.load_alike and load)
        )
    return state


def _int(name: str, value: Any, low: int, high: int, bound: str = "") -> int:
    """``value`` as an int in ``low..high`` (an int, a numpy int or a 0-d integer tensor; not a bool or a float)."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"load_state_dict: {name} must be an int, the state has {value!r}") from None
    if isinstance(number, bool) or not low <= number <= high:
        raise ValueError(
            f"load_state_dict: {name} must be an int in {low}..{high}{' ' + bound if bound else ''}, "
            f"the state has {value!r}"
        )
    return int(number)


def load(loader_cursor: Any, state: Any, match: Mapping[str, Any], *, samples: int, rank: int) -> tuple[int, ...]:
    """Loads ``state`` into ``loader_cursor`` (an ``EpochCursor``) once ``checked`` against ``match`` (``recorded``)."""
    return loader_cursor.load_state_dict(checked(state, match), match=cursor(match), samples=samples, rank=rank)


__all__ = ["PipelineChanged", "pipeline_digest", "targets", "recorded", "agreed", "checked", "load", "OWN"]
