"""Which of Lightning's loops asks for a gpupipe loader, and for what: training, or evaluation and prediction
(which read a loader in order, each sample once), or only a check that it can be iterated (``PROBES``).

One loader object that Lightning both trains and validates on (``train_dataloader()`` and ``val_dataloader()``
return it) is read in the evaluation loop aside (``evaluates_trained``): Lightning gives a torch ``DataLoader``
a sampler per use, each its own order, and a gpupipe loader's one epoch cursor must not take the
validation pass for the training one. Used by ``gpupipe.loading.frameworks``.
"""

from __future__ import annotations

import sys
import weakref
from types import FrameType
from typing import Any

from ..env import on_stack


def in_fit(trainer: Any, loader: Any) -> bool:
    """Whether ``loader`` is one of the loaders ``trainer``'s fit loop trains on."""
    combined = getattr(getattr(trainer, "fit_loop", None), "_combined_loader", None)
    return any(part is loader for part in getattr(combined, "flattened", ()))


#: ``(module, function)`` that call ``iter(loader)`` only to check that it can (Lightning, also as it sets up the
#: validation loader of a fit resumed mid-epoch, while the training pass is under way).
PROBES = (
    ("lightning.pytorch.trainer.connectors.data_connector", "_check_dataloader_iterable"),
    ("pytorch_lightning.trainer.connectors.data_connector", "_check_dataloader_iterable"),
)


def probing() -> bool:
    """Whether the call stack is in one of ``PROBES`` (an ``iter()`` that is never read)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and (frame.f_globals.get("__name__"), frame.f_code.co_name) not in PROBES:
        frame = frame.f_back
    return frame is not None


#: The modules of Lightning's loops (its data fetchers included, which are not loops).
LOOP_MODULES = ("lightning.pytorch.loops.", "pytorch_lightning.loops.")


def asking_loop() -> Any:
    """The innermost Lightning loop on the call stack (the one asking for the loader: a ``_FitLoop``,
    ``_TrainingEpochLoop``, ``_EvaluationLoop``...), else ``None``. A checkpoint's ``state_dict`` taken at
    the end of validation is asked by the fit loop (inside the validation loop's hooks)."""
    return on_stack(LOOP_MODULES, lambda owner: owner if type(owner).__name__.endswith("Loop") else None)


def reads_in_order(loop: Any) -> bool:
    """Whether ``loop`` is one of Lightning's loops that read a loader in order, each sample once: evaluation
    (validation, its sanity check, test) and prediction; it gives torch's ``DataLoader`` an unshuffled sampler."""
    return type(loop).__name__ in ("_EvaluationLoop", "_PredictionLoop")


def aside_pass(loader: weakref.ref) -> bool:
    """``evaluates_trained`` of a loader held weakly (the loader's cursor asks it as each pass begins)."""
    return evaluates_trained(loader())


def evaluates_trained(loader: Any) -> bool:
    """Whether Lightning's evaluation or prediction loop asks for ``loader`` while its fit trains on it too
    (``train_dataloader()`` and ``val_dataloader()`` return one object, as a quick overfit check does).

    Lightning gives torch's ``DataLoader`` a sampler per use (``DistributedSampler(shuffle=True)`` in
    training, ``shuffle=False`` in validation), each its own order; a gpupipe loader is one object, so
    such a pass is read aside (``EpochCursor.aside``): unshuffled where Lightning's own sharding applies
    (``framework_config``), it takes no epoch from the validation loop and leaves the training epoch, its
    batches and what ``state_dict()`` says as they were.
    """
    loop = asking_loop()
    return reads_in_order(loop) and in_fit(getattr(loop, "trainer", None), loader)


__all__ = [
    "LOOP_MODULES",
    "PROBES",
    "asking_loop",
    "aside_pass",
    "evaluates_trained",
    "in_fit",
    "probing",
    "reads_in_order",
]
