"""Which lowering an op gets where its best DALI form differs by device.

On a GPU the cost of a batch is the count of launches and of waits for the host, not the pixels
touched: the ``"gpu"`` forms run every sample through the same batched operators (the auto-augment
policies without conditionals, ``augment_fused``; random erasing as a mask, not ``fn.erase``, whose
GPU operator rebuilds its kernel state and copies its regions from the host every batch). On a CPU
every pass costs
its full price, so the ``"cpu"`` forms touch only what changes (``select`` per op, ``fn.erase``).
Both forms give the same images (``tests/test_dali_forms.py``).

``dali`` uses the ``"gpu"`` forms and ``dali-cpu`` the ``"cpu"`` ones; ``GPUPIPE_DALI_FORM=gpu`` or
``cpu`` overrides that (for the benchmarks that compare them: ``benchmarks/op_costs.py --forms``).
"""

from __future__ import annotations

import os

#: The environment variable that overrides the choice of forms.
FORM_VARIABLE = "GPUPIPE_DALI_FORM"
FORMS = ("gpu", "cpu")


def lowering_form(gpu: bool) -> str:
    """``"gpu"`` where the image ops run on the GPU, else ``"cpu"``, unless ``GPUPIPE_DALI_FORM`` names one.

    Raises:
        ValueError: the variable names neither form.
    """
    chosen = os.environ.get(FORM_VARIABLE, "").strip().lower()
    if not chosen:
        return "gpu" if gpu else "cpu"
    if chosen not in FORMS:
        raise ValueError(f"{FORM_VARIABLE}={chosen!r}: expected one of {', '.join(FORMS)}")
    return chosen


__all__ = ["FORM_VARIABLE", "FORMS", "lowering_form"]
