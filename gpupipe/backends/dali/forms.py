"""Which lowering an op gets where its best DALI form differs by device.

On a GPU the cost of a batch is the count of launches and of waits for the host, not the pixels
touched: the ``"gpu"`` form runs every sample through the same batched operators (the auto-augment
policies without conditionals, ``augment_fused``). On a CPU every pass costs its full price, so the
``"cpu"`` form touches only what changes (``select`` per op). Both forms give the same images
(``tests/test_dali_forms.py``). Measured on an H200 (batch 256, 224 px,
``benchmarks/results/h200-2026-11-27-2``): RandAugment 13.0 ms per batch in the ``"gpu"`` form, 18.9 ms in
the ``"cpu"`` form, 12.5 ms written by hand in DALI. (Random erasing had a ``"gpu"`` form too, a mask; it
cost 20.3 ms against ``fn.erase``'s 6.6 ms and was removed.)

``dali`` uses the ``"gpu"`` forms and ``dali-cpu`` the ``"cpu"`` ones; ``GPUPIPE_DALI_FORM=gpu`` or
``cpu`` overrides that (for the benchmarks that compare them: ``benchmarks/op_costs.py --forms``).
``GPUPIPE_DALI_FORM=torch`` runs a spec's trailing policies and random erasing as batched torch ops on
DALI's uint8 output instead (``torch_form``; image-level targets only), the rest of the graph in the
device's form: the candidate for the heavy setting, opt-in until a GPU run measures it.
"""

from __future__ import annotations

import os

#: The environment variable that overrides the choice of forms.
FORM_VARIABLE = "GPUPIPE_DALI_FORM"
FORMS = ("gpu", "cpu", "torch")


def lowering_form(gpu: bool) -> str:
    """``"gpu"`` where the image ops run on the GPU, else ``"cpu"``, unless ``GPUPIPE_DALI_FORM`` names one
    (``"torch"`` too).

    Raises:
        ValueError: the variable names neither form.
    """
    chosen = os.environ.get(FORM_VARIABLE, "").strip().lower()
    if not chosen:
        return "gpu" if gpu else "cpu"
    if chosen not in FORMS:
        raise ValueError(f"{FORM_VARIABLE}={chosen!r}: expected one of {', '.join(FORMS)}")
    return chosen


def graph_form(form: str, gpu: bool) -> str:
    """The form of the ops inside DALI's graph: ``form``, or the device's where ``form`` is ``"torch"``
    (the ops it cannot take after the graph stay there)."""
    if form == "torch":
        return "gpu" if gpu else "cpu"
    return form


__all__ = ["FORM_VARIABLE", "FORMS", "graph_form", "lowering_form"]
